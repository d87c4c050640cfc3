"""verify: the compiled model with the pass against eager (outputs and gradients), step time with and without."""

from __future__ import annotations

import copy
import importlib.util
import statistics
import time
from pathlib import Path

import torch

from pipelines.fuse.runtime import compile as fuse_compile
from pipelines.fuse.runtime.families import default_registry
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus


def load_pass(path: Path):
    spec = importlib.util.spec_from_file_location(f"liger_fuse_pass_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def verify(model, inputs: tuple, pass_file: Path | None, inner: str = "aot_eager") -> tuple[list[GateResult], dict]:
    registry = default_registry()
    if pass_file is not None:
        load_pass(pass_file).register(registry)
    eager = copy.deepcopy(model)
    torch._dynamo.reset()
    fused = fuse_compile(copy.deepcopy(model), registry=registry, inner=inner)
    expected, expected_grads = _run(eager, inputs)
    got, got_grads = _run(fused, inputs)
    out_diff = (got.double() - expected.double()).abs().max().item()
    grad_diff = max((got_grads[k].double() - expected_grads[k].double()).abs().max().item() for k in got_grads)
    torch._dynamo.reset()
    plain = torch.compile(copy.deepcopy(model), backend=inner)
    figures = {
        "replaced": fused.liger_fuse_stats.replaced,
        "out_max_abs_diff": out_diff,
        "grad_max_abs_diff": grad_diff,
        **alternating_step_ms(fused, plain, inputs),
    }
    gates = [
        _gate("pass applied", bool(figures["replaced"]), f"replaced {figures['replaced']}"),
        _gate("numerics vs eager", out_diff < 1e-4 and grad_diff < 1e-4, f"out {out_diff:.2e}, grads {grad_diff:.2e}"),
        step_time_gate(figures, _device_of(inputs)),
    ]
    return gates, figures


STEP_ROUNDS = 5  # rounds of (with, without), alternating so drift in the host hits both alike
MIN_STEP_GAIN = 0.03  # a speed claim: the pass's median step at least 3% faster, and by more than the spread


def alternating_step_ms(fused, plain, inputs, rounds: int = STEP_ROUNDS) -> dict:
    _step_ms(fused, inputs), _step_ms(plain, inputs)  # compile and warm both outside the rounds
    with_ms, without_ms = [], []
    for _ in range(rounds):
        with_ms.append(_step_ms(fused, inputs))
        without_ms.append(_step_ms(plain, inputs))
    return {
        "step_ms_with": statistics.median(with_ms),
        "step_ms_without": statistics.median(without_ms),
        "step_ms_rounds": {"with": with_ms, "without": without_ms},
    }


def step_time_gate(figures: dict, device: str) -> GateResult:
    """PASS only for a repeatable gain on a GPU; on a CPU host, timings are no speed claim (SKIP, never PASS)."""
    with_ms, without_ms = figures["step_ms_with"], figures["step_ms_without"]
    rounds = figures["step_ms_rounds"]
    spread = max(rounds["without"]) - min(rounds["without"])
    detail = (
        f"median of {len(rounds['with'])} alternating rounds: {with_ms:.3f} ms with the pass, {without_ms:.3f} ms "
        f"without (spread of the rounds without: {spread:.3f} ms; a claim needs >= {MIN_STEP_GAIN:.0%} and more "
        "than the spread)"
    )
    if device != "cuda":
        return GateResult("step time", GateStatus.SKIP, f"{device} host, no speed claim: {detail}", hard=False)
    gained = without_ms - with_ms
    ok = gained >= MIN_STEP_GAIN * without_ms and gained > spread
    return GateResult("step time", GateStatus.PASS if ok else GateStatus.FAIL, detail)


def _device_of(inputs: tuple) -> str:
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    return tensors[0].device.type if tensors else "cpu"


def _gate(name: str, ok: bool, detail: str) -> GateResult:
    return GateResult(name, GateStatus.PASS if ok else GateStatus.FAIL, detail)


def _run(model, inputs):
    model.zero_grad(set_to_none=True)
    out = model(*inputs)
    out.float().square().mean().backward()
    grads = {n.removeprefix("_orig_mod."): p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.detach(), grads


def _step_ms(model, inputs, steps: int = 5) -> float:
    model(*inputs)  # compile outside the timing
    start = time.perf_counter()
    for _ in range(steps):
        model(*inputs).float().square().mean().backward()
    return (time.perf_counter() - start) / steps * 1e3
