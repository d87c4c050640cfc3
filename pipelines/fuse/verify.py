"""verify: the compiled model with the pass against eager (outputs and gradients), step time with and without."""

from __future__ import annotations

import copy
import importlib.util
import json
import statistics
import subprocess
import sys
import sysconfig
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


# The child of the standalone gate: only the target's src/, the model's file and the installed packages on its path
# (-S: site's .pth files, this project's editable install among them, are never read)
STANDALONE_CHILD = """
import copy, importlib.util, json, sys
sys.path[:0] = [{src!r}]
sys.path += {site!r}
found = importlib.util.find_spec("pipelines") is not None
import torch
from liger_kernel.fuse_passes import registry_with_passes
from liger_kernel.fuse_passes.runtime import compile
loader = importlib.util.spec_from_file_location("liger_fuse_standalone_model", {model!r})
module = importlib.util.module_from_spec(loader)
sys.modules[loader.name] = module
loader.loader.exec_module(module)
model, inputs = getattr(module, {factory!r})()
compiled = compile(copy.deepcopy(model), registry=registry_with_passes(), inner="aot_eager")
diff = (compiled(*inputs).double() - model(*inputs).double()).abs().max().item()
ours = sorted(m for m in sys.modules if m.split(".")[0] in ("pipelines", "bot", "kernel_templates"))
print(json.dumps({{"replaced": compiled.liger_fuse_stats.replaced, "out_max_abs_diff": diff,
                  "pipelines_importable": found, "loaded_from_liger_bot": ours}}))
"""


def standalone_run(root: Path, model_file: Path, factory: str, timeout: int = 300) -> dict:
    """The pass and the runtime as a training job in the target uses them: a child without liger-bot or this
    repository on its path. Returns the child's facts, or {"error": ...}."""
    import triton

    # where torch and triton are installed (a stage child may run with another prefix than the venv's own)
    installed = [str(Path(module.__file__).parent.parent) for module in (torch, triton)]
    site = list(dict.fromkeys([*installed, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]))
    child = STANDALONE_CHILD.format(src=str(root / "src"), site=site, model=str(model_file), factory=factory)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(root)}  # no PYTHONPATH
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"  # the pooling kernels on CPU tensors, as the CPU tests run them
    try:
        done = subprocess.run(
            [sys.executable, "-S", "-c", child], cwd=root, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {timeout} s"}
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-1500:] or f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def standalone_gate(facts: dict) -> GateResult:
    name = "runs without liger-bot"
    if "error" in facts:
        return GateResult(name, GateStatus.FAIL, facts["error"])
    ok = (
        facts["replaced"]
        and facts["out_max_abs_diff"] < 1e-4
        and not facts["pipelines_importable"]
        and not facts["loaded_from_liger_bot"]
    )
    detail = (
        f"the target's src/ only (liger_kernel.fuse_passes + its runtime): replaced {facts['replaced']}, "
        f"out {facts['out_max_abs_diff']:.2e} vs eager"
    )
    return GateResult(name, GateStatus.PASS if ok else GateStatus.FAIL, detail)
