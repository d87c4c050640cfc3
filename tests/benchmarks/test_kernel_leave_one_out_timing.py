"""The kernel leave-one-out's timing table: each point says, per side, how its pass was timed."""

from __future__ import annotations

from benchmarks import kernel_leave_one_out_gpu as gpu


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
