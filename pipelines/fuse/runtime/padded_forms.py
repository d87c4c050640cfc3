"""Masked means over padded rows: `(padded * mask).sum(1) / counts`, the mask `arange(L)[None, :] < lengths[:, None]`.

Two forms, told apart by where the padded [B, L, D] tensor comes from:
- `padded_split_masked_mean`: `pad_sequence(torch.split(values, sizes), batch_first=True)`, or the loop capture's
  op for it on a sizes tensor (PARTITION_PADS, matched by name). Replaced by the partitioned mean on the unpadded
  values [N, D] (the pad is never written), the split sizes giving the offsets.
- `padded_masked_mean`: any other [B, L, D] tensor. Replaced by the padded masked mean (padded.py), which reads only
  the rows the mask keeps.

Hand-written matchers (HandForm), not pattern / replacement pairs: the replacement needs the mask's `lengths`, a node
inside the mask's subgraph, and the mask has more spellings (`[:, None]` or `.unsqueeze(1)`, `<` or `>` either way,
casts before or after `[..., None]`) than fixed patterns should list; what they accept is proved from the shapes of
the example values instead (the arange along dim 1, the lengths a [B, 1] column of a 1-D integer [B] tensor).

What is proved and what is not, and why the result is exact anyway:
- The counts. Only when counts is provably those lengths (through shape-only ops and exact casts), clamped with
  `clamp(min=1)` or not, and does not change the result's dtype, is the division fused into the kernel (an empty row
  gives 0 or 0 / 0 = NaN as the user's code does). Any other counts (`mask.sum(1, keepdim=True)`, a tensor of its
  own) is divided by as the user's code does, after the op. Either way: replaced.
- The split sizes against the mask's lengths. The sizes are Python ints or SymInts (from `lengths.tolist()` across
  the graph break), the mask's lengths a tensor: the trace cannot prove them equal. So the replacement computes what
  the user's code computes for any lengths: partition b keeps its first rows_b = min(size_b, max(lengths_b, 0))
  rows, through 2B partitions of the same kernel (b's kept rows, then the rest of its split chunk, empty when the
  lengths match: what that costs is one more [B, D] output), and its mean is scaled by rows_b / counts_b (exactly
  1.0 when counts is the clamped lengths and they match the sizes). The capture's op takes the sizes as a tensor:
  when the mask's lengths are that tensor (through exact casts), B partitions do.
Anything else (the mask not provably a length mask along dim 1, batch_first=False, left padding, a non-finite
padding value, the values of a split not pooled whole) is left alone, counted with the reason.

Rows past a length are not read: a NaN or Inf stored in the pad of x does not reach the output, where `x * mask`
turns it into NaN (the documented difference of padded.py).
"""

from __future__ import annotations

import math
import operator

import torch
from torch import fx

from .fx_match import arg
from .fx_match import example
from .fx_match import is_call
from .fx_match import same_size
from .fx_match import strip_unary
from .padded import MODES
from .patterns import HandForm
from .patterns import Match
from .patterns import offsets_from_lengths
from .patterns import offsets_from_sizes

_DIVIDE = {"functions": (operator.truediv, torch.div, torch.true_divide), "methods": ("div", "true_divide")}
_MUL = {"functions": (operator.mul, torch.mul), "methods": ("mul",)}
_LESS = {"functions": (operator.lt, torch.lt), "methods": ("lt",)}
_GREATER = {"functions": (operator.gt, torch.gt), "methods": ("gt",)}
_MASK_CHAIN = {"methods": ("unsqueeze", "to", "float", "type_as", "view", "reshape"), "functions": (torch.unsqueeze,)}
_SHAPE_ONLY = {"methods": ("unsqueeze", "view", "reshape"), "functions": (torch.unsqueeze,)}
_CASTS = ("to", "float", "double", "long", "int")
_EXACT_DTYPES = (torch.int32, torch.int64, torch.float32, torch.float64)  # hold every length exactly (< 2^24)
_PAD_SEQUENCE = (torch.nn.utils.rnn.pad_sequence, torch._C._nn.pad_sequence)
_SPLIT = (torch.split, torch.functional.split)


# --- what the user writes (documentation and tests: the matchers below recognise these and their spellings) ---


def padded_masked_mean_pattern(padded, lengths):
    mask = torch.arange(padded.shape[1])[None, :] < lengths[:, None]
    return (padded * mask[..., None]).sum(1) / lengths.clamp(min=1)[:, None]


def padded_split_masked_mean_pattern(values, sizes: list[int], lengths):
    padded = torch.nn.utils.rnn.pad_sequence(torch.split(values, sizes), batch_first=True)
    mask = torch.arange(padded.shape[1])[None, :] < lengths[:, None]
    return (padded * mask.unsqueeze(-1)).sum(1) / lengths.clamp(min=1).unsqueeze(-1)


# --- the replacements ----------------------------------------------------------------------------------------


def padded_masked_mean_replacement(padded, lengths, counts, mode: int, out_dtype: torch.dtype, *, pool):
    out = pool(padded, lengths, mode, out_dtype)
    return out if mode != MODES["sum"] else out / counts


def padded_split_masked_mean_replacement(values, sizes: list[int], lengths, counts, out_dtype: torch.dtype, *, pool):
    return _kept_rows_mean(values, offsets_from_sizes(values, sizes), lengths, counts, out_dtype, pool)


def _kept_rows_mean(values, bounds, lengths, counts, out_dtype, pool):
    """Chunk b = rows [bounds[b], bounds[b + 1]); the mask keeps its first min(size_b, max(lengths_b, 0))."""
    starts = bounds[:-1]
    rows = torch.minimum(lengths.to(torch.int64).clamp(min=0), bounds[1:] - starts)
    # partition 2b: b's kept rows; 2b + 1: the rest of its chunk (empty when the lengths are the sizes)
    offsets = torch.cat([torch.stack([starts, starts + rows], 1).reshape(-1), bounds[-1:]])
    means = pool(values, offsets)[0::2]
    return (means * (rows.to(torch.float32)[:, None] / counts)).to(out_dtype)


def padded_partitions_masked_mean_replacement(values, sizes, lengths, counts, out_dtype, same: bool, *, pool):
    """The split padded by a sizes tensor (PARTITION_PADS): B partitions where the mask's lengths are those sizes
    (provably), else the 2B partitions of the split form."""
    if not same:
        return _kept_rows_mean(values, offsets_from_lengths(sizes.to(torch.int64)), lengths, counts, out_dtype, pool)
    rows = sizes.to(torch.int64)
    means = pool(values, offsets_from_lengths(rows))
    return (means * (rows.to(torch.float32)[:, None] / counts)).to(out_dtype)


# --- the matchers ----------------------------------------------------------------------------------------------


def match_padded_masked_mean(node) -> Match | None:
    found = _masked_mean(node)
    if found is None or _split_source(found["padded"]) is not None or _partitions_source(found["padded"]):
        return None
    padded, counts = found["padded"], found["counts"]
    match = Match(node, (), padded, found["nodes"])
    lengths, reason = _mask_lengths(found)
    if lengths is None:
        match.declined = reason
        return match
    mode = _fused_mode(found, lengths)
    match.nodes += _mask_inputs(found["compare"])
    if mode != MODES["sum"]:  # the kernel divides: the counts chain goes with the match
        match.nodes += _chain(counts, lengths)
        counts = None
    match.args = (padded, lengths, counts, mode, example(node).dtype)
    return match


def match_padded_split_masked_mean(node) -> Match | None:
    found = _masked_mean(node)
    if found is not None and _partitions_source(found["padded"]) is not None:
        return _match_padded_partitions(node, found)
    source = None if found is None else _split_source(found["padded"])
    if source is None:
        return None
    split, items = source
    values = split.args[0]
    match = Match(node, (), values, [*found["nodes"], found["padded"], *items, split])
    sizes = arg(split, 1, "split_size_or_sections", arg(split, 1, "split_size"))
    lengths, reason = _mask_lengths(found)
    match.declined = reason or _split_reason(found["padded"], split, sizes, items)
    if not match.declined:
        match.args = (values, list(sizes), lengths, found["counts"], example(node).dtype)
        match.nodes += _mask_inputs(found["compare"])
        match.nodes += _size_assertions(found["padded"])
    return match


def _size_assertions(padded: fx.Node) -> list[fx.Node]:
    """The runtime check Dynamo adds on the pad's unbacked length (`sym_size(pad, 1) >= 0` -> `_assert_scalar`):
    it would keep the pad alive, and written, after its masked mean is pooled on the unpadded rows."""
    out = []
    for size in [u for u in padded.users if u.target is torch.ops.aten.sym_size.int]:
        for compare in size.users:
            asserts = list(compare.users)
            if asserts and all(a.target is torch.ops.aten._assert_scalar.default for a in asserts):
                out += [*asserts, compare]
        out.append(size)
    return out


def _masked_mean(node) -> dict | None:
    """`(a * b).sum(1) / counts` with one factor [B, L, D] and the other a comparison against an arange, else None."""
    if not is_call(node, **_DIVIDE) or len(node.args) != 2 or node.kwargs:  # rounding_mode: not a mean
        return None
    total, counts = node.args
    if not is_call(total, (torch.sum,), ("sum",)) or len(total.args) > 2 or set(total.kwargs) - {"dim"}:
        return None
    if arg(total, 1, "dim") not in (1, (1,), [1]):
        return None
    product = total.args[0]
    if not is_call(product, **_MUL) or len(product.args) != 2 or product.kwargs:
        return None
    for padded, mask in (product.args, product.args[::-1]):
        value = example(padded)
        compare = _comparison(mask)
        if value is not None and value.dim() == 3 and compare is not None:
            nodes = [node, total, product, *_chain(mask, compare)]
            return {"padded": padded, "mask": mask, "compare": compare, "counts": counts, "product": product,
                    "root": node, "nodes": nodes}  # fmt: skip
    return None


def _comparison(mask) -> fx.Node | None:
    """The `<` / `>` node under the mask's casts and unsqueezes, if one of its sides is an arange."""
    node = strip_unary(mask, **_MASK_CHAIN)
    if is_call(node, (operator.getitem,)) and node.args[1] in ((Ellipsis, None), (Ellipsis, None, None)):
        node = strip_unary(node.args[0], **_MASK_CHAIN)
    if not (is_call(node, **_LESS) or is_call(node, **_GREATER)) or len(node.args) != 2 or node.kwargs:
        return None
    return node if any(_arange(a) is not None for a in node.args) else None


def _arange(node) -> fx.Node | None:
    node = strip_unary(node, **_SHAPE_ONLY)
    return node if is_call(node, (torch.arange,)) else None


def _chain(top, bottom) -> list[fx.Node]:
    """The calls from `top` down to `bottom` (or to the first non-call) through their first argument."""
    out = []
    while isinstance(top, fx.Node) and top is not bottom and _pure(top):
        out.append(top)
        top = top.args[0]
    return [*out, bottom] if top is bottom and bottom is not None else out


_PURE = {"unsqueeze", "view", "reshape", "to", "float", "double", "long", "int", "type_as", "getitem", "arange"}
_PURE |= {"clamp", "clamp_min", "lt", "gt"}


def _pure(node: fx.Node) -> bool:
    """A call the chains above may erase when unused (no in-place op: those stay whatever their users)."""
    if node.op not in ("call_function", "call_method") or not node.args:
        return False
    return (node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")) in _PURE


def _mask_inputs(compare: fx.Node) -> list[fx.Node]:
    """The comparison's two sides down to the arange and the lengths (erased with the match when unused)."""
    return [n for side in compare.args for n in _chain(side, None)]


def _mask_lengths(found: dict) -> tuple[fx.Node | None, str]:
    """(lengths, "") when the mask is `arange(L) < lengths` along the padded rows, else (None, why not)."""
    padded, compare, mask = example(found["padded"]), found["compare"], found["mask"]
    batch, rows, _ = padded.shape
    small, big = compare.args if is_call(compare, **_LESS) else compare.args[::-1]
    arange = _arange(small)
    if arange is None:
        return None, "the mask compares the lengths below the arange (rows past the length)"
    if not _is_row_range(arange, rows) or not _shaped(small, [(rows,), (1, rows)]):
        return None, "the mask's arange is not arange(L) along the padded rows (dim 1)"
    if not _shaped(big, [(batch, 1)]):
        return None, "the mask's lengths are not a [B, 1] column"
    lengths = _exact_source(big)
    value = example(lengths)
    if value is None or value.dim() != 1 or not same_size(value.shape[0], batch):
        return None, "the mask's lengths are not a 1-D [B] tensor through shape-only ops and exact casts"
    if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
        return None, f"the mask's lengths must be an integer tensor, got {value.dtype}"
    if not _shaped(compare, [(batch, rows)]) or not _shaped(mask, [(batch, rows, 1)]):
        return None, "the mask is not [B, L, 1] over the padded [B, L, D] tensor"
    if not _shaped(found["product"], [tuple(padded.shape)]):
        return None, "the product broadcasts the padded tensor to another shape"
    return lengths, ""


def _is_row_range(arange: fx.Node, rows) -> bool:
    """torch.arange(L), arange(0, L) or arange(0, L, 1), in a dtype that holds every index exactly."""
    args = list(arange.args)
    if len(args) > 1 and args[0] != 0 or len(args) > 2 and args[2] != 1 or not args:
        return False
    dtype = arange.kwargs.get("dtype")
    return same_size(args[0] if len(args) == 1 else args[1], rows) and (dtype is None or dtype in _EXACT_DTYPES)


def _shaped(node, shapes) -> bool:
    value = example(node)
    if value is None:
        return False
    return any(
        len(shape) == value.dim() and all(same_size(a, b) for a, b in zip(value.shape, shape, strict=True))
        for shape in shapes
    )


def _exact_source(node):
    """`node` back through shape-only ops and casts that keep every length's value (integers, fp32, fp64)."""
    while True:
        node = strip_unary(node, **_SHAPE_ONLY)
        value = example(node)
        if not is_call(node, (), _CASTS) or value is None or value.dtype not in _EXACT_DTYPES:
            return node
        node = node.args[0]


def _fused_mode(found: dict, lengths: fx.Node) -> int:
    """MODES["clamp"] / ["raw"] when counts is `lengths.clamp(min=1)` / `lengths` as a [B, 1] column and the division
    keeps the product's dtype, else MODES["sum"] (the op sums, the user's counts divide)."""
    counts, batch = found["counts"], example(found["padded"]).shape[0]
    if not _shaped(counts, [(batch, 1)]) or example(found["root"]).dtype != example(found["product"]).dtype:
        return MODES["sum"]
    source = _exact_source(counts)
    if source is lengths:
        return MODES["raw"]
    if _clamped_at_one(source) and _exact_source(source.args[0]) is lengths:
        return MODES["clamp"]
    return MODES["sum"]


def _clamped_at_one(node) -> bool:
    """x.clamp(min=1), x.clamp(1), torch.clamp(x, min=1), x.clamp_min(1), torch.clamp_min(x, 1)."""
    if is_call(node, (torch.clamp,), ("clamp",)):
        low, high = arg(node, 1, "min"), arg(node, 2, "max")
        return low == 1 and high is None and not isinstance(low, bool)
    if is_call(node, (torch.clamp_min,), ("clamp_min",)):
        low = arg(node, 1, "min")
        return low == 1 and not isinstance(low, bool)
    return False


# The loop capture's op for the split padded by a lengths tensor (`pad_sequence(torch.split(values,
# lengths.tolist()), batch_first=True)` rewritten before Dynamo, with an unbacked padded length): matched by name, so
# this module needs nothing of the capture's; rows past a length are zeros there, as pad_sequence's default padding.
PARTITION_PADS = ("liger_fuse::pad_partitions",)


def _partitions_source(padded) -> tuple[fx.Node, fx.Node] | None:
    """(values, sizes tensor) for `pad_partitions(values, sizes)`, else None."""
    if not isinstance(padded, fx.Node) or padded.op != "call_function" or len(padded.args) != 2 or padded.kwargs:
        return None
    if _op_name(padded.target) not in PARTITION_PADS:
        return None
    return padded.args[0], padded.args[1]


def _op_name(target) -> str | None:
    """ "namespace::name" of a custom op as Dynamo records it (an overload or its packet), else None."""
    packet = getattr(target, "overloadpacket", target)
    return getattr(packet, "_qualified_op_name", None)


def _match_padded_partitions(node, found: dict) -> Match:
    values, sizes = _partitions_source(found["padded"])
    match = Match(node, (), values, [*found["nodes"], found["padded"]])
    lengths, reason = _mask_lengths(found)
    value = example(values)
    match.declined = reason or ("" if value is not None and value.dim() == 2 else "the padded values are not [N, D]")
    if not match.declined:
        same = _exact_source(sizes) is _exact_source(lengths)  # the mask's lengths are the pad's sizes: B partitions
        match.args = (values, sizes, lengths, found["counts"], example(node).dtype, same)
        match.replacement = padded_partitions_masked_mean_replacement
        match.nodes += _mask_inputs(found["compare"])
        match.nodes += _size_assertions(found["padded"])
    return match


def _size_assertions(padded: fx.Node) -> list[fx.Node]:
    """The runtime check Dynamo adds on the pad's unbacked length (`sym_size(pad, 1) >= 0` -> `_assert_scalar`):
    it would keep the pad alive, and written, after its masked mean is pooled on the unpadded rows."""
    out = []
    for size in [u for u in padded.users if u.target is torch.ops.aten.sym_size.int]:
        for compare in size.users:
            asserts = list(compare.users)
            if asserts and all(a.target is torch.ops.aten._assert_scalar.default for a in asserts):
                out += [*asserts, compare]
        out.append(size)
    return out


def _split_source(padded) -> tuple[fx.Node, list[fx.Node]] | None:
    """(split, its chunks in order) for `pad_sequence(split(values, sizes)[0..B-1])`, else None."""
    if not is_call(padded, _PAD_SEQUENCE):
        return None
    items = arg(padded, 0, "sequences")
    if not isinstance(items, (list, tuple)) or not items:
        return None
    if not all(is_call(i, (operator.getitem,)) for i in items):
        return None
    split = items[0].args[0]
    if not is_call(split, _SPLIT, ("split",)) or any(i.args[0] is not split for i in items):
        return None
    return split, list(items)


def _split_reason(padded: fx.Node, split: fx.Node, sizes, items) -> str:
    """ "" when the pad holds every chunk of a split of [N, D] rows along dim 0, in order, right-padded with a finite
    value, batch first; else why not."""
    if arg(padded, 1, "batch_first", False) is not True:
        return "pad_sequence(batch_first=False) pads to [L, B, D]: the sum over dim 1 is not over the rows"
    if arg(padded, 3, "padding_side", "right") != "right":
        return "left padding: the mask's first rows are padding"
    value = arg(padded, 2, "padding_value", 0.0)
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "the padding value is not a finite constant (pad * 0 would not be 0)"
    if arg(split, 2, "dim", 0) != 0 or not isinstance(sizes, (list, tuple)):
        return "the split is not by a list of sizes along dim 0"
    if [i.args[1] for i in items] != list(range(len(sizes))):
        return "the pad does not hold every chunk of the split, in order"
    source = example(split.args[0])
    if source is None or source.dim() != 2:
        return "the split values are not [N, D] rows"
    return ""


PADDED_FORMS = (
    HandForm(
        "padded_split_masked_mean",
        "partitioned_mean",
        padded_split_masked_mean_pattern,
        padded_split_masked_mean_replacement,
        match_padded_split_masked_mean,
    ),
    HandForm(
        "padded_masked_mean",
        "padded_masked_mean",
        padded_masked_mean_pattern,
        padded_masked_mean_replacement,
        match_padded_masked_mean,
    ),
)
