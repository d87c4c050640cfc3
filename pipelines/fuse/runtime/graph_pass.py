"""The graph pass: rewrite the registered forms in a Dynamo FX graph with the registry's pick.

It runs on Dynamo's torch-level graph, before AOTAutograd, so a replacement's custom op brings its own
backward (register_autograd) and the original ops' backward disappears with them. Inductor's post-grad hooks
see forward and backward already split: rewriting the forward there would leave the original backward behind.

Each registry entry (a `Pair`, matched by torch.fx's subgraph rewriter, or a `HandForm`) rewrites the graph in
turn; a node claimed by one entry's match (replaced or declined) is not matched, nor counted, again.
"""

from __future__ import annotations

import contextlib
import operator

import torch
from torch import fx

from .pairs import sort_keywords
from .registry import Registry


def fuse_pass(gm: fx.GraphModule, registry: Registry) -> int:
    """Rewrite `gm` in place; returns how many matches were replaced."""
    claimed: set[fx.Node] = set()
    with _creation_literals_set_aside(gm) as stripped:
        replaced = sum(entry.rewrite(gm, registry, claimed) for entry in registry.patterns)
    if replaced or stripped:
        gm.graph.lint()
        gm.recompile()
    return replaced


def find_matches(gm: fx.GraphModule, registry: Registry) -> list:
    """Every entry's matches (replaceable or declined, with the kernel or the reason), the graph unchanged."""
    claimed: set[fx.Node] = set()
    with _creation_literals_set_aside(gm) as stripped:
        found = [match for entry in registry.patterns for match in entry.find(gm, registry, claimed)]
    if stripped:
        gm.recompile()
    return found


@contextlib.contextmanager
def _creation_literals_set_aside(gm: fx.GraphModule):
    """`torch.arange(B, device=...)` (what GPU code must write) and `dtype=torch.int64` (arange's default for an
    int stop) are literals the patterns, traced without them, would not match; neither changes the values a
    partition id holds. They are taken off for the matching and put back on every node that is still in the graph.
    Keywords are also put in name order, as the patterns' are. Yields how many nodes had literals taken off."""
    sort_keywords(gm.graph)
    _none_index_as_unsqueeze(gm.graph)
    taken = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not torch.arange:
            continue
        kwargs = dict(node.kwargs)
        aside = {k: kwargs.pop(k) for k in _VALUE_FREE_KWARGS if k in kwargs and _value_free(k, kwargs[k])}
        if aside:
            taken[node] = aside
            node.kwargs = kwargs
    try:
        yield len(taken)
    finally:
        alive = set(gm.graph.nodes)
        for node, aside in taken.items():
            if node in alive:
                node.kwargs = {**node.kwargs, **aside}


_VALUE_FREE_KWARGS = ("device", "dtype")
_NEW_COLUMN = (slice(None, None, None), None)


def _none_index_as_unsqueeze(graph: fx.Graph) -> None:
    """`x[:, None]` becomes `x.unsqueeze(1)` (the same view for any x of rank >= 1, and the only spelling the
    patterns trace): user code writes either where it broadcasts segment ids over the columns."""
    for node in graph.nodes:
        if node.op == "call_function" and node.target is operator.getitem and node.args[1:] == (_NEW_COLUMN,):
            node.op, node.target, node.args = "call_method", "unsqueeze", (node.args[0], 1)


def _value_free(name: str, value) -> bool:
    return name == "device" or value is torch.int64
