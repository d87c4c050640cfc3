"""GPU benchmark of generated kernels against eager PyTorch and torch.compile, as the target's framework times them.

forward, backward (`y.backward(dy, retain_graph=True)`) and full (forward + backward with a fresh dy) are each
timed alone with `triton.testing.do_bench` (median); peak memory is the full pass's `max_memory_allocated`.
Bandwidth is the bytes a pass must move (read x, write y; read x and dy, write dx) over its time, against a
measured device-to-device copy. Writes benchmark.json, benchmark.md and benchmark.png into --out.

    python -m pipelines.kernel.bench --repo TARGET --out DIR relu2 [more names] [--hidden 4096 16384]
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

import torch

from pipelines.kernel import reference
from pipelines.kernel.spec import pascal

MODES = ("forward", "backward", "full")
PROVIDERS = ("liger", "torch", "torch_compile")


def copy_bandwidth(n_bytes: int = 2**30) -> float:
    """GB/s of a device-to-device copy, counting bytes read plus bytes written."""
    import triton

    src = torch.empty(n_bytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=25, rep=100, return_mode="median")
    return 2 * n_bytes / (ms * 1e-3) / 1e9


def host_us(fn, calls: int = 300, warmup: int = 20) -> float:
    """Host time per call with launches queued, not waited for: the launch path's cost wherever the GPU keeps up."""
    import time

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - started
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def load_layers(repo: Path, name: str, hidden: int, dtype: torch.dtype) -> dict[str, torch.nn.Module]:
    for entry in (str(repo), str(repo / "src")):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    with reference.determinism_kept():  # references taken from Liger's test_rms_norm.py switch it on at import
        test = importlib.import_module(f"test.transformers.test_{name}")
    liger_cls = getattr(importlib.import_module(f"liger_kernel.transformers.{name}"), f"Liger{pascal(name)}")
    torch_cls = getattr(test, f"Torch{pascal(name)}")
    takes_hidden = "hidden_size" in liger_cls.__init__.__code__.co_varnames
    args = (hidden,) if takes_hidden else ()
    eager = torch_cls(*args).to("cuda").to(dtype)
    liger = liger_cls(*args).to("cuda").to(dtype)
    keys = getattr(test, "STATE_KEYS", {})  # the reference's state-dict keys -> the Liger module's
    liger.load_state_dict({keys.get(k, k): v for k, v in eager.state_dict().items()})
    return {"liger": liger, "torch": eager, "torch_compile": torch.compile(torch_cls(*args).to("cuda").to(dtype))}


def input_count(name: str) -> int:
    """How many tensor inputs the op takes: the generated test's N_INPUTS (imported already by load_layers)."""
    return getattr(importlib.import_module(f"test.transformers.test_{name}"), "N_INPUTS", 1)


def one_output(result):
    """Several outputs (add + norm returns the sum too) are timed through their sum, alike for every provider."""
    return sum(result) if isinstance(result, (tuple, list)) else result


def time_modes(layer, inputs: torch.Tensor | list[torch.Tensor], rep: int) -> dict[str, float]:
    import triton

    inputs = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)

    def bench(fn):
        return triton.testing.do_bench(fn, grad_to_none=inputs, warmup=max(5, rep // 4), rep=rep, return_mode="median")

    def forward():
        return one_output(layer(*inputs))

    y = forward()
    dy = torch.randn_like(y)

    def full():
        out = forward()
        out.backward(torch.randn_like(out), retain_graph=True)

    times = {"forward": bench(forward), "backward": bench(lambda: y.backward(dy, retain_graph=True))}
    times["full"] = bench(full)
    y = dy = None  # release before the memory measurement
    torch.cuda.synchronize()
    for x in inputs:
        x.grad = None
    peaks = []
    for _ in range(3):
        torch.cuda.reset_peak_memory_stats()
        full()
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated() / 2**20)
    times["peak_mb"] = sorted(peaks)[1]
    return times


def measure(
    repo: Path, name: str, hidden: int, rows: int, rep: int, copy_gbps: float, providers: tuple = PROVIDERS
) -> dict:
    dtype = torch.bfloat16
    layers, n_inputs = load_layers(repo, name, hidden, dtype), input_count(name)
    inputs = [torch.randn(rows, hidden, device="cuda", dtype=dtype, requires_grad=True) for _ in range(n_inputs)]
    with torch.no_grad():
        outputs = layers["liger"](*inputs)
        torch.testing.assert_close(outputs, layers["torch"](*inputs), atol=1e-1, rtol=5e-2)
    n_outputs = len(outputs) if isinstance(outputs, (tuple, list)) else 1
    result = {"name": name, "rows": rows, "hidden": hidden}
    for provider in providers:
        result[provider] = time_modes(layers[provider], inputs, rep)
        for x in inputs:
            x.grad = None
    if "torch_compile" not in providers:  # an A/B run of two liger versions: no compile column
        result["torch_compile"] = {mode: float("nan") for mode in (*MODES, "peak_mb")}
    element = inputs[0].numel() * inputs[0].element_size()
    # forward: read the inputs, write the outputs; backward: read the inputs and each output's gradient, write dinputs
    moved = {"forward": (n_inputs + n_outputs) * element, "backward": (2 * n_inputs + n_outputs) * element}
    for mode, n_bytes in moved.items():
        result[f"liger_{mode}_gbps"] = n_bytes / (result["liger"][mode] * 1e-3) / 1e9
        result[f"liger_{mode}_pct_copy"] = 100 * result[f"liger_{mode}_gbps"] / copy_gbps
    for mode in MODES:
        result[f"speedup_{mode}_vs_eager"] = result["torch"][mode] / result["liger"][mode]
        result[f"speedup_{mode}_vs_compile"] = result["torch_compile"][mode] / result["liger"][mode]
    result["memory_saving_vs_eager_pct"] = 100 * (1 - result["liger"]["peak_mb"] / result["torch"]["peak_mb"])
    return result


def markdown(results: list[dict], copy_gbps: float) -> str:
    rows = [
        f"bf16; copy bandwidth {copy_gbps:.0f} GB/s; speedup = other time / liger time (medians of do_bench)",
        "",
        "| kernel | rows x hidden | fwd vs eager | bwd vs eager | full vs eager | fwd vs compile | bwd vs compile "
        "| full vs compile | peak MB liger / eager | memory saved | fwd % copy BW | bwd % copy BW |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        rows.append(
            f"| {r['name']} | {r['rows']}x{r['hidden']} | {r['speedup_forward_vs_eager']:.2f}x "
            f"| {r['speedup_backward_vs_eager']:.2f}x | {r['speedup_full_vs_eager']:.2f}x "
            f"| {r['speedup_forward_vs_compile']:.2f}x | {r['speedup_backward_vs_compile']:.2f}x "
            f"| {r['speedup_full_vs_compile']:.2f}x | {r['liger']['peak_mb']:.0f} / {r['torch']['peak_mb']:.0f} "
            f"| {r['memory_saving_vs_eager_pct']:.1f}% | {r['liger_forward_pct_copy']:.0f}% "
            f"| {r['liger_backward_pct_copy']:.0f}% |"
        )
    return "\n".join(rows) + "\n"


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['name']}\n{r['hidden']}" for r in results]
    fig, ax = plt.subplots(figsize=(max(8, 0.5 * len(results)), 4.5))
    width = 0.27
    for i, mode in enumerate(MODES):
        xs = [j + (i - 1) * width for j in range(len(results))]
        ax.bar(xs, [r[f"speedup_{mode}_vs_eager"] for r in results], width, label=f"{mode} vs eager")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(results)), labels, rotation=90, fontsize=7)
    ax.set_ylabel("speedup over eager PyTorch (bf16)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+")
    parser.add_argument("--repo", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--rows", type=int, default=16384)
    parser.add_argument("--hidden", type=int, nargs="+", default=[4096])
    parser.add_argument("--rep", type=int, default=50, help="do_bench repetition time in ms")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    copy_gbps = copy_bandwidth()
    results = []
    for name in args.names:
        for hidden in args.hidden:
            results.append(measure(args.repo.resolve(), name, hidden, args.rows, args.rep, copy_gbps))
            print(markdown(results[-1:], copy_gbps).splitlines()[-1], flush=True)
    (args.out / "benchmark.json").write_text(json.dumps({"copy_gbps": copy_gbps, "results": results}, indent=2))
    (args.out / "benchmark.md").write_text(markdown(results, copy_gbps))
    plot(results, args.out / "benchmark.png")
    print(markdown(results, copy_gbps))


if __name__ == "__main__":
    main()
