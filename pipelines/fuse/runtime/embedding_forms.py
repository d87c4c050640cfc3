"""embedding -> partitioned mean: the gather fused into the pool (EMBEDDING_FORMS, registered after POOLING_PAIRS).

`F.embedding(ids, table)` (what Dynamo records for an `nn.Embedding` call) feeding any partitioned mean the pass
has already replaced, becomes one `embedding_partitioned_mean(table, ids, offsets)` (embedding_pool.py): the
[N, D] rows are never written. It works on what the partitioned-mean entries left in the graph, so every form they
match comes with it: the pairs' replacement calls (index_add, scatter_add, scatter_reduce, segment_reduce), the
hand forms' (the Dynamo-unrolled loop, split) and the `liger_fuse::partitioned_mean` op itself (what the loop
capture writes for the recsys demo's naive loop, or what a user calls).

Why after the pooling entries and not as a pair before them: the subgraph matcher drops a match whose inner node
(here the embedding) has a user outside it, silently; after them, an embedding with another user is seen, counted
with its reason, and its pool keeps the plain kernel (the plain pair's replacement stays). Every replacement reads
`values` by rows only (passes it to the pool, slices rows, reads its length or device), and
`embedding(ids)[s:e] == embedding(ids[s:e])`: so the ids stand in for the values and the pool gathers from the
table (`gathered`).
"""

from __future__ import annotations

import functools
import inspect

import torch
import torch.nn.functional as F
from torch import fx

from .embedding_pool import ID_DTYPES
from .fx_match import arg
from .fx_match import example
from .fx_match import is_call
from .patterns import HandForm
from .patterns import Match

NAME = "embedding_partitioned_mean"
POOLED_FAMILY = "partitioned_mean"  # the replacements whose values the gather can take over
POOL_OPS = (torch.ops.liger_fuse.partitioned_mean, torch.ops.liger_fuse.partitioned_mean.default)
SPARSE_REASON = (
    "sparse=True asks for a sparse table gradient: the pass's compiled backward is dense "
    "(eager embedding_partitioned_mean(..., sparse=True) gives the sparse one)"
)
# F.embedding's arguments after (input, weight): (position, name, the value the fused kernel assumes, why not)
_EMBEDDING_DEFAULTS = (
    (2, "padding_idx", None, "padding_idx is set (its row's gradient must stay zero): the kernel does not skip it"),
    (3, "max_norm", None, "max_norm renormalises the table's rows in place: the kernel does not"),
    (5, "scale_grad_by_freq", False, "scale_grad_by_freq scales the gradient by id counts: the kernel does not"),
    (6, "sparse", False, SPARSE_REASON),
)
OTHER_USER_REASON = "the embedding's [N, D] rows have another user: they are written anyway"


def op_pool_replacement(values, offsets, *, pool):
    """The `liger_fuse::partitioned_mean(values, offsets)` call, as a replacement the gather can wrap."""
    return pool(values, offsets)


def embedding_partitioned_mean_pattern(ids, table, offsets):
    """What this entry replaces, one of its forms (the others: any partitioned mean over the embedding's rows)."""
    return torch.ops.liger_fuse.partitioned_mean(F.embedding(ids, table), offsets)


@functools.cache
def gathered(replacement):
    """replacement(values, ...) over the rows of table[ids]: the ids take the values' place, the pool gathers."""

    def embedding_gather(table, *args, pool):
        return replacement(*args, pool=functools.partial(pool, table))

    embedding_gather.__name__ = embedding_gather.__qualname__ = f"embedding_gather_{replacement.__name__}"
    return embedding_gather


def match_embedding_pool(node) -> Match | None:
    """A pooled call of the partitioned-mean family whose values are an embedding's rows, else None."""
    pooled = _pooled_values(node)
    if pooled is None:
        return None
    replacement, position = pooled
    embedding = node.args[position] if len(node.args) > position else None
    if not is_call(embedding, (F.embedding,)):
        return None
    ids, table = arg(embedding, 0, "input"), arg(embedding, 1, "weight")
    args = (table, *node.args[:position], ids, *node.args[position + 1 :])
    match = Match(node, args, table, [node, embedding], replacement=gathered(replacement))
    match.declined = _reason_against(embedding, ids)
    return match


def _pooled_values(node) -> tuple | None:
    """(the replacement, the position of its values argument) for the op or a partitioned-mean replacement call."""
    if is_call(node, POOL_OPS) and not node.kwargs:
        return op_pool_replacement, 0
    if node.op != "call_function" or getattr(getattr(node.target, "kernel", None), "family", None) != POOLED_FAMILY:
        return None
    replacement = node.target.replacement
    names = [n for n, p in inspect.signature(replacement).parameters.items() if p.kind != p.KEYWORD_ONLY]
    return (replacement, names.index("values")) if "values" in names else None


def _reason_against(embedding: fx.Node, ids) -> str:
    """ "" when the fused kernel computes what the embedding + pool did, else why not (counted, plain pool kept)."""
    if len(embedding.users) > 1:
        return OTHER_USER_REASON
    for position, name, expected, reason in _EMBEDDING_DEFAULTS:
        if arg(embedding, position, name, expected) != expected:
            return reason
    value = example(ids)
    if value is None:
        return "the ids have no example value to check"
    if value.dim() != 1 or value.dtype not in ID_DTYPES:
        return f"the kernel takes 1-D int32 / int64 ids, got {value.dtype} of rank {value.dim()}"
    return ""


# --- nn.EmbeddingBag(mode="mean") over real ids: the same kernel, offsets [B] (or [B+1]) as the bag gives them ------
BAG_NAME = "embedding_bag_partitioned_mean"
# F.embedding_bag(input, weight, offsets, max_norm, norm_type, scale_grad_by_freq, mode, sparse, per_sample_weights,
# include_last_offset, padding_idx): (position, name, the value the fused kernel assumes, why not)
_BAG_DEFAULTS = (
    (3, "max_norm", None, "max_norm renormalises the table's rows in place: the kernel does not"),
    (5, "scale_grad_by_freq", False, "scale_grad_by_freq scales the gradient by id counts: the kernel does not"),
    (7, "sparse", False, SPARSE_REASON),
    (8, "per_sample_weights", None, "per_sample_weights weight the rows: the kernel takes a plain mean"),
    (
        10,
        "padding_idx",
        None,
        "padding_idx is set (its ids leave the bag and the mean's count): the kernel does not skip them",
    ),
)


def embedding_bag_mean_gather_pattern(ids, table, offsets):
    """What BAG_NAME replaces: nn.EmbeddingBag(mode="mean")'s call (ids 1-D with offsets, or 2-D fixed-length bags)."""
    return F.embedding_bag(ids, table, offsets, mode="mean")


def embedding_bag_gather_replacement(table, ids, offsets, include_last=False, *, pool):
    """The bag's offsets as the kernel's [B+1]: [B] gets N appended; 2-D ids [B, L] (offsets None) are flattened."""
    if offsets is None:
        bags, length = ids.shape
        offsets = torch.arange(bags + 1, dtype=torch.int64, device=ids.device) * length
        return pool(table, ids.reshape(-1), offsets)
    if include_last:
        return pool(table, ids, offsets)
    end = torch.full((1,), ids.shape[0], dtype=offsets.dtype, device=offsets.device)
    return pool(table, ids, torch.cat([offsets, end]))


def match_embedding_bag_mean(node) -> Match | None:
    """`F.embedding_bag(ids, table, offsets, ..., mode="mean", ...)` with real ids (the identity-ids form is the
    embedding_bag_mean pair's, which claims it first), else None."""
    if not is_call(node, (F.embedding_bag,)) or arg(node, 6, "mode", "mean") != "mean":
        return None
    ids, table, offsets = arg(node, 0, "input"), arg(node, 1, "weight"), arg(node, 2, "offsets")
    include_last = arg(node, 9, "include_last_offset", False)
    if not isinstance(include_last, bool):
        return None
    match = Match(
        node, (table, ids, offsets, include_last), table, [node], replacement=embedding_bag_gather_replacement
    )
    match.name = BAG_NAME
    match.declined = _bag_reason_against(node, ids, offsets)
    return match


def _bag_reason_against(node: fx.Node, ids, offsets) -> str:
    for position, name, expected, reason in _BAG_DEFAULTS:
        if arg(node, position, name, expected) != expected:
            return reason
    value = example(ids)
    if value is None:
        return "the ids have no example value to check"
    if value.dtype not in ID_DTYPES:
        return f"the kernel takes int32 / int64 ids, got {value.dtype}"
    if (value.dim(), offsets is None) not in ((1, False), (2, True)):
        return f"the kernel takes 1-D ids with offsets or 2-D ids without, got rank {value.dim()} ({offsets=})"
    if offsets is not None:
        offsets_value = example(offsets)
        if offsets_value is None or offsets_value.dim() != 1 or offsets_value.dtype not in ID_DTYPES:
            return "the kernel takes 1-D int32 / int64 offsets"
    return ""


EMBEDDING_FORMS = (
    HandForm(NAME, NAME, embedding_partitioned_mean_pattern, op_pool_replacement, match_embedding_pool),
    HandForm(
        BAG_NAME, NAME, embedding_bag_mean_gather_pattern, embedding_bag_gather_replacement, match_embedding_bag_mean
    ),
)
