"""understand: trace the model on its example inputs; list registry matches and unmatched fusable chains.

A chain is a run of pointwise ops, each the only user of the one before, that no registered pattern covers.
Its share is estimated by bytes written (the sum of its outputs' sizes over all graph nodes' outputs): chains
of pointwise ops are memory-bound, so bytes are the right first-order proxy for their share of step time.
"""

from __future__ import annotations

import copy
import operator
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field

import torch
from torch import fx

from pipelines.fuse.runtime.chains import op_key
from pipelines.fuse.runtime.families import default_registry
from pipelines.fuse.runtime.fx_match import example
from pipelines.fuse.runtime.graph_pass import find_matches
from pipelines.fuse.runtime.loop_capture import capture_loops

POINTWISE = {
    "add",
    "sub",
    "mul",
    "truediv",
    "div",
    "neg",
    "exp",
    "log",
    "tanh",
    "sigmoid",
    "relu",
    "gelu",
    "silu",
    "rsqrt",
    "sqrt",
    "pow",
    "clamp",
    "abs",
    "softplus",
    "erf",
    "sin",
    "cos",
    "square",
    "where",
}


@dataclass
class Found:
    pattern: str
    where: str
    kernel: str | None
    reason: str = ""


@dataclass
class Chain:
    ops: tuple[str, ...]
    share: float
    where: str


@dataclass
class Profile:
    graphs: int
    loops_captured: int
    matches: list[Found] = field(default_factory=list)
    chains: list[Chain] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def understand(model: torch.nn.Module, inputs: tuple) -> Profile:
    registry = default_registry()
    model = copy.deepcopy(model)
    loops = capture_loops(model, registry)
    graphs: list[fx.GraphModule] = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, backend=record)(*inputs)
    profile = Profile(len(graphs), loops)
    profile.matches += [Found("loop_slice_mean_stack", "module forward", "triton_partitioned_mean")] * loops
    for gm in graphs:
        covered = _matches(gm, registry, profile)
        profile.chains += _chains(gm, covered)
    profile.chains.sort(key=lambda c: -c.share)
    return profile


def _matches(gm, registry, profile: Profile) -> set:
    covered = set()
    for match in find_matches(gm, registry):
        kernel = match.kernel
        profile.matches.append(Found(match.name, match.root.name, kernel.name if kernel else None, match.declined))
        covered.update(match.nodes)
    return covered


def _chains(gm, covered: set) -> list[Chain]:
    total = sum(_bytes(n) for n in gm.graph.nodes) or 1
    chains, seen = [], set()
    for node in gm.graph.nodes:
        if node in seen or not _pointwise(node) or node in covered:
            continue
        run = [node]
        while len(run[-1].users) == 1:
            user = next(iter(run[-1].users))
            if not _pointwise(user) or user in covered or user.args[0] is not run[-1]:
                break
            run.append(user)
        seen.update(run)
        if len(run) >= 2 and isinstance(run[0].args[0], fx.Node):
            share = sum(_bytes(n) for n in run) / total
            chains.append(Chain(tuple(op_key(n) for n in run), round(share, 4), run[0].name))
    return chains


def _pointwise(node) -> bool:
    if node.op not in ("call_function", "call_method"):
        return False
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    return name in POINTWISE or node.target in (operator.add, operator.mul, operator.sub, operator.truediv)


def _bytes(node) -> int:
    value = example(node)
    if value is None:
        return 0
    try:
        return int(value.numel()) * value.element_size()
    except (TypeError, RuntimeError):  # symbolic sizes
        return 0
