"""K fused embedding pools meeting in one torch.cat -> one grouped launch (GROUPED_EMBEDDING_FORMS, after
EMBEDDING_FORMS): what an EmbeddingBagCollection-like encoder (K `nn.EmbeddingBag(mode="mean")`, or K `nn.Embedding`
+ any pooled form the pass knows, outputs concatenated along dim 1) leaves after the single-feature entries.

The single entries have already replaced each feature with a call of its replacement bound to
`triton_embedding_partitioned_mean`; every such replacement ends in `pool(table, ids, offsets)`. So the grouped call
runs each feature's replacement with a `pool` that only collects its (table, ids, offsets) (the offsets arithmetic
the form needs, e.g. lengths -> offsets, stays in the graph), then calls the grouped op once. Inputs of the cat that
are not fused pools keep their place: the grouped output is split into the features' column blocks and concatenated
with them; when every input is a fused pool, the op's output is the cat.

Left alone, with the reason counted (each feature keeps its single op): a pool whose output has another user than
the cat, the same pool concatenated twice, tables of different dtypes or devices. A pool the single entries left
alone (sparse=True, padding_idx, ...) is no fused pool: it stays an input of the cat beside the group.
"""

from __future__ import annotations

import functools

import torch

from .embedding_forms import NAME as SINGLE_FAMILY
from .fx_match import arg
from .fx_match import example
from .patterns import HandForm
from .patterns import Match

NAME = "grouped_embedding_partitioned_mean"
CAT_OPS = (torch.cat, torch.concat, torch.concatenate)
OTHER_USER_REASON = "a pool's output has another user than the cat: it would be computed twice"
MIXED_DTYPE_REASON = "the tables' dtypes differ ({}): one launch reads one element type"
MIXED_DEVICE_REASON = "the tables are on different devices ({})"
REPEATED_REASON = "the same pool is concatenated twice"


def grouped_pattern(ids_a, table_a, offsets_a, ids_b, table_b, offsets_b):
    """One of the forms this entry replaces (two features; the matcher takes any K >= 2 and any pooled form)."""
    bag = torch.nn.functional.embedding_bag
    return torch.cat([bag(ids_a, table_a, offsets_a, mode="mean"), bag(ids_b, table_b, offsets_b, mode="mean")], 1)


def _collect(table, ids, offsets):
    return table, ids, offsets


def grouped_pool_replacement(*args, pool):
    """Documentation only: the matcher builds each match's replacement (`grouped_replacement`)."""
    raise NotImplementedError("built per match by grouped_replacement")


@functools.cache
def grouped_replacement(features: tuple, layout: tuple):
    """The cat of `layout` ("g", j): feature j's column block of the grouped op, ("o", k): the cat's k-th other input;
    `features` ((replacement, argument count) per feature) turn the flat arguments into (table, ids, offsets)."""

    def grouped_embedding_pool(*args, pool):
        collected, at = [], 0
        for replacement, count in features:
            collected.append(replacement(*args[at : at + count], pool=_collect))
            at += count
        others = args[at:]
        tables, ids, offsets = (list(part) for part in zip(*collected, strict=True))
        out = pool(tables, ids, offsets)
        if all(kind == "g" for kind, _ in layout):
            return out
        blocks = torch.split(out, [t.shape[1] for t in tables], dim=1)
        return torch.cat([blocks[j] if kind == "g" else others[j] for kind, j in layout], dim=1)

    grouped_embedding_pool.__name__ = grouped_embedding_pool.__qualname__ = f"grouped_embedding_pool_{len(features)}"
    return grouped_embedding_pool


def _fused_pool(node) -> bool:
    """A call the single-feature entries wrote: a replacement bound to a kernel of the fused-gather family."""
    kernel = getattr(getattr(node, "target", None), "kernel", None)
    return getattr(node, "op", None) == "call_function" and getattr(kernel, "family", None) == SINGLE_FAMILY


def match_grouped(node) -> Match | None:
    """A torch.cat along dim 1 of 2-D pools with at least two fused pools among its inputs, else None."""
    if getattr(node, "op", None) != "call_function" or node.target not in CAT_OPS:
        return None
    items, dim = arg(node, 0, "tensors"), arg(node, 1, "dim", 0)
    value = example(node)
    if not isinstance(items, (list, tuple)) or value is None or value.dim() != 2 or dim not in (1, -1):
        return None
    pools = [item for item in items if _fused_pool(item)]
    if len(pools) < 2:
        return None
    layout, others = [], []
    for item in items:
        if _fused_pool(item):
            layout.append(("g", pools.index(item)))
        else:
            layout.append(("o", len(others)))
            others.append(item)
    features = tuple((pool.target.replacement, len(pool.args)) for pool in pools)
    args = tuple(a for pool in pools for a in pool.args) + tuple(others)
    tables = [pool.args[0] for pool in pools]
    replacement = grouped_replacement(features, tuple(layout))
    match = Match(node, args, tables[0], [node, *pools], replacement=replacement)
    match.declined = _reason_against(pools, tables)
    return match


def _reason_against(pools, tables) -> str:
    if len(set(pools)) != len(pools):
        return REPEATED_REASON
    if any(len(pool.users) > 1 for pool in pools):
        return OTHER_USER_REASON
    values = [example(t) for t in tables]
    if any(v is None for v in values):
        return "a table has no example value to check"
    dtypes = sorted({str(v.dtype) for v in values})
    if len(dtypes) > 1:
        return MIXED_DTYPE_REASON.format(", ".join(dtypes))
    devices = sorted({str(v.device) for v in values})
    if len(devices) > 1:
        return MIXED_DEVICE_REASON.format(", ".join(devices))
    return ""


GROUPED_EMBEDDING_FORMS = (HandForm(NAME, NAME, grouped_pattern, grouped_pool_replacement, match_grouped),)
