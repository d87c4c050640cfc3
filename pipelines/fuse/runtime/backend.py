"""`liger_fuse.compile(model)`: torch.compile with the loop capture and the graph pass in front of a compiler.

A torch.compile *backend* (not Inductor's global custom-pass hooks) because (1) it sees Dynamo's torch-level
graph before AOTAutograd, where a replacement's custom op still brings its own backward, (2) it is scoped to
one compile call instead of a process-wide config, and (3) it composes with any inner compiler (inductor on
GPU, aot_eager for fast CPU checks).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

import torch

from . import padding
from .families import default_registry
from .graph_pass import fuse_pass
from .loop_capture import capture_loops
from .registry import Registry

log = logging.getLogger("liger_fuse")


@dataclass
class FuseStats:
    """What one compiled model did: graphs compiled (a recompile counts again) and patterns replaced."""

    registry: Registry
    graphs_compiled: int = 0
    loops_captured: int = 0
    graph_sizes: list[int] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)  # graphs compiled unchanged because the rewritten one failed

    @property
    def replaced(self) -> dict[str, int]:
        return dict(self.registry.replaced)

    @property
    def replaced_by(self) -> dict[str, int]:
        """ "pattern -> kernel" -> times: which kernel each replacement runs."""
        return dict(self.registry.replaced_by)

    @property
    def declined(self) -> dict[str, int]:
        return dict(self.registry.declined)

    @property
    def declined_reasons(self) -> dict[str, int]:
        """ "pattern: reason" -> times, for every match left alone (the same lines the liger_fuse logger writes)."""
        return dict(self.registry.declined_reasons)


def make_backend(stats: FuseStats, inner: str | Callable = "inductor") -> Callable:
    def liger_fuse_backend(gm: torch.fx.GraphModule, example_inputs):
        stats.graphs_compiled += 1
        pristine = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))  # the graph as Dynamo gave it
        replaced = None  # the pass itself may fail: then it counts as ours
        try:
            replaced = fuse_pass(gm, stats.registry)
            stats.graph_sizes.append(len(gm.graph.nodes))
            return _inner(inner)(gm, example_inputs)
        except torch._dynamo.exc.RestartAnalysis:
            raise  # Dynamo's own control flow (e.g. a float input to specialise): it traces again and calls us again
        except Exception as exc:
            if replaced == 0:
                raise  # nothing of ours in the graph: plain torch.compile fails the same way
            # a replacement that does not compile must not turn a model plain torch.compile runs into one that
            # crashes: this graph is compiled as it came, and the fallback counted and logged
            stats.fallbacks.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300])
            log.warning(
                "liger_fuse: the rewritten graph did not compile (%s); compiling it unchanged", stats.fallbacks[-1]
            )
            return _inner(inner)(pristine, example_inputs)

    return liger_fuse_backend


def _inner(inner: str | Callable) -> Callable:
    if callable(inner):
        return inner
    if inner == "inductor":
        from torch._inductor.compile_fx import compile_fx

        return compile_fx
    return torch._dynamo.lookup_backend(inner)


def compile(model, *, registry: Registry | None = None, inner: str | Callable = "inductor", **compile_kwargs):
    """torch.compile(model) with our pass; the compiled model carries `liger_fuse_stats` (FuseStats)."""
    stats = FuseStats(registry or default_registry())
    pads_before = stats.registry.replaced[padding.PATTERN_NAME]  # a registry the caller passes may hold others'
    if isinstance(model, torch.nn.Module):
        stats.loops_captured = capture_loops(model, stats.registry)
    compiled = torch.compile(model, backend=make_backend(stats, inner), **compile_kwargs)
    if stats.registry.replaced[padding.PATTERN_NAME] > pads_before:
        compiled.forward = _with_dynamo_settings(compiled.forward, padding.DYNAMO_SETTINGS)
    compiled.liger_fuse_stats = stats
    return compiled


def _with_dynamo_settings(forward, settings: dict):
    """Dynamo reads its config when it traces, which happens inside the compiled model's call: set for that call
    only, the rest of the process keeps the user's settings."""

    def forward_with_settings(*args, **kwargs):
        with torch._dynamo.config.patch(**settings):
            return forward(*args, **kwargs)

    return forward_with_settings
