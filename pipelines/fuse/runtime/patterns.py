"""What every rewrite of the pass shares: the `Match` it reports, the hand-written `HandForm` entry (for forms no
fixed subgraph expresses, see unrolled_forms.py), and the semantic checks the pairs' filters use.

Where the rewrites live: pairs.py (the engine: torch.fx's subgraph matcher and rewriter), pooling_pairs.py and
liger_pairs.py (one file per family: the pattern / replacement pairs and their registration list),
unrolled_forms.py (hand-written matchers), families.py (the kernels and the default registry's order).

Every partitioned-mean replacement gives zeros for an empty partition; the original ops give NaN there for
`.mean()` of an empty slice, segment_reduce and an unclamped division (documented difference).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

import torch
from torch import fx

from .fx_match import example
from .fx_match import is_call
from .fx_match import same_size
from .registry import OperandSpec


@dataclass
class Match:
    root: fx.Node  # the node whose value the replacement takes over
    args: tuple  # the replacement's arguments (graph nodes or constants)
    operand: fx.Node  # the tensor the kernel conditions are checked against
    nodes: list[fx.Node] = field(default_factory=list)  # matched nodes, erased when nothing else uses them
    declined: str = ""  # matched, but a semantic condition fails: leave the graph alone
    replacement: Callable | None = None  # a variant of the form's replacement
    name: str = ""  # the counter name
    kernel: object = None  # set by Pair.find: the kernel the registry picked (None: declined)


@dataclass(frozen=True)
class HandForm:
    """A form matched by a hand-written function (node -> Match | None) because no fixed subgraph expresses it;
    the pass applies its matches and counts them in the same stats as the pairs."""

    name: str
    family: str
    pattern: Callable  # what the user wrote (documentation and tests: the matcher is `match`)
    replacement: Callable
    match: Callable[[fx.Node], Match | None]

    def find(self, gm: fx.GraphModule, registry, claimed: set) -> list[Match]:
        found = []
        for node in list(gm.graph.nodes):
            match = self._claim(node, claimed)
            if match is not None:
                match.kernel, reason = (None, match.declined) if match.declined else self._pick(match, registry)
                match.declined = reason
                found.append(match)
        return found

    def rewrite(self, gm: fx.GraphModule, registry, claimed: set) -> int:
        replaced = 0
        for node in list(gm.graph.nodes):
            if node.graph is None:  # erased by an earlier replacement
                continue
            match = self._claim(node, claimed)
            if match is not None:
                replaced += self._apply(gm.graph, match, registry)
        return replaced

    def _claim(self, node: fx.Node, claimed: set) -> Match | None:
        if node in claimed:
            return None
        match = self.match(node)
        if match is None:
            return None
        match.name = match.name or self.name
        claimed.add(node)
        return match

    def _pick(self, match: Match, registry):
        operand = example(match.operand)
        if operand is None:
            return None, "no example value for the operand"
        return registry.pick(self.family, OperandSpec.of(operand))

    def _apply(self, graph: fx.Graph, match: Match, registry) -> int:
        kernel, reason = (None, match.declined) if match.declined else self._pick(match, registry)
        if kernel is None:
            registry.note_declined(match.name, reason, where(match.root))
            return 0
        with graph.inserting_before(match.root):
            new = graph.call_function(bound_replacement(match.replacement or self.replacement, kernel), match.args)
        new.meta.update(match.root.meta)
        match.root.replace_all_uses_with(new)
        _erase_unused(graph, match.nodes)
        registry.note_replaced(match.name, kernel.name, where(match.root))
        return 1


def bound_replacement(replacement: Callable, kernel) -> Callable:
    """`replacement(..., pool=kernel)` as a named function FX can print into generated code."""
    pool = kernel.function

    def replacement_call(*args):
        return replacement(*args, pool=pool)

    replacement_call.__name__ = replacement_call.__qualname__ = f"{replacement.__name__}__{kernel.name}"
    replacement_call.replacement, replacement_call.kernel = replacement, kernel  # read by embedding_forms.py
    return replacement_call


def where(node: fx.Node) -> str:
    """The user's source line of a node (the log line's location), else its name."""
    stack = node.meta.get("stack_trace") or ""
    lines = [line.strip() for line in stack.splitlines() if line.strip().startswith("File ")]
    return lines[-1] if lines else node.name


def _erase_unused(graph: fx.Graph, nodes) -> None:
    pending = [n for n in nodes if n.graph is graph]
    while pending:
        removable = [n for n in pending if not n.users]
        if not removable:
            return
        for node in removable:
            graph.erase_node(node)
            pending.remove(node)


def offsets_from_lengths(lengths: torch.Tensor) -> torch.Tensor:
    return torch.cat([lengths.new_zeros(1), torch.cumsum(lengths, 0)]).to(torch.int64)


def offsets_from_sizes(values: torch.Tensor, sizes) -> torch.Tensor:
    bounds = [0]
    for size in sizes:
        bounds.append(bounds[-1] + size)
    return torch.tensor(bounds, dtype=torch.int64, device=values.device)


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


def is_zeros(node) -> bool:
    """torch.zeros / new_zeros / zeros_like (same dtype): the accumulator a sum into segments starts from."""
    return is_call(node, (torch.zeros,), ("new_zeros",)) or (
        is_call(node, (torch.zeros_like,)) and not node.kwargs.get("dtype")
    )


def counts_rows(count, lengths) -> bool:
    """`count` (arange's stop) is lengths.shape[0]: one segment id per length."""
    value = example(lengths)
    return value is not None and same_size(count, value.shape[0])
