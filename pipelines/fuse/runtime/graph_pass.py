"""The graph pass: rewrite the registered forms in a Dynamo FX graph with the registry's pick.

It runs on Dynamo's torch-level graph, before AOTAutograd, so a replacement's custom op brings its own
backward (register_autograd) and the original ops' backward disappears with them. Inductor's post-grad hooks
see forward and backward already split: rewriting the forward there would leave the original backward behind.

Each registry entry (a `Pair`, matched by torch.fx's subgraph rewriter, or a `HandForm`) rewrites the graph in
turn; a node claimed by one entry's match (replaced or declined) is not matched, nor counted, again.
"""

from __future__ import annotations

from torch import fx

from .registry import Registry


def fuse_pass(gm: fx.GraphModule, registry: Registry) -> int:
    """Rewrite `gm` in place; returns how many matches were replaced."""
    claimed: set[fx.Node] = set()
    replaced = sum(entry.rewrite(gm, registry, claimed) for entry in registry.patterns)
    if replaced:
        gm.graph.lint()
        gm.recompile()
    return replaced


def find_matches(gm: fx.GraphModule, registry: Registry) -> list:
    """Every entry's matches (replaceable or declined, with the kernel or the reason), the graph unchanged."""
    claimed: set[fx.Node] = set()
    return [match for entry in registry.patterns for match in entry.find(gm, registry, claimed)]
