"""Linear-chain pairs for passes the `fuse` pipeline writes: the generated `*_pattern` (the ops in order, each fed
by the one before; literals as in the model) matched by torch.fx's subgraph matcher like every pair, replaced by
one call of the generated `*_replacement`."""

from __future__ import annotations

from collections.abc import Callable

from torch import fx

from .pairs import Pair
from .pairs import pattern_graphs


def op_key(node: fx.Node) -> str:
    target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))
    return f"{node.op}:{target}"


def chain_pair(name: str, ops: tuple[str, ...], pattern: Callable, replacement: Callable, family: str) -> Pair:
    """The pair for a generated pass; `ops` (what the pass was written for) must be what its pattern traces to."""
    graph = pattern_graphs((pattern,))[0]  # as written (the equivalent spellings follow it)
    traced = tuple(op_key(n) for n in graph.nodes if n.op in ("call_function", "call_method"))
    if traced != tuple(ops):
        raise ValueError(f"pass {name!r}: its pattern traces to {traced}, not the ops it names {tuple(ops)}")
    operand = next(n.target for n in graph.nodes if n.op == "placeholder")
    return Pair(name, family, (pattern,), replacement, operand=operand)
