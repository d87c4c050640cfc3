"""Pattern / replacement pairs matched by torch.fx's subgraph matcher on Dynamo's torch-level graphs.

A `Pair` is Inductor-pattern-matcher style (`_sfdp_pattern_N` / `_sfdp_replacement_N`): one or more `*_pattern`
functions (structural variants of one form; `a / b` vs `torch.div(a, b)` are expanded for it), a
`*_replacement` (what runs instead, given the registry's kernel as `pool`) and a `check`, the match filter for the
semantic conditions a fixed subgraph cannot state (dtypes, ranks, where lengths / offsets come from).

The rewrite is `torch.fx.subgraph_rewriter.replace_pattern_with_filters`: the filter runs `check`, then asks the
registry for a kernel; a declined match is counted with its reason; `replacement_callback` builds, per match,
a one-node graph calling the replacement bound to the kernel picked for that match. `find` (what `liger-bot fuse`
reports without rewriting) runs the same `SubgraphMatcher` and the same filter.

Patterns are traced with `fx.Tracer(autowrap_functions=...)`, so `silu(x)` (imported from torch.nn.functional)
records the call as the user wrote it, as Dynamo does, not with every default filled in.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import operator
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import fx
from torch.fx.passes.utils.matcher_utils import InternalMatch
from torch.fx.passes.utils.matcher_utils import SubgraphMatcher
from torch.fx.subgraph_rewriter import replace_pattern_with_filters

from .fx_match import example
from .patterns import Match
from .patterns import bound_replacement
from .patterns import where
from .registry import OperandSpec
from .registry import Registry

# F.* functions a pattern may call; recorded as leaves (Dynamo records them as called, not traced into)
LEAF_FUNCTIONS = (F.silu, F.embedding_bag, F.embedding, torch.nn.utils.rnn.pad_sequence)
# The same call spelled as a function, a method or an operator: different torch-level nodes with the same
# arguments in the same places (a method's self is args[0]). A pattern is written once; each traced graph is
# expanded into every combination of its nodes' equivalent spellings (cheap graph copies, no re-tracing).
_SAME_CALL = (
    (
        ("call_function", operator.truediv),
        ("call_function", torch.div),
        ("call_function", torch.true_divide),
        ("call_method", "div"),
        ("call_method", "true_divide"),
    ),
    (("call_function", operator.mul), ("call_function", torch.mul), ("call_method", "mul")),
    (("call_method", "sum"), ("call_function", torch.sum)),
    (("call_method", "index_add_"), ("call_method", "index_add"), ("call_function", torch.index_add)),
    (("call_method", "scatter_add_"), ("call_method", "scatter_add"), ("call_function", torch.scatter_add)),
    (("call_method", "scatter_reduce"), ("call_method", "scatter_reduce_"), ("call_function", torch.scatter_reduce)),
)
EQUIVALENT_SPELLINGS = {key: group for group in _SAME_CALL for key in group}
# pure ops a replaced match may leave unused (a lengths.clamp(min=1) chain): erased after the rewrite
_PURE_LEFTOVERS = {
    "clamp",
    "clamp_min",
    "float",
    "to",
    "type_as",
    "unsqueeze",
    "view",
    "reshape",
    "expand",
    "expand_as",
    "getitem",
    "arange",
    "zeros",
    "zeros_like",
    "new_zeros",
    "repeat_interleave",
}


def no_check(bindings) -> str:
    return ""


@dataclass(frozen=True)
class Pair:
    """One form. `check(bindings)` sees the pattern's parameters bound to graph nodes or literals (by name) and
    returns None (not this form: skipped silently), "" (replace) or the reason to leave it alone (counted)."""

    name: str  # the counter name (liger_fuse_stats.replaced / declined)
    family: str  # the registry family whose kernels can replace it
    patterns: tuple[Callable, ...]
    replacement: Callable  # (<some of the pattern's parameters, by name>, *, pool)
    check: Callable[[dict], str | None] = no_check
    operand: str = "values"  # the parameter the kernel conditions read (device, dtype, rank)

    def find(self, gm: fx.GraphModule, registry: Registry, claimed: set) -> list[Match]:
        """Matches without rewriting (for `liger-bot fuse`'s report); claims their roots like `rewrite`."""
        found = []
        for pattern_graph in self._graphs_for(gm.graph):
            matcher = SubgraphMatcher(pattern_graph, match_output=False, match_placeholder=False)
            for internal in matcher.match(gm.graph):
                verdict = self._verdict(internal, pattern_graph, registry, claimed)
                if verdict is not None:
                    found.append(self._as_match(internal, pattern_graph, verdict))
        return found

    def rewrite(self, gm: fx.GraphModule, registry: Registry, claimed: set) -> int:
        """Replace every accepted match in place; count declined ones. Returns how many were replaced."""
        replaced = 0
        for pattern_graph in self._graphs_for(gm.graph):
            kernels = {}

            def accept(internal, _graph, pattern, kernels=kernels) -> bool:
                verdict = self._verdict(internal, pattern, registry, claimed)
                if verdict is None:
                    return False
                if verdict[1] is None:
                    registry.note_declined(self.name, verdict[0], where(_root(internal)))
                    return False
                kernels[_root(internal)] = verdict[1]
                return True

            def build(internal, _graph, pattern, kernels=kernels) -> fx.Graph:
                return self._replacement_graph(pattern, _bindings(internal, pattern), kernels[_root(internal)])

            with _one_recompile(gm):
                done = replace_pattern_with_filters(
                    gm, pattern_graph, match_filters=[accept], replacement_callback=build
                )
            for result in done:
                self._finish(gm.graph, result, kernels[result.nodes_map[result.anchor]], registry)
            replaced += len(done)
        return replaced

    def _graphs_for(self, graph: fx.Graph) -> list[fx.Graph]:
        """The traced patterns whose ops all occur in `graph` (the others cannot match: skip the matcher)."""
        present = {_op_key(n) for n in graph.nodes}
        return [g for g in pattern_graphs(self.patterns) if _required_ops(g) <= present]

    def _verdict(self, internal: InternalMatch, pattern_graph: fx.Graph, registry: Registry, claimed: set):
        """None (not ours), (reason, None) declined, ("", kernel) accepted. Claims the root either way."""
        root = _root(internal)
        if root in claimed:
            return None
        bindings = _bindings(internal, pattern_graph)
        try:
            reason = self.check(bindings)
        except Exception as exc:  # a filter that fails on a form it did not expect must not fail the compile
            reason = f"match filter failed ({type(exc).__name__}: {exc})"[:200]
        if reason is None:
            return None
        claimed.add(root)
        if reason:
            return reason, None
        operand = example(bindings.get(self.operand))
        if operand is None:
            return "no example value for the operand", None
        kernel, why_not = registry.pick(self.family, OperandSpec.of(operand))
        return (why_not, None) if kernel is None else ("", kernel)

    def _as_match(self, internal: InternalMatch, pattern_graph: fx.Graph, verdict) -> Match:
        bindings = _bindings(internal, pattern_graph)
        nodes = [gn for pn, gn in internal.nodes_map.items() if pn.op not in ("placeholder", "output")]
        match = Match(_root(internal), (), bindings.get(self.operand), nodes, declined=verdict[0], name=self.name)
        match.kernel = verdict[1]
        return match

    def _replacement_graph(self, pattern_graph: fx.Graph, bindings: dict, kernel) -> fx.Graph:
        """placeholder per pattern parameter -> one call of the replacement bound to `kernel` -> output."""
        graph = fx.Graph()
        placeholders = {n.target: graph.placeholder(n.target) for n in pattern_graph.nodes if n.op == "placeholder"}
        args = []
        for name, parameter in inspect.signature(self.replacement).parameters.items():
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
                continue
            if name not in placeholders and parameter.default is inspect.Parameter.empty:
                raise TypeError(f"{self.replacement.__name__}: {name!r} is no pattern parameter and has no default")
            args.append(placeholders[name] if name in placeholders else parameter.default)
        graph.output(graph.call_function(bound_replacement(self.replacement, kernel), tuple(args)))
        return graph

    def _finish(self, graph: fx.Graph, result, kernel, registry: Registry) -> None:
        call = result.replacements[-1]
        root = result.nodes_map[result.anchor]  # erased from the graph, its meta still readable
        call.meta.update(root.meta)  # the fake value downstream passes read
        _erase_leftovers(graph, call.all_input_nodes)
        registry.note_replaced(self.name, kernel.name, where(root))


def spellings(make: Callable[..., Callable], **choices) -> tuple[Callable, ...]:
    """One pattern per combination of `choices` (structural variants: a keyword given or left out, a cast or
    none): make(**one_choice_each). Equivalent calls need none of this: see EQUIVALENT_SPELLINGS."""
    keys = list(choices)
    return tuple(make(**dict(zip(keys, combo, strict=True))) for combo in itertools.product(*choices.values()))


_TRACED: dict[Callable, list[fx.Graph]] = {}


def pattern_graphs(patterns: tuple[Callable, ...]) -> list[fx.Graph]:
    """Each pattern traced once per process, then expanded into its equivalent spellings; parameters a pattern
    does not use are dropped (an unused placeholder could never be bound)."""
    out = []
    for pattern in patterns:
        if pattern not in _TRACED:
            graph = fx.Tracer(autowrap_functions=LEAF_FUNCTIONS).trace(pattern)
            for node in [n for n in graph.nodes if n.op == "placeholder" and not n.users]:
                graph.erase_node(node)
            sort_keywords(graph)
            _TRACED[pattern] = respelled(graph)
        out += _TRACED[pattern]
    return out


def sort_keywords(graph: fx.Graph) -> None:
    """Keyword arguments in name order: the subgraph matcher compares them in order, and their order never changes
    what a call computes (the pass sorts the user's graph the same way before matching)."""
    for node in graph.nodes:
        if len(node.kwargs) > 1:
            node.kwargs = dict(sorted(node.kwargs.items()))


def respelled(graph: fx.Graph) -> list[fx.Graph]:
    """`graph` in every combination of its nodes' equivalent spellings (the written one first)."""
    positions = [i for i, n in enumerate(graph.nodes) if (n.op, n.target) in EQUIVALENT_SPELLINGS]
    nodes = list(graph.nodes)
    choices = [EQUIVALENT_SPELLINGS[(nodes[i].op, nodes[i].target)] for i in positions]
    out = []
    for combo in itertools.product(*choices):
        copy = fx.Graph()
        mapping = {}
        output = copy.graph_copy(graph, mapping)
        copy.output(output)
        copied = list(copy.nodes)
        for i, (op, target) in zip(positions, combo, strict=True):
            copied[i].op, copied[i].target = op, target
        out.append(copy)
    return out


@contextlib.contextmanager
def _one_recompile(gm: fx.GraphModule):
    """replace_pattern_with_filters regenerates the module's code after every pattern (~0.1 s on a 400-node
    graph, times hundreds of spellings); the pass recompiles once, after all of them (graph_pass.fuse_pass)."""
    gm.recompile = _no_recompile
    try:
        yield
    finally:
        del gm.recompile


def _no_recompile():
    return None


def _root(internal: InternalMatch) -> fx.Node:
    """The graph node the match's output maps to (InternalMatch.anchors are the pattern's nodes)."""
    return internal.nodes_map[internal.anchors[0]]


def _bindings(internal: InternalMatch, pattern_graph: fx.Graph) -> dict:
    placeholders = [n for n in pattern_graph.nodes if n.op == "placeholder"]
    return {pn.target: internal.nodes_map[pn] for pn in placeholders}


def _op_key(node: fx.Node):
    return node.op, node.target


def _required_ops(pattern_graph: fx.Graph) -> set:
    return {_op_key(n) for n in pattern_graph.nodes if n.op in ("call_function", "call_method")}


def _erase_leftovers(graph: fx.Graph, nodes) -> None:
    pending = list(nodes)
    while pending:
        node = pending.pop()
        if node.graph is not graph or node.users or not _pure_leftover(node):
            continue
        inputs = node.all_input_nodes
        graph.erase_node(node)
        pending += inputs


def _pure_leftover(node: fx.Node) -> bool:
    if node.op not in ("call_function", "call_method"):
        return False
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    return name in _PURE_LEFTOVERS
