"""The graph pass: find registered patterns in a Dynamo FX graph and swap in the registry's pick.

It runs on Dynamo's torch-level graph, before AOTAutograd, so a replacement's custom op brings its own
backward (register_autograd) and the original ops' backward disappears with them. Inductor's post-grad hooks
see forward and backward already split: rewriting the forward there would leave the original backward behind.
"""

from __future__ import annotations

from torch import fx

from .families import KERNEL_FUNCTIONS
from .fx_match import example
from .registry import OperandSpec
from .registry import Registry


def fuse_pass(gm: fx.GraphModule, registry: Registry) -> int:
    """Rewrite `gm` in place; returns how many patterns were replaced."""
    replaced = 0
    for node in list(gm.graph.nodes):
        if node.graph is None:  # erased by an earlier replacement
            continue
        for pattern in registry.patterns:
            match = pattern.match(node)
            if match is not None:
                replaced += _apply(gm.graph, pattern, match, registry)
                break
    if replaced:
        gm.graph.lint()
        gm.recompile()
    return replaced


def _apply(graph: fx.Graph, pattern, match, registry: Registry) -> int:
    name = match.name or pattern.name
    where = _where(match.root)
    if match.declined:
        registry.note_declined(name, match.declined, where)
        return 0
    operand = example(match.operand)
    if operand is None:
        registry.note_declined(name, "no example value for the operand", where)
        return 0
    kernel, reason = registry.pick(pattern.family, OperandSpec.of(operand))
    if kernel is None:
        registry.note_declined(name, reason, where)
        return 0
    with graph.inserting_before(match.root):
        new = graph.call_function(_bound(match.replacement or pattern.replacement, kernel), match.args)
    new.meta.update(match.root.meta)
    match.root.replace_all_uses_with(new)
    _erase_unused(graph, match.nodes)
    registry.note_replaced(name, kernel.name, where)
    return 1


def _bound(replacement, kernel):
    """`replacement(..., pool=kernel)` as a named function FX can print into generated code."""
    kernel_name = kernel.name
    pool = kernel.function or KERNEL_FUNCTIONS[kernel_name]

    def replacement_call(*args):
        return replacement(*args, pool=pool)

    replacement_call.__name__ = replacement_call.__qualname__ = f"{replacement.__name__}__{kernel_name}"
    return replacement_call


def _erase_unused(graph: fx.Graph, nodes) -> None:
    pending = [n for n in nodes if n.graph is graph]
    while pending:
        removable = [n for n in pending if not n.users]
        if not removable:
            return
        for node in removable:
            graph.erase_node(node)
            pending.remove(node)


def _where(node: fx.Node) -> str:
    stack = node.meta.get("stack_trace") or ""
    lines = [line.strip() for line in stack.splitlines() if line.strip().startswith("File ")]
    return lines[-1] if lines else node.name
