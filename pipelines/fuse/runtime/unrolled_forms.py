"""Forms matched by hand-written functions, because no fixed subgraph expresses them.

Dynamo unrolls the Python loop over a list of bounds (`offsets.tolist()`, or lengths as Python ints) into one
`values[s:e].mean(0)` per partition and a `torch.stack` of B items: the graph's size depends on the data
(B), and the slice bounds are constants that differ batch to batch. `torch.fx`'s subgraph matcher matches one
fixed graph (a pattern per B would be one per batch size), so these two forms keep a matcher that walks the
stack's B inputs. They are registered beside the pairs (families.py) and counted in the same stats. The
module-level capture of the same loop (before Dynamo unrolls it) is the ast rewrite in loop_capture.py.
"""

from __future__ import annotations

import operator

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .fx_match import arg
from .fx_match import example
from .fx_match import is_call
from .fx_match import rows_mean_input
from .fx_match import stacked_rows
from .patterns import HandForm
from .patterns import Match
from .patterns import offsets_from_sizes

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


UNROLLED_FORMS = (
    HandForm(
        "loop_slice_mean_stack",
        "partitioned_mean",
        loop_slice_mean_stack_pattern,
        loop_slice_mean_stack_replacement,
        match_loop_slice_mean_stack,
    ),
    HandForm(
        "split_mean_stack",
        "partitioned_mean",
        split_mean_stack_pattern,
        split_mean_stack_replacement,
        match_split_mean_stack,
    ),
)
