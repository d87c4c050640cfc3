"""Inputs the reference takes in another shape than the main input's and broadcasts to it (ModulatedRMSNorm's scale and
shift: (hidden,), per batch (B, hidden), or per row). The engine probes every tensor input at the main input's shape,
where such a reference takes its same-shape branch and shows nothing; so each further input is also given the shapes
a broadcast input comes in, and the reference's forward is traced at each.

A shape the reference accepts (its outputs keep the main input's shape) is evidence only where the trace reshapes the
input there (`unsqueeze`, `expand`, `view`, ...) before combining it, and differently than at the main input's shape:
`silu(a) * b` accepts a (hidden,) `b` by torch's implicit broadcasting and reshapes nothing (not refused); a reference
that flattens every input (`residual.view(-1, h)`) reshapes it the same way at every shape (not refused either).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from pipelines.kernel import reference as reference_mod
from pipelines.kernel.reference import ReferenceCode

BATCH, TOKENS = 2, 3  # the 3-D probe's (B, T): distinct, not 0 or 1, and not the hidden size
# ATen ops that change a tensor's shape without computing on it (what `x[:, None, :]`, `.expand`, `.repeat_interleave`
# and `.reshape` trace to)
SHAPE_OPS = {
    "unsqueeze",
    "squeeze",
    "expand",
    "view",
    "_unsafe_view",
    "reshape",
    "repeat",
    "repeat_interleave",
    "select",
    "slice",
    "permute",
    "transpose",
    "t",
    "as_strided",
    "index",
    "unflatten",
}


@dataclass(frozen=True)
class Reshape:
    op: str
    before: tuple[int, ...]
    after: tuple[int, ...]


@dataclass(frozen=True)
class Trace:
    """What the reference's forward does to one input at one shape, before the input meets another tensor."""

    reshapes: tuple[Reshape, ...]
    meets: str  # the op that first combines it with another input's values
    meets_shape: tuple[int, ...]


def main_shape(hidden: int) -> tuple[int, int, int]:
    return (BATCH, TOKENS, hidden)


def candidate_shapes(hidden: int) -> list[tuple[int, ...]]:
    """The shapes a broadcast input comes in beside (B, T, hidden): per column, per batch, per token, per row."""
    return [(hidden,), (BATCH, hidden), (BATCH, 1, hidden), (TOKENS, hidden), (BATCH, TOKENS, 1)]


def find(module: torch.nn.Module, ref: ReferenceCode, hidden: int) -> str:
    """Why the reference is out of reach of a same-shape probe ("" where nothing says so): each input it broadcasts,
    the shape it was given, and the op that reshapes it."""
    found = {}
    for name in ref.inputs[1:] + ref.optional_inputs:
        at_main = _trace(module, ref, name, main_shape(hidden), hidden)
        for shape in candidate_shapes(hidden):
            traced = _trace(module, ref, name, shape, hidden)
            if traced is None or not traced.reshapes:
                continue
            if at_main is not None and _ops(at_main) == _ops(traced):
                continue  # the same reshaping at every shape: not a broadcast
            found[name] = _reason(ref, name, shape, traced, at_main)
            break
    if not found:
        return ""
    main = ref.inputs[0]
    return (
        f"the reference broadcasts {' and '.join(found)} to the shape of {main} from other shapes, which a probe with "
        f"every input at its shape {_shape(main_shape(hidden))} cannot see: " + "; ".join(found.values())
    )


def _ops(traced: Trace) -> list[str]:
    return [r.op for r in traced.reshapes]


def _reason(ref: ReferenceCode, name: str, shape: tuple, traced: Trace, at_main: Trace | None) -> str:
    optional = " (optional, default None)" if name in ref.optional_inputs else ""
    steps = ", ".join(f"`{r.op}` ({_shape(r.before)} -> {_shape(r.after)})" for r in traced.reshapes)
    if at_main is None:
        there = "it fails or changes the output's shape"
    else:
        there = ", ".join(f"`{op}`" for op in _ops(at_main)) or "no reshape"
    return (
        f"{name}{optional} given as {_shape(shape)} gets {steps} before `{traced.meets}` combines it at "
        f"{_shape(traced.meets_shape)} (at the shape of {ref.inputs[0]}: {there})"
    )


def _shape(shape: tuple) -> str:
    return str(tuple(shape))


def _trace(module: torch.nn.Module, ref: ReferenceCode, name: str, shape: tuple, hidden: int) -> Trace | None:
    """The forward traced with `name` at `shape` and every other input at the main shape; None where the reference
    rejects that shape or its outputs lose the main input's shape."""
    main = main_shape(hidden)
    required = [torch.randn(*(shape if n == name else main)) for n in ref.inputs]
    optional = [torch.randn(*shape)] if name in ref.optional_inputs else []

    def forward(*tensors):
        keyword = {name: tensors[-1]} if optional else {}
        return module(*tensors[: len(required)], **keyword)

    try:
        with reference_mod._target_on_path(ref.repo), torch.no_grad():
            graph = make_fx(forward)(*required, *optional)
            outputs = forward(*required, *optional)
    except Exception:  # the reference refuses the shape: no evidence either way
        return None
    outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    if any(not isinstance(y, torch.Tensor) or tuple(y.shape) != main for y in outputs):
        return None
    index = len(required) if optional else ref.inputs.index(name)
    return _walk(graph.graph, index)


def _walk(graph: torch.fx.Graph, index: int) -> Trace:
    """The reshapes on the input's own values (computed from it alone), then the first op combining it with others."""
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    deps: dict = {}
    reshapes = []
    for node in graph.nodes:
        if node.op == "placeholder":
            deps[node] = {placeholders.index(node)}
            continue
        sources = node.all_input_nodes
        deps[node] = set().union(*(deps.get(a, set()) for a in sources))
        own = [a for a in sources if deps.get(a) == {index}]
        if node.op != "call_function" or not own:
            continue
        if deps[node] != {index}:  # another input's values meet this one's
            return Trace(tuple(reshapes), _op_name(node), _shape_of(node))
        name = _op_name(node)
        before, after = _shape_of(own[0]), _shape_of(node)
        if name in SHAPE_OPS and before != after:
            reshapes.append(Reshape(name, before, after))
    return Trace(tuple(reshapes), "the output", ())


def _op_name(node: torch.fx.Node) -> str:
    packet = getattr(node.target, "_overloadpacket", None)
    return packet.__name__ if packet is not None else str(node.target)


def _shape_of(node: torch.fx.Node) -> tuple[int, ...]:
    val = node.meta.get("val")
    return tuple(val.shape) if isinstance(val, torch.Tensor) else ()
