"""Verify: ordered gates over the generated kernel. A failing hard gate stops the rest (each then SKIPs, saying why).

checkstyle -> unit tests on the CPU under TRITON_INTERPRET=1 -> unit tests on a GPU -> benchmark on a GPU. The GPU
gates SKIP with their reason on a host without CUDA: they never PASS there. The interpreter gate is a CPU host's:
on a GPU host it gives way to the GPU tests (Triton's interpreter differs between versions, and a GPU host's own
Triton 3.6 failed Liger's cross entropy under it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pipelines.changeset import checkstyle_gate
from pipelines.kernel.act import KernelFiles
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.subprocesses import run_command
from pipelines.target import Checkout


def _target_env(checkout: Checkout, interpret: bool) -> dict[str, str]:
    env = {
        "PYTHONPATH": os.pathsep.join([str(checkout.src.parent), str(checkout.root), os.environ.get("PYTHONPATH", "")])
    }
    if interpret:
        env |= {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    return env


def unit_tests(checkout: Checkout, name: str, on_gpu: bool) -> GateResult:
    label = "unit tests (GPU)" if on_gpu else "unit tests (CPU, TRITON_INTERPRET=1)"
    if on_gpu and not cuda_available():
        return GateResult(label, GateStatus.SKIP, "no CUDA device on this host; run on a GPU runner")
    if not on_gpu and cuda_available():  # a CPU-host gate: the interpreter never blocks a GPU host's real gates
        return GateResult(label, GateStatus.SKIP, "GPU host: the unit tests run on the GPU instead", hard=False)
    test = str(KernelFiles.of(name).test)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
    result = run_command(argv, cwd=checkout.root, env=_target_env(checkout, interpret=not on_gpu), timeout=900)
    summary = result.tail(1)
    if result.ok:
        return GateResult(label, GateStatus.PASS, summary)
    return GateResult(label, GateStatus.FAIL, result.tail(25))


def benchmark(checkout: Checkout, name: str, out_dir: Path) -> GateResult:
    if not cuda_available():
        return GateResult("benchmark (GPU)", GateStatus.SKIP, "no CUDA device on this host", hard=False)
    argv = [sys.executable, "-m", "pipelines.kernel.bench", "--repo", str(checkout.root), "--out", str(out_dir), name]
    env = {"PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])}
    result = run_command(argv, cwd=checkout.root, env=env, timeout=1800)
    status = GateStatus.PASS if result.ok else GateStatus.FAIL
    return GateResult("benchmark (GPU)", status, result.tail(30), hard=False)


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def skipped_after(failed: GateResult, name: str) -> GateResult:
    return GateResult(name, GateStatus.SKIP, f"not run: hard gate '{failed.name}' failed")


def verify(checkout: Checkout, name: str, paths: list[str], out_dir: Path) -> list[GateResult]:
    steps = [
        ("checkstyle", lambda: checkstyle_gate(checkout, paths)),
        ("unit tests (CPU, TRITON_INTERPRET=1)", lambda: unit_tests(checkout, name, on_gpu=False)),
        ("unit tests (GPU)", lambda: unit_tests(checkout, name, on_gpu=True)),
        ("benchmark (GPU)", lambda: benchmark(checkout, name, out_dir)),
    ]
    gates: list[GateResult] = []
    failed = None
    for label, step in steps:
        if failed is not None:
            gates.append(skipped_after(failed, label))
            continue
        gate = step()
        gates.append(gate)
        if gate.status is GateStatus.FAIL and gate.hard:
            failed = gate
    return gates
