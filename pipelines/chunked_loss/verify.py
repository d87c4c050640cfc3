"""Verify: ordered gates over the generated loss. A failing hard gate stops the rest (each then SKIPs, saying why).

checkstyle -> import -> the generated tests on the CPU -> the tests on a GPU -> the benchmark on a GPU (peak memory
and time against the unfused reference). Liger's chunked losses are PyTorch (+ torch.compile on a GPU), so the
generated tests run on a CPU host as they are; on a GPU host the CPU gate gives way to the GPU one. The GPU gates
SKIP with their reason on a host without CUDA: they never PASS there. Every gate runs the target's code in a child
with the allow-listed environment (`pipelines.subprocesses`), never in this process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pipelines.changeset import checkstyle_gate
from pipelines.chunked_loss.act import LossFiles
from pipelines.chunked_loss.act import names
from pipelines.kernel.verify import cuda_available
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.subprocesses import run_command
from pipelines.target import Checkout

LIGER_BOT_ROOT = Path(__file__).resolve().parents[2]


def _target_env(checkout: Checkout, cpu: bool) -> dict[str, str]:
    env = {
        "PYTHONPATH": os.pathsep.join([str(checkout.src.parent), str(checkout.root), os.environ.get("PYTHONPATH", "")])
    }
    if cpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def import_gate(checkout: Checkout, name: str) -> GateResult:
    n = names(name)
    code = (
        f"from liger_kernel.chunked_loss import {n['module_class']}\n"
        f"from liger_kernel.chunked_loss.functional import {n['functional_name']}\n"
        f"from liger_kernel.chunked_loss.{name}_loss import {n['function_class']}\n"
        f"assert {n['functional_name']} == {n['function_class']}.apply\n"
    )
    result = run_command(
        [sys.executable, "-c", code], cwd=checkout.root, env=_target_env(checkout, cpu=True), timeout=300
    )
    if result.ok:
        return GateResult(
            "import", GateStatus.PASS, f"{n['module_class']}, {n['functional_name']}, {n['function_class']}"
        )
    return GateResult("import", GateStatus.FAIL, result.tail(15))


def unit_tests(checkout: Checkout, name: str, on_gpu: bool) -> GateResult:
    label = "unit tests (GPU)" if on_gpu else "unit tests (CPU)"
    if on_gpu and not cuda_available():
        return GateResult(label, GateStatus.SKIP, "no CUDA device on this host; run on a GPU runner")
    if not on_gpu and cuda_available():  # a CPU-host gate: the GPU host runs the same tests on its GPU instead
        return GateResult(label, GateStatus.SKIP, "GPU host: the unit tests run on the GPU instead", hard=False)
    test = str(LossFiles.of(name).test)
    argv = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist", test]
    result = run_command(argv, cwd=checkout.root, env=_target_env(checkout, cpu=not on_gpu), timeout=1800)
    if result.ok:
        return GateResult(label, GateStatus.PASS, result.tail(1))
    return GateResult(label, GateStatus.FAIL, result.tail(40))


def benchmark(checkout: Checkout, name: str, out_dir: Path) -> GateResult:
    if not cuda_available():
        return GateResult("benchmark (GPU)", GateStatus.SKIP, "no CUDA device on this host", hard=False)
    argv = [
        sys.executable,
        "-m",
        "pipelines.chunked_loss.bench",
        "--repo",
        str(checkout.root),
        "--out",
        str(out_dir),
        name,
    ]
    env = {"PYTHONPATH": os.pathsep.join([str(LIGER_BOT_ROOT), os.environ.get("PYTHONPATH", "")])}
    result = run_command(argv, cwd=checkout.root, env=env, timeout=1800)
    status = GateStatus.PASS if result.ok else GateStatus.FAIL
    return GateResult("benchmark (GPU)", status, result.tail(30), hard=False)


def skipped_after(failed: GateResult, name: str) -> GateResult:
    return GateResult(name, GateStatus.SKIP, f"not run: hard gate '{failed.name}' failed")


def verify(checkout: Checkout, name: str, paths: list[str], out_dir: Path, progress=None) -> list[GateResult]:
    steps = [
        ("checkstyle", lambda: checkstyle_gate(checkout, paths)),
        ("import", lambda: import_gate(checkout, name)),
        ("unit tests (CPU)", lambda: unit_tests(checkout, name, on_gpu=False)),
        ("unit tests (GPU)", lambda: unit_tests(checkout, name, on_gpu=True)),
        ("benchmark (GPU)", lambda: benchmark(checkout, name, out_dir)),
    ]
    gates: list[GateResult] = []
    failed = None
    for label, step in steps:
        gate = skipped_after(failed, label) if failed is not None else step()
        gates.append(gate)
        if progress is not None:
            progress(gate.said())
        if failed is None and gate.status is GateStatus.FAIL and gate.hard:
            failed = gate
    return gates
