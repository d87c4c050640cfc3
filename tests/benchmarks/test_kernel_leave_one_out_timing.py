"""The kernel leave-one-out's timing table: each point says, per side, how its pass was timed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks import kernel_leave_one_out_gpu as gpu

ROOT = Path(__file__).resolve().parents[2]


def _side(method: dict) -> dict:
    return {"forward": 0.05, "backward": 0.1, "full": 0.15, "peak_mb": 64.0, "method": method}


def test_the_timing_table_shows_each_side_s_method_per_pass():
    graphed = dict.fromkeys(("forward", "backward", "full"), "cudagraph")
    point = {"case": "loo_swiglu", "tokens": 4096, "width": 14336}
    point |= {"generated": _side(graphed), "liger": _side({**graphed, "backward": "events"})}
    point |= {"eager": _side(graphed), "compile": {"error": "RuntimeError: capture and fallback both failed"}}
    summary = {"kernels": {}, "timing": {"method": "how", "points": [point]}}
    rows = {line.split(" | ")[2]: line for line in gpu.table(summary).splitlines() if line.startswith("| loo_swiglu")}
    assert rows["backward"].endswith("| cudagraph / events / cudagraph / - |")
    assert rows["forward"].endswith("| cudagraph / cudagraph / cudagraph / - |")
    assert rows["peak_mb"].endswith("|  |")  # memory is measured, not timed


# a fresh process: Liger's scripts import a top-level `utils` and read liger-kernel's installed version at import
_SWEEP = """
import importlib.metadata, sys
from pathlib import Path
from benchmarks import kernel_leave_one_out_gpu as gpu
tree, folder = Path(sys.argv[1]), Path(sys.argv[2])
try:
    importlib.metadata.version("liger-kernel")
    raise SystemExit("liger-kernel is installed here: the test would not see the checkout's import")
except importlib.metadata.PackageNotFoundError:
    pass
configs = gpu.liger_sweep_configs(tree, folder)
assert configs.__file__ == str(tree / "benchmark/scripts/benchmark_model_configs.py"), configs.__file__
print("version", importlib.metadata.version("liger-kernel"))
gib = 1024**3
configs.get_total_gpu_memory = lambda: 139  # an H200 (the CUDA part of Liger's rule), the probe's peak measured
for peak in (64 * 1024**2, 10 * gib):
    configs.estimate_kernel_peak_memory = lambda probe_fn, peak=peak: peak
    print("tokens", peak // 1024**2, gpu.sweep_tokens(configs, probe=None))
"""


def test_liger_s_sweep_rule_imports_from_a_checkout_not_installed_and_gives_its_sizes(liger_checkout, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _SWEEP, str(liger_checkout.root), str(tmp_path / "metadata")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert "version 0.8.5" in lines
    # the model's context (llama_3_8b: 8192) caps a small footprint; at 10 GiB per 1024 tokens, 40% of 139 GiB holds
    # 5693 tokens, snapped down to 4096
    assert "tokens 64 [1024, 2048, 4096, 8192]" in lines
    assert "tokens 10240 [1024, 2048, 4096]" in lines


def test_the_peak_row_says_whether_each_side_s_dx_shared_dy_on_the_gpu():
    graphed = dict.fromkeys(("forward", "backward", "full"), "cudagraph")
    point = {"case": "loo_rms_norm_llama", "tokens": 4096, "width": 4096}
    point |= {"generated": {**_side(graphed), "memory_check": {"shares_dy": False, "peak_bytes": 1}}}
    point |= {"liger": {**_side(graphed), "memory_check": {"shares_dy": True, "peak_bytes": 1}}}
    point |= {"eager": _side(graphed), "compile": _side(graphed)}
    summary = {"kernels": {}, "timing": {"method": "how", "points": [point]}}
    rows = {line.split(" | ")[2]: line for line in gpu.table(summary).splitlines() if line.startswith("| loo_rms")}
    assert rows["peak_mb"].endswith("| dX in dY: no / yes |")


def test_the_dx_destination_check_times_the_kernel_with_dx_into_dy_then_apart_and_restores_it(monkeypatch):
    import types

    import torch

    ops = types.ModuleType("liger_kernel.ops.loo_fake_norm")
    ops._can_overwrite = lambda dY, X, in_place: "the kernel's own"
    monkeypatch.setitem(sys.modules, "liger_kernel.ops.loo_fake_norm", ops)
    seen = []

    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 2

        @staticmethod
        def backward(ctx, dy):
            seen.append(ops._can_overwrite(dy, ctx.saved_tensors[0], True))
            return dy * 2

    class Layer(torch.nn.Module):
        def forward(self, x):
            return Twice.apply(x)

    out = gpu.dx_destination("loo_fake_norm", Layer(), [torch.randn(4, 8)])
    assert set(out) == {"into_dy", "apart"} and all(out[k]["backward"] > 0 for k in out)
    assert True in seen and False in seen and seen == sorted(seen, reverse=True)  # into dY first, then apart
    assert ops._can_overwrite(None, None, True) == "the kernel's own"
