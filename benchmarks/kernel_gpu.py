"""The kernel pipeline's one GPU run: generated tests on the GPU, a launch-settings sweep, and the benchmark table.

Run on the device from the repository root, with the generated checkout carried in .targets/kernel-gpu
(made on the CPU by `PYTHONPATH=. python benchmarks/kernel_generate.py .targets/kernel-gpu`):

    PYTHONPATH=. python benchmarks/kernel_gpu.py .targets/kernel-gpu $OUT [names...]
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
import triton

from pipelines.kernel import bench

RELU2_HIDDEN = [128, 256, 512, 1024, 4096, 16384]
ROWS = 16384


def gpu_tests(repo: Path, names: list[str], out: Path) -> str:
    files = [f"test/transformers/test_{n}.py" for n in names]
    env = {**os.environ, "PYTHONPATH": f"{repo / 'src'}:{repo}"}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "12", *files]
    proc = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=400)
    (out / "gpu_tests.log").write_text(proc.stdout + proc.stderr)
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]


def launch_sweep(repo: Path) -> list[dict]:
    """relu2 at 16384 x 16384: the flat kernel's BLOCK_SIZE / num_warps, forward and backward alone."""
    sys.path[:0] = [str(repo / "src"), str(repo)]
    ops = __import__("liger_kernel.ops.relu2", fromlist=["relu2_forward"])
    x = torch.randn(ROWS, 16384, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    rows = []
    for block in (1024, 2048, 4096, 8192):
        for warps in (4, 8, 16):
            ops.BLOCK_SIZE, ops.NUM_WARPS = block, warps
            fwd = triton.testing.do_bench(lambda: ops.relu2_forward(x), rep=50, return_mode="median")
            bwd = triton.testing.do_bench(lambda: ops.relu2_backward(dy, x, True), rep=50, return_mode="median")
            rows.append({"block": block, "warps": warps, "fwd_ms": fwd, "bwd_ms": bwd})
    ops.BLOCK_SIZE, ops.NUM_WARPS = 4096, 8
    return rows


def main(repo: str, out: str, only: list[str]) -> None:
    repo, out = Path(repo).resolve(), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch._dynamo.config.automatic_dynamic_shapes = False
    torch._dynamo.config.cache_size_limit = 64
    kernels = json.loads((repo / "kernels.json").read_text())
    names = [k["name"] for k in kernels["kernels"] if not only or k["name"] in only]
    env = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": sys.version.split()[0],
    }
    print(env, flush=True)
    started = time.time()
    summary = gpu_tests(repo, names, out)
    print(f"GPU unit tests ({len(names)} kernels): {summary} [{time.time() - started:.0f}s]", flush=True)
    sweep = launch_sweep(repo)
    for row in sweep:
        print(
            f"relu2 16384x16384 BLOCK={row['block']} warps={row['warps']}: fwd {row['fwd_ms']:.3f} ms, bwd {row['bwd_ms']:.3f} ms"
        )
    copy_gbps = bench.copy_bandwidth()
    print(f"copy bandwidth {copy_gbps:.0f} GB/s", flush=True)
    results = []
    plan = [("relu2", h) for h in RELU2_HIDDEN] + [(n, 4096) for n in names if n != "relu2"]
    for name, hidden in plan:
        try:
            results.append(bench.measure(repo, name, hidden, ROWS, 50, copy_gbps))
            print(bench.markdown(results[-1:], copy_gbps).splitlines()[-1], flush=True)
        except Exception as exc:  # one op's failure must not lose the others' numbers
            print(f"{name} {hidden}: FAILED {type(exc).__name__}: {exc}", flush=True)
        (out / "kernel_gpu.json").write_text(
            json.dumps({"env": env, "tests": summary, "sweep": sweep, "copy_gbps": copy_gbps, "results": results})
        )
        if time.time() - started > 470:
            print("time budget reached; stopping the benchmark here", flush=True)
            break
    (out / "benchmark.md").write_text(bench.markdown(results, copy_gbps))
    bench.plot(results, out / "benchmark.png")
    print(bench.markdown(results, copy_gbps))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
