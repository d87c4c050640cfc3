"""The kernel pipeline's one GPU run: generated tests on the GPU, host-path and backward diagnostics, small sizes,
and the benchmark table, all in one call under a time budget (results are written as they come).

Run on the device from the repository root, with the generated checkout carried in .targets/kernel-gpu-slim
(made on the CPU by `PYTHONPATH=. python benchmarks/kernel_generate.py .targets/kernel-gpu`, see NOTES.md):

    PYTHONPATH=. python benchmarks/kernel_gpu.py .targets/kernel-gpu-slim $OUT [probe | table]

All generated kernels' tests run first; then relu2's diagnostics and small sizes (alternating rounds), then the
table: relu2 over RELU2_HIDDEN, then every other kernel at TABLE_HIDDEN, until BUDGET_S.
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
SMALL_HIDDEN = [128, 256, 512, 1024]
ROWWISE = [("rms_norm_llama", 1024), ("softmax_rowwise", 1024)]
TABLE_HIDDEN = 4096
BUDGET_S = 480


def gpu_tests(repo: Path, names: list[str], out: Path) -> str:
    files = [f"test/transformers/test_{n}.py" for n in names]
    env = {**os.environ, "PYTHONPATH": f"{repo / 'src'}:{repo}"}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "12", *files]
    proc = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    (out / "gpu_tests.log").write_text(proc.stdout + proc.stderr)
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]


def gpu_only_ms(fn, grad_to_none, n: int = 50) -> float:
    """do_bench's loop with a GPU sleep before each start event: the host runs ahead, so the events time GPU work."""
    cache = torch.empty(256 * 2**20 // 4, dtype=torch.int, device="cuda")
    fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        for t in grad_to_none:
            t.grad = None
        cache.zero_()
        torch.cuda._sleep(1_000_000)  # ~0.5 ms at 1.98 GHz
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return sorted(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))[n // 2]


def diagnostics(repo: Path) -> dict:
    """Items 1 and 2 of issue 4: where relu2's time goes at hidden 128 (host) and 4096 (backward)."""
    ops = __import__("liger_kernel.ops.relu2", fromlist=["relu2_backward"])
    out: dict = {"host_us": {}, "backward_4096_ms": {}}
    for hidden, section in ((128, "host_us"), (4096, "backward_4096_ms")):
        layers = bench.load_layers(repo, "relu2", hidden, torch.bfloat16)
        layers["liger_jit"] = layers["liger"]  # same module, DIRECT_LAUNCH off (below)
        layers["liger_not_in_place"] = type(layers["liger"])(in_place=False).to("cuda")
        x = torch.randn(ROWS, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for provider, layer in layers.items():
            ops.DIRECT_LAUNCH = provider != "liger_jit"
            y = layer(x)
            dy = torch.randn_like(y)

            def backward(y=y, dy=dy):
                y.backward(dy, retain_graph=True)

            def full(layer=layer, x=x):
                out_ = layer(x)
                out_.backward(torch.randn_like(out_), retain_graph=True)

            if section == "host_us":
                out[section][provider] = {
                    "forward": bench.host_us(lambda layer=layer, x=x: layer(x)),
                    "backward": bench.host_us(backward),
                    "full": bench.host_us(full),
                }
            else:
                out[section][provider] = {
                    "framework": triton.testing.do_bench(backward, grad_to_none=[x], rep=50, return_mode="median"),
                    "gpu_only": gpu_only_ms(backward, [x]),
                }
            x.grad = None
        ops.DIRECT_LAUNCH = True
        if section == "backward_4096_ms":
            dy = torch.randn_like(x)
            out[section]["bare_kernel"] = triton.testing.do_bench(
                lambda dy=dy, x=x: ops.relu2_backward(dy, x, True), rep=50, return_mode="median"
            )
            cache = torch.empty(256 * 2**20 // 4, dtype=torch.int, device="cuda")
            # do_bench zeroes a 256 MB buffer before each start event: host time up to this long stays hidden
            out[section]["cache_clear"] = triton.testing.do_bench(cache.zero_, rep=20, return_mode="median")
    return out


def small_sizes(repo: Path, rounds: int = 5) -> dict:
    """relu2 at hidden 128-1024 (M = 16384): eager and liger timed in alternating rounds, each mode as the
    framework times it; the median over rounds, so one noisy sample decides nothing."""
    out: dict = {}
    for hidden in SMALL_HIDDEN:
        layers = bench.load_layers(repo, "relu2", hidden, torch.bfloat16)
        x = torch.randn(ROWS, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        samples = {provider: {mode: [] for mode in bench.MODES} for provider in ("liger", "torch")}
        for _ in range(rounds):
            for provider in samples:
                times = bench.time_modes(layers[provider], x, 25)
                for mode in bench.MODES:
                    samples[provider][mode].append(times[mode])
                x.grad = None
        medians = {p: {m: sorted(v)[len(v) // 2] for m, v in modes.items()} for p, modes in samples.items()}
        out[hidden] = {
            "samples_ms": samples,
            "median_ms": medians,
            "eager_over_liger": {m: medians["torch"][m] / medians["liger"][m] for m in bench.MODES},
        }
        print(f"small {hidden}:", json.dumps(out[hidden]["eager_over_liger"]), flush=True)
    return out


def drift_probe(repo: Path) -> dict:
    """Does a forward's measured time depend on what ran before it in the process? relu, relu2 and a plain clone at
    TABLE_HIDDEN: do_bench, GPU kernel time (profiler) and host time, fresh, after torch.compile of six reference
    modules, and after relu2's 16384 row."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile

    def snapshot():
        row = {}
        for name in ("relu", "relu2"):
            layer = bench.load_layers(repo, name, TABLE_HIDDEN, torch.bfloat16)["liger"]
            x = torch.randn(ROWS, TABLE_HIDDEN, device="cuda", dtype=torch.bfloat16)
            fn = lambda layer=layer, x=x: layer(x)  # noqa: E731
            row[name] = {"do_bench_us": 1e3 * triton.testing.do_bench(fn, rep=50, return_mode="median")}
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    fn()
                torch.cuda.synchronize()
            kernels = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
            row[name]["gpu_us"] = sum(e.self_device_time_total for e in kernels) / 10
            row[name]["host_us"] = bench.host_us(fn, 100)
        x = torch.randn(ROWS, TABLE_HIDDEN, device="cuda", dtype=torch.bfloat16)
        row["clone_do_bench_us"] = 1e3 * triton.testing.do_bench(x.clone, rep=50, return_mode="median")
        return row

    out = {"fresh": snapshot()}
    for name in ("gelu", "silu", "relu", "tanh", "rms_norm_llama", "softmax_rowwise"):
        layer = bench.load_layers(repo, name, TABLE_HIDDEN, torch.bfloat16)["torch_compile"]
        x = torch.randn(64, TABLE_HIDDEN, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        layer(x).sum().backward()
    out["after_compiles"] = snapshot()
    bench.measure(repo, "relu2", 16384, ROWS, 50, 4200.0, ("liger", "torch"))
    out["after_relu2_16384"] = snapshot()
    return out


def main(repo: str, out: str, only: str = "") -> None:
    repo, out = Path(repo).resolve(), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sys.path[:0] = [str(repo / "src"), str(repo)]
    torch._dynamo.config.automatic_dynamic_shapes = False
    torch._dynamo.config.cache_size_limit = 64
    started = time.time()
    env = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": sys.version.split()[0],
    }
    record: dict = {"env": env}

    def save():
        (out / "kernel_gpu.json").write_text(json.dumps(record, indent=1))

    print(env, flush=True)
    if only == "probe":
        record["drift_probe"] = drift_probe(repo)
        print(json.dumps(record["drift_probe"], indent=1), flush=True)
        save()
        return
    kernels = [k["name"] for k in json.loads((repo / "kernels.json").read_text())["kernels"]]
    if only != "table":  # "table": the tests and diagnostics already ran in an earlier call
        record["tests"] = gpu_tests(repo, kernels, out)
        print(f"GPU unit tests ({len(kernels)} kernels): {record['tests']} [{time.time() - started:.0f}s]", flush=True)
        record["diagnostics"] = diagnostics(repo)
        print(json.dumps(record["diagnostics"], indent=1), f"[{time.time() - started:.0f}s]", flush=True)
    record["copy_gbps"] = copy_gbps = bench.copy_bandwidth()
    save()
    record["small_sizes"] = small_sizes(repo)
    save()
    plan = [("relu2", h, bench.PROVIDERS) for h in RELU2_HIDDEN]
    plan += [(name, h, bench.PROVIDERS) for name, h in ROWWISE]
    plan += [(name, TABLE_HIDDEN, bench.PROVIDERS) for name in kernels if name != "relu2"]
    record["results"] = []
    for name, hidden, providers in plan:
        if time.time() - started > BUDGET_S:
            print(f"time budget reached; not run: {name} {hidden}", flush=True)
            continue
        try:
            record["results"].append(bench.measure(repo, name, hidden, ROWS, 50, copy_gbps, providers))
            print(bench.markdown(record["results"][-1:], copy_gbps).splitlines()[-1], flush=True)
        except Exception as exc:  # one op's failure must not lose the others' numbers
            print(f"{name} {hidden}: FAILED {type(exc).__name__}: {exc}", flush=True)
        save()
    record["deterministic_at_end"] = torch.are_deterministic_algorithms_enabled()  # must stay False (bench.py)
    save()
    (out / "benchmark.md").write_text(bench.markdown(record["results"], copy_gbps))
    bench.plot(record["results"], out / "benchmark.png")
    print(bench.markdown(record["results"], copy_gbps))
    print(f"total {time.time() - started:.0f}s")


if __name__ == "__main__":
    main(*sys.argv[1:4])
