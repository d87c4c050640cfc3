"""A generic linear-chain pattern for passes the `fuse` pipeline writes: the ops, in order, each fed by the one
before (other arguments pass through), replaced by one call of a generated `*_replacement`."""

from __future__ import annotations

from collections.abc import Callable

from torch import fx

from .patterns import Match
from .patterns import Pattern


def op_key(node: fx.Node) -> str:
    target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))
    return f"{node.op}:{target}"


def chain_matcher(ops: tuple[str, ...]) -> Callable[[fx.Node], Match | None]:
    def match(node) -> Match | None:
        nodes = [node]
        for _ in ops[:-1]:
            head = nodes[0].args[0] if nodes[0].args else None
            if not isinstance(head, fx.Node) or len(head.users) != 1:
                return None
            nodes.insert(0, head)
        if tuple(op_key(n) for n in nodes) != ops:
            return None
        first = nodes[0].args[0]
        extras = [a for n in nodes for a in n.args[1:] if isinstance(a, fx.Node)]
        return Match(node, (first, *extras), first, list(reversed(nodes)))  # literals live in the pattern

    return match


def chain_pattern(name: str, ops: tuple[str, ...], pattern, replacement, family: str) -> Pattern:
    return Pattern(name, family, pattern, replacement, chain_matcher(ops))
