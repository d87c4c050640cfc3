"""The partitioned-mean family: pattern / replacement pairs and their registration (POOLING_PAIRS).

Each `*_pattern` is written once, as the user writes the form at the torch level; equivalent calls (`a / b` or
`torch.div(a, b)`, `index_add_` or `torch.index_add`) are expanded by pairs.EQUIVALENT_SPELLINGS, structural
variants (a keyword given or left out) are listed with `spellings`. Parameters stand for what a fixed subgraph
cannot pin down (the zeros a sum starts from, the lengths.clamp(min=1) chain of the counts, a literal size); the pair's
`check` (the match filter) proves them: lengths / offsets a 1-D integer tensor, the zeros really zeros, the counts
the same lengths, the segment ids sorted (`repeat_interleave(arange(B), lengths)`).

To add a pair: write `<name>_pattern` (and its spellings), `<name>_replacement(<pattern parameters it needs>,
*, pool)` (name the pooled rows `values`: embedding_forms.py finds them by that name to fuse an embedding's gather
in), a check returning None / "" / a reason, then add `Pair("<name>", "<family>", patterns, replacement, check,
operand=...)` to POOLING_PAIRS before any pair its pattern contains (or to a new family file's tuple, listed in
families.PATTERNS) and its kernel (with `function=`) to families.default_kernels. embedding -> partitioned mean is
not a pair here: it runs after these, on their replacements (embedding_forms.py says why).
"""

from __future__ import annotations

import torch
from torch.nn.functional import embedding_bag

from .fx_match import example
from .fx_match import is_call
from .fx_match import same_size
from .fx_match import strip_unary
from .pairs import Pair
from .pairs import spellings
from .patterns import counts_rows
from .patterns import index_reason
from .patterns import is_zeros
from .patterns import offsets_from_lengths

_COUNT_CHAIN = {"methods": ("clamp", "clamp_min", "float", "to", "unsqueeze", "view", "reshape", "type_as")}
_COUNT_CHAIN["functions"] = (torch.clamp, torch.clamp_min, torch.unsqueeze)


def segment_ids(count, lengths, output_size, with_size: bool):
    """Sorted segment ids, one per row: `repeat_interleave(arange(B), lengths[, output_size=N])`."""
    if with_size:
        return torch.repeat_interleave(torch.arange(count), lengths, output_size=output_size)
    return torch.repeat_interleave(torch.arange(count), lengths)


def partitioned_mean_replacement(values, lengths, *, pool):
    return pool(values, offsets_from_lengths(lengths))


def _segments_check(bindings) -> str | None:
    """The zeros are zeros and arange's stop is the number of lengths (else not this form); then the lengths guard."""
    if not is_zeros(bindings["zeros"]) or not counts_rows(bindings["count"], bindings["lengths"]):
        return None
    return index_reason(bindings["lengths"])


def _counts_check(bindings) -> str | None:
    """The divisor is the same lengths through shape / dtype-only calls (lengths.clamp(min=1).unsqueeze(1))."""
    if strip_unary(bindings["counts"], **_COUNT_CHAIN) is not bindings["lengths"]:
        return None
    return _segments_check(bindings)


# --- index_add_ into zeros, divided by counts ----------------------------------------------------------------


def _index_add_div(with_size):
    def index_add_div_pattern(zeros, count, lengths, output_size, values, counts):
        return zeros.index_add_(0, segment_ids(count, lengths, output_size, with_size), values) / counts

    return index_add_div_pattern


# --- scatter_add into zeros, divided by counts ----------------------------------------------------------------


def rows_index(segments, values, cols, as_values: bool):
    """The segment ids broadcast over the columns: `.unsqueeze(1).expand(-1, D)` or `.expand_as(values)`."""
    if as_values:
        return segments.unsqueeze(1).expand_as(values)
    return segments.unsqueeze(1).expand(-1, cols)


def _scatter_add_div(with_size, as_values):
    def scatter_add_div_pattern(zeros, count, lengths, output_size, values, cols, counts):
        index = rows_index(segment_ids(count, lengths, output_size, with_size), values, cols, as_values)
        return zeros.scatter_add(0, index, values) / counts

    return scatter_add_div_pattern


def _scatter_add_check(bindings) -> str | None:
    return _counts_check(bindings) if _covers_columns(bindings) else None


def _covers_columns(bindings) -> bool:
    """expand(-1, D) covers every column of the values (fewer would pool only those)."""
    return "cols" not in bindings or _is_rows_width(bindings["cols"], bindings["values"])


def _is_rows_width(cols, values) -> bool:
    value = example(values)
    return value is not None and value.dim() == 2 and same_size(cols, value.shape[1])


# --- scatter_reduce(..., "mean") -------------------------------------------------------------------------------

INCLUDE_SELF_REASON = "include_self=True averages the initial zeros in too"


def _scatter_reduce_mean(positional, with_self, with_size, as_values):
    def scatter_reduce_mean_pattern(zeros, count, lengths, output_size, values, cols, include_self):
        index = rows_index(segment_ids(count, lengths, output_size, with_size), values, cols, as_values)
        args, kwargs = (("mean",), {}) if positional else ((), {"reduce": "mean"})
        if with_self:
            kwargs["include_self"] = include_self
        return zeros.scatter_reduce(0, index, values, *args, **kwargs)

    return scatter_reduce_mean_pattern


def _scatter_reduce_check(bindings) -> str | None:
    verdict = _segments_check(bindings) if _covers_columns(bindings) else None
    if verdict is None:
        return None
    return INCLUDE_SELF_REASON if bindings.get("include_self", True) else verdict


# --- torch.segment_reduce(..., "mean") ------------------------------------------------------------------------


def _segment_reduce_mean(by_offsets, reduce_keyword, axis_given):
    def segment_reduce_mean_pattern(values, lengths, offsets):
        kwargs = {"reduce": "mean"} if reduce_keyword else {}
        kwargs |= {"axis": 0} if axis_given else {}  # axis 0 is the default; written out, it is a literal to match
        kwargs |= {"offsets": offsets} if by_offsets else {"lengths": lengths}
        return torch.segment_reduce(values, *(() if reduce_keyword else ("mean",)), **kwargs)

    return segment_reduce_mean_pattern


def segment_reduce_mean_replacement(values, lengths=None, offsets=None, *, pool):
    return pool(values, offsets_from_lengths(lengths) if offsets is None else offsets)


def _segment_reduce_check(bindings) -> str:
    return index_reason(bindings.get("offsets", bindings.get("lengths")))


# --- embedding_bag(mode="mean") over identity indices ---------------------------------------------------------


def _embedding_bag_mean(mode_given, last_given):
    def embedding_bag_mean_pattern(ids, values, bag_offsets, include_last):
        kwargs = {"mode": "mean"} if mode_given else {}  # "mean" is embedding_bag's default mode
        if last_given:
            kwargs["include_last_offset"] = include_last
        return embedding_bag(ids, values, bag_offsets, **kwargs)

    return embedding_bag_mean_pattern


def embedding_bag_mean_replacement(values, bag_offsets, include_last=False, *, pool):
    if include_last:
        return pool(values, bag_offsets)
    end = torch.full((1,), values.shape[0], dtype=torch.int64, device=bag_offsets.device)
    return pool(values, torch.cat([bag_offsets.to(torch.int64), end]))


def _embedding_bag_check(bindings) -> str | None:
    """Every row once, in order (ids = arange(N)): the bags are contiguous row ranges."""
    ids, weight = bindings["ids"], example(bindings["values"])
    if not is_call(ids, (torch.arange,)) or len(ids.args) != 1 or ids.kwargs or weight is None:
        return None
    if not same_size(ids.args[0], weight.shape[0]) or not isinstance(bindings.get("include_last", False), bool):
        return None
    return index_reason(bindings["bag_offsets"])


_BOTH = (False, True)

POOLING_PAIRS = (
    # the first entry to match a root claims it: a pair comes before the pairs its pattern contains
    Pair(
        "index_add_div",
        "partitioned_mean",
        spellings(_index_add_div, with_size=_BOTH),
        partitioned_mean_replacement,
        _counts_check,
    ),
    Pair(
        "scatter_add_div",
        "partitioned_mean",
        spellings(_scatter_add_div, with_size=_BOTH, as_values=_BOTH),
        partitioned_mean_replacement,
        _scatter_add_check,
    ),
    Pair(
        "scatter_reduce_mean",
        "partitioned_mean",
        spellings(
            _scatter_reduce_mean,
            positional=_BOTH,
            with_self=_BOTH,
            with_size=_BOTH,
            as_values=_BOTH,
        ),
        partitioned_mean_replacement,
        _scatter_reduce_check,
    ),
    Pair(
        "segment_reduce_mean",
        "partitioned_mean",
        spellings(_segment_reduce_mean, by_offsets=_BOTH, reduce_keyword=_BOTH, axis_given=_BOTH),
        segment_reduce_mean_replacement,
        _segment_reduce_check,
    ),
    Pair(
        "embedding_bag_mean",
        "partitioned_mean",
        spellings(_embedding_bag_mean, mode_given=_BOTH, last_given=_BOTH),
        embedding_bag_mean_replacement,
        _embedding_bag_check,
    ),
)
