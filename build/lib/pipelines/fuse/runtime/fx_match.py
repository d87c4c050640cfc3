"""Small readers of Dynamo's torch-level FX graphs: is this node that call, what are its normalised arguments."""

from __future__ import annotations

import operator

import torch
from torch import fx


def is_call(node, functions=(), methods=()) -> bool:
    if not isinstance(node, fx.Node):
        return False
    if node.op == "call_function":
        return node.target in functions
    if node.op == "call_method":
        return node.target in methods
    return False


def arg(node: fx.Node, index: int, name: str, default=None):
    """An argument given either by position or by keyword."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def example(node) -> torch.Tensor | None:
    """The fake tensor Dynamo recorded for a node (None for non-tensors)."""
    if not isinstance(node, fx.Node):
        return None
    value = node.meta.get("example_value", node.meta.get("val"))
    return value if isinstance(value, torch.Tensor) else None


def rows_mean_input(node) -> fx.Node | None:
    """x for `x.mean(0)`, `x.mean(dim=0)`, `torch.mean(x, 0)` (keepdim off), else None."""
    if not is_call(node, (torch.mean,), ("mean",)):
        return None
    dim = arg(node, 1, "dim")
    if dim not in (0, (0,), [0]) or arg(node, 2, "keepdim", False) or node.kwargs.get("dtype") is not None:
        return None
    return node.args[0]


def stacked_rows(node) -> list | None:
    """The list stacked along dim 0 by `torch.stack(list)`, else None."""
    if not is_call(node, (torch.stack,)):
        return None
    if arg(node, 1, "dim", 0) != 0:
        return None
    items = arg(node, 0, "tensors")
    return list(items) if isinstance(items, (list, tuple)) and items else None


def strip_unary(node, functions=(), methods=()):
    """Follow a chain of shape/dtype-only calls back to its source (e.g. counts.clamp(min=1).unsqueeze(1))."""
    while is_call(node, functions, methods) or _is_none_index(node):
        node = node.args[0]
    return node


def _is_none_index(node) -> bool:
    """`t[:, None]`: a getitem that only adds a dimension."""
    if not is_call(node, (operator.getitem,)):
        return False
    index = node.args[1]
    return isinstance(index, tuple) and all(i is None or i == slice(None) for i in index)


def same_size(a, b) -> bool:
    """Two size expressions that are the same (ints equal, or the same graph node / SymInt)."""
    if a is b:
        return True
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return str(_size_of(a)) == str(_size_of(b)) and _size_of(a) is not None


def _size_of(value):
    if isinstance(value, fx.Node):
        return value.meta.get("example_value", value.meta.get("val"))
    return value
