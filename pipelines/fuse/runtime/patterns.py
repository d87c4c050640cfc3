"""The patterns the pass recognises, Inductor-pattern-matcher style: a `*_pattern` (what the user wrote), a
`*_replacement` (what runs instead, given the chosen kernel as `pool`), and a matcher that finds the pattern in
Dynamo's torch-level FX graph and returns the replacement's arguments.

Every partitioned-mean replacement gives zeros for an empty partition; the original ops give NaN there for
`.mean()` of an empty slice, segment_reduce and an unclamped division (documented difference).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

import torch
import torch.nn.functional as F
from torch import fx
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .fx_match import arg
from .fx_match import example
from .fx_match import is_call
from .fx_match import rows_mean_input
from .fx_match import same_size
from .fx_match import stacked_rows
from .fx_match import strip_unary


@dataclass
class Match:
    root: fx.Node  # the node whose value the replacement takes over
    args: tuple  # the replacement's arguments (graph nodes or constants)
    operand: fx.Node  # the tensor the kernel conditions are checked against
    nodes: list[fx.Node] = field(default_factory=list)  # matched nodes, erased when nothing else uses them
    declined: str = ""  # matched, but a semantic condition fails: leave the graph alone
    replacement: Callable | None = None  # a variant of the pattern's replacement (e.g. offsets given, not lengths)
    name: str = ""  # a more precise name than the pattern's, for the counter (e.g. index_add_div)


@dataclass(frozen=True)
class Pattern:
    name: str
    family: str
    pattern: Callable
    replacement: Callable
    match: Callable[[fx.Node], Match | None]


def offsets_from_lengths(lengths: torch.Tensor) -> torch.Tensor:
    return torch.cat([lengths.new_zeros(1), torch.cumsum(lengths, 0)]).to(torch.int64)


def offsets_from_sizes(values: torch.Tensor, sizes) -> torch.Tensor:
    bounds = [0]
    for size in sizes:
        bounds.append(bounds[-1] + size)
    return torch.tensor(bounds, dtype=torch.int64, device=values.device)


# --- loop of slice -> mean -> stack (constant bounds: how Dynamo records the loop over a Python list) --------


def loop_slice_mean_stack_pattern(values, offsets: list[int]):
    return torch.stack([values[offsets[i] : offsets[i + 1]].mean(0) for i in range(len(offsets) - 1)])


def loop_slice_mean_stack_replacement(values, offsets: list[int], *, pool):
    # the bounds are constants: the rows they cover are sliced out, so the kernel's offsets start at 0 and end at
    # that slice's N (rows before the first bound or after the last belong to no partition, as in the loop)
    sizes = [e - s for s, e in zip(offsets[:-1], offsets[1:], strict=False)]
    return pool(values[offsets[0] : offsets[-1]], offsets_from_sizes(values, sizes))


def match_loop_slice_mean_stack(node) -> Match | None:
    items = stacked_rows(node)
    if items is None:
        return None
    source, bounds, nodes = None, [], []
    for item in items:
        sliced = rows_mean_input(item)
        if not is_call(sliced, (operator.getitem,)) or not isinstance(sliced.args[1], slice):
            return None
        rows = sliced.args[1]
        if source not in (None, sliced.args[0]) or rows.step not in (None, 1):
            return None
        if not isinstance(rows.start, int) or not isinstance(rows.stop, int):
            return None
        if bounds and bounds[-1] != rows.start:
            return None  # partitions must be contiguous
        if rows.start < 0 or rows.stop < rows.start:
            return None  # negative (from the end) or empty-by-reversal slices: not the pooling loop
        source = sliced.args[0]
        bounds += [rows.start] if not bounds else []
        bounds.append(rows.stop)
        nodes += [item, sliced]
    match = Match(node, (source, bounds), source, [node, *nodes])
    rows = example(source)
    if rows is None or not statically_known_true(bounds[-1] <= rows.shape[0]):
        # a slice past the end is cut short by Python's slicing; the kernel would read past the values
        match.declined = f"the last bound {bounds[-1]} is not provably within the values' rows"
    return match


# --- torch.split by lengths -> mean -> stack ----------------------------------------------------------------


def split_mean_stack_pattern(values, sizes: list[int]):
    return torch.stack([chunk.mean(0) for chunk in torch.split(values, sizes)])


def split_mean_stack_replacement(values, sizes: list[int], *, pool):
    return pool(values, offsets_from_sizes(values, sizes))


def match_split_mean_stack(node) -> Match | None:
    items = stacked_rows(node)
    if items is None:
        return None
    chunks = [rows_mean_input(item) for item in items]
    if not all(is_call(c, (operator.getitem,)) for c in chunks):
        return None
    split = chunks[0].args[0]
    if not is_call(split, (torch.split, torch.functional.split), ("split",)):
        return None
    sizes = arg(split, 1, "split_size_or_sections", arg(split, 1, "split_size"))
    if arg(split, 2, "dim", 0) != 0 or not isinstance(sizes, (list, tuple)) or len(sizes) != len(items):
        return None
    if [c.args[0] for c in chunks] != [split] * len(chunks) or [c.args[1] for c in chunks] != list(range(len(chunks))):
        return None
    values = split.args[0]
    return Match(node, (values, list(sizes)), values, [node, *items, *chunks, split])


# --- index_add_ / scatter_add into zeros, divided by counts -----------------------------------------------


def index_add_div_pattern(values, lengths):
    segments = torch.repeat_interleave(torch.arange(lengths.shape[0]), lengths, output_size=values.shape[0])
    sums = torch.zeros(lengths.shape[0], values.shape[1]).index_add_(0, segments, values)
    return sums / lengths.clamp(min=1).unsqueeze(1)


def index_add_div_replacement(values, lengths, *, pool):
    return pool(values, offsets_from_lengths(lengths))


_COUNT_CHAIN = {"methods": ("clamp", "clamp_min", "float", "to", "unsqueeze", "view", "reshape", "type_as")}
_COUNT_CHAIN["functions"] = (torch.clamp, torch.clamp_min, torch.unsqueeze)
_INDEX_CHAIN = {"methods": ("unsqueeze", "expand", "expand_as", "view", "reshape"), "functions": (torch.unsqueeze,)}


def segments_lengths(node) -> fx.Node | None:
    """lengths, for sorted segment ids `repeat_interleave(arange(B), lengths[, output_size])`."""
    if not is_call(node, (torch.repeat_interleave,), ("repeat_interleave",)):
        return None
    ids, lengths = node.args[0], arg(node, 1, "repeats")
    if not is_call(ids, (torch.arange,)) or not isinstance(lengths, fx.Node):
        return None
    stop = ids.args[-1] if len(ids.args) in (1, 2) and (len(ids.args) == 1 or ids.args[0] == 0) else None
    return lengths if stop is not None and _is_size_of(stop, lengths) else None


def index_reason(node) -> str:
    """The trace-time guard on lengths / offsets: a 1-D integer tensor ("" when it holds, else why not)."""
    value = example(node)
    if value is None:
        return "lengths / offsets have no example value to check"
    if value.dim() != 1:
        return f"lengths / offsets must be 1-D, got rank {value.dim()}"
    if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
        return f"lengths / offsets must be an integer tensor, got {value.dtype}"
    return ""


def _is_size_of(stop, lengths: fx.Node) -> bool:
    value = lengths.meta.get("example_value")
    return value is not None and same_size(stop, value.shape[0])


def _zeros(node) -> bool:
    return is_call(node, (torch.zeros,), ("new_zeros",)) or (
        is_call(node, (torch.zeros_like,)) and not node.kwargs.get("dtype")
    )


def match_sum_div_counts(node) -> Match | None:
    if not is_call(node, (operator.truediv, torch.div, torch.true_divide), ("div", "true_divide")):
        return None
    sums, counts = node.args[0], node.args[1]
    if is_call(sums, (torch.index_add,), ("index_add_", "index_add")):
        name, index, values = "index_add_div", sums.args[2], sums.args[3]
    elif is_call(sums, (torch.scatter_add,), ("scatter_add_", "scatter_add")):
        name, index, values = "scatter_add_div", strip_unary(sums.args[2], **_INDEX_CHAIN), sums.args[3]
    else:
        return None
    if sums.args[1] != 0 or not _zeros(sums.args[0]):
        return None
    lengths = segments_lengths(index)
    if lengths is None or strip_unary(counts, **_COUNT_CHAIN) is not lengths:
        return None
    match = Match(node, (values, lengths), values, [node, sums, sums.args[0]], name=name)
    match.declined = index_reason(lengths)
    return match


# --- scatter_reduce(..., "mean") -------------------------------------------------------------------------


def scatter_reduce_mean_pattern(values, lengths):
    segments = torch.repeat_interleave(torch.arange(lengths.shape[0]), lengths, output_size=values.shape[0])
    index = segments.unsqueeze(1).expand(-1, values.shape[1])
    zeros = torch.zeros(lengths.shape[0], values.shape[1])
    return zeros.scatter_reduce(0, index, values, reduce="mean", include_self=False)


scatter_reduce_mean_replacement = index_add_div_replacement


def match_scatter_reduce_mean(node) -> Match | None:
    if not is_call(node, (torch.scatter_reduce,), ("scatter_reduce", "scatter_reduce_")):
        return None
    if arg(node, 1, "dim") != 0 or arg(node, 4, "reduce") != "mean" or not _zeros(node.args[0]):
        return None
    lengths = segments_lengths(strip_unary(arg(node, 2, "index"), **_INDEX_CHAIN))
    if lengths is None:
        return None
    values = arg(node, 3, "src")
    match = Match(node, (values, lengths), values, [node, node.args[0]])
    match.declined = index_reason(lengths)
    if arg(node, 5, "include_self", True):
        match.declined = "include_self=True averages the initial zeros in too"
    return match


# --- torch.segment_reduce(..., "mean") -------------------------------------------------------------------


def segment_reduce_mean_pattern(values, lengths):
    return torch.segment_reduce(values, "mean", lengths=lengths)


segment_reduce_mean_replacement = index_add_div_replacement


def segment_reduce_offsets_replacement(values, offsets, *, pool):
    return pool(values, offsets)


def match_segment_reduce_mean(node) -> Match | None:
    if not is_call(node, (torch.segment_reduce,)) or arg(node, 1, "reduce") != "mean":
        return None
    if node.kwargs.get("axis", 0) != 0 or node.kwargs.get("initial") is not None or node.kwargs.get("indices"):
        return None
    values = arg(node, 0, "data")
    if node.kwargs.get("lengths") is not None:
        lengths = node.kwargs["lengths"]
        return Match(node, (values, lengths), values, [node], declined=index_reason(lengths))
    if node.kwargs.get("offsets") is not None:
        offsets = node.kwargs["offsets"]
        match = Match(node, (values, offsets), values, [node], replacement=segment_reduce_offsets_replacement)
        match.declined = index_reason(offsets)
        return match
    return None


# --- embedding_bag(mode="mean") over identity indices ----------------------------------------------------


def embedding_bag_mean_pattern(values, offsets):
    return F.embedding_bag(torch.arange(values.shape[0]), values, offsets[:-1], mode="mean")


def embedding_bag_mean_replacement(values, bag_offsets, include_last: bool, *, pool):
    if include_last:
        return pool(values, bag_offsets)
    end = torch.full((1,), values.shape[0], dtype=torch.int64, device=bag_offsets.device)
    return pool(values, torch.cat([bag_offsets.to(torch.int64), end]))


def match_embedding_bag_mean(node) -> Match | None:
    if not is_call(node, (F.embedding_bag, torch.embedding_bag)) or arg(node, 4, "mode", "mean") != "mean":
        return None
    indices, values, offsets = arg(node, 0, "input"), arg(node, 1, "weight"), arg(node, 2, "offsets")
    if offsets is None or not is_call(indices, (torch.arange,)) or len(indices.args) != 1:
        return None
    weight = values.meta.get("example_value") if isinstance(values, fx.Node) else None
    if weight is None or not same_size(indices.args[0], weight.shape[0]):
        return None
    for position, name in ((3, "max_norm"), (8, "per_sample_weights"), (10, "padding_idx")):
        if arg(node, position, name) is not None:
            return None
    include_last = bool(arg(node, 9, "include_last_offset", False))
    return Match(node, (values, offsets, include_last), values, [node, indices], declined=index_reason(offsets))


# --- masked mean over padded rows: recognised and left alone, with the reason counted ---------------------


def padded_masked_mean_pattern(padded, lengths):
    mask = torch.arange(padded.shape[1])[None, :] < lengths[:, None]
    return (padded * mask.unsqueeze(-1)).sum(1) / lengths.clamp(min=1).unsqueeze(-1)


def padded_masked_mean_replacement(padded, lengths, *, pool):
    raise NotImplementedError("recognised only: no kernel pools a padded [B, L, D] tensor yet")


PADDED_REASON = "no kernel pools a padded [B, L, D] tensor yet (the pooling kernel reads packed [N, D] rows)"
PADDED_SPLIT_REASON = (
    "the mask's lengths are a tensor the trace cannot prove equal to the split's sizes (constants from .tolist()): "
    "left to the inner compiler"
)
_MASK_CHAIN = {"methods": ("unsqueeze", "to", "float", "type_as", "view", "reshape"), "functions": (torch.unsqueeze,)}


def _length_mask(node) -> bool:
    """`arange(L)[None, :] < lengths[:, None]` (either side), through unsqueeze / [..., None] / dtype casts."""
    node = strip_unary(node, **_MASK_CHAIN)
    if is_call(node, (operator.getitem,)) and node.args[1] in ((Ellipsis, None), (Ellipsis, None, None)):
        node = strip_unary(node.args[0], **_MASK_CHAIN)
    if not is_call(node, (operator.lt, torch.lt, operator.gt, torch.gt), ("lt", "gt")):
        return False
    return any(is_call(strip_unary(a), (torch.arange,)) for a in node.args if isinstance(a, fx.Node))


def _padded_split(node) -> bool:
    if not is_call(node, (torch.nn.utils.rnn.pad_sequence, torch._C._nn.pad_sequence)):
        return False
    items = node.args[0] if node.args else ()
    return bool(items) and all(
        is_call(i, (operator.getitem,)) and is_call(i.args[0], (torch.split,), ("split",)) for i in items
    )


def match_padded_masked_mean(node) -> Match | None:
    if not is_call(node, (operator.truediv, torch.div, torch.true_divide), ("div", "true_divide")):
        return None
    sums = node.args[0]
    if not is_call(sums, (torch.sum,), ("sum",)) or arg(sums, 1, "dim") not in (1, (1,), [1]):
        return None
    product = sums.args[0]
    if not is_call(product, (operator.mul, torch.mul), ("mul",)):
        return None
    for padded, mask in (product.args, product.args[::-1]):
        value = example(padded)
        if value is None or value.dim() != 3 or not _length_mask(mask):
            continue
        if _padded_split(padded):
            match = Match(node, (padded,), padded, [], name="padded_split_masked_mean")
            match.declined = PADDED_SPLIT_REASON
        else:
            match = Match(node, (padded,), padded, [], name="padded_masked_mean", declined=PADDED_REASON)
        return match
    return None


# --- Liger families: RMSNorm and SwiGLU (HF's eager forms) ----------------------------------------------


def rms_norm_pattern(x, weight, eps: float):
    xf = x.to(torch.float32)
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rms_norm_replacement(x, weight, eps: float, *, pool):
    return pool(x, weight, eps)


def match_rms_norm(node) -> Match | None:
    if not is_call(node, (operator.mul, torch.mul), ("mul",)):
        return None
    for weight, normed in (node.args, node.args[::-1]):
        inner = strip_unary(normed, methods=("to", "float", "type_as"))
        if not is_call(inner, (operator.mul, torch.mul), ("mul",)):
            continue
        for xf, rsqrt in (inner.args, inner.args[::-1]):
            eps_sum = rsqrt.args[0] if is_call(rsqrt, (torch.rsqrt,), ("rsqrt",)) else None
            if not is_call(eps_sum, (operator.add, torch.add), ("add",)) or not isinstance(eps_sum.args[1], float):
                continue
            mean = eps_sum.args[0]
            if not is_call(mean, (torch.mean,), ("mean",)) or arg(mean, 1, "dim") not in (-1, (-1,)):
                continue
            square = mean.args[0]
            if not is_call(square, (operator.pow, torch.pow), ("pow",)) or square.args[1:] != (2,):
                continue
            if square.args[0] is not xf or not isinstance(weight, fx.Node):
                continue
            x = strip_unary(xf, methods=("to", "float"))
            return Match(node, (x, weight, eps_sum.args[1]), x, [node, inner, rsqrt, eps_sum, mean, square])
    return None


def swiglu_pattern(gate, up):
    return F.silu(gate) * up


def swiglu_replacement(gate, up, *, pool):
    return pool(gate, up)


def match_swiglu(node) -> Match | None:
    if not is_call(node, (operator.mul, torch.mul), ("mul",)):
        return None
    for act, up in (node.args, node.args[::-1]):
        if is_call(act, (F.silu, torch.nn.functional.silu), ("silu",)) and isinstance(up, fx.Node):
            return Match(node, (act.args[0], up), act.args[0], [node, act])
    return None


PATTERNS = (
    Pattern(
        "loop_slice_mean_stack",
        "partitioned_mean",
        loop_slice_mean_stack_pattern,
        loop_slice_mean_stack_replacement,
        match_loop_slice_mean_stack,
    ),
    Pattern(
        "split_mean_stack",
        "partitioned_mean",
        split_mean_stack_pattern,
        split_mean_stack_replacement,
        match_split_mean_stack,
    ),
    Pattern(
        "sum_div_counts", "partitioned_mean", index_add_div_pattern, index_add_div_replacement, match_sum_div_counts
    ),
    Pattern(
        "scatter_reduce_mean",
        "partitioned_mean",
        scatter_reduce_mean_pattern,
        scatter_reduce_mean_replacement,
        match_scatter_reduce_mean,
    ),
    Pattern(
        "segment_reduce_mean",
        "partitioned_mean",
        segment_reduce_mean_pattern,
        segment_reduce_mean_replacement,
        match_segment_reduce_mean,
    ),
    Pattern(
        "embedding_bag_mean",
        "partitioned_mean",
        embedding_bag_mean_pattern,
        embedding_bag_mean_replacement,
        match_embedding_bag_mean,
    ),
    Pattern(
        "padded_masked_mean",
        "partitioned_mean",
        padded_masked_mean_pattern,
        padded_masked_mean_replacement,
        match_padded_masked_mean,
    ),
    Pattern("rms_norm", "rms_norm", rms_norm_pattern, rms_norm_replacement, match_rms_norm),
    Pattern("swiglu", "swiglu", swiglu_pattern, swiglu_replacement, match_swiglu),
)
