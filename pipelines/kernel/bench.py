"""GPU benchmark of generated kernels against eager PyTorch and torch.compile, as the target's framework times them.

forward, backward and full (forward + backward) are each timed by `timed_modes`: replayed from a CUDA graph where
capture works (pipelines/graph_timing, the perf pipeline's timer; backward is full minus forward), else per call on
fresh leaf inputs, the method recorded per point (JSON: each provider's "method"; the table's timing column) and
modes under the launch floor listed as not judged; peak memory is the full pass's `max_memory_allocated`, with dy
handed over as a model's next layer hands it (HandedOver). benchmarks/kernel_leave_one_out_gpu.py times its sides
with it too.
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

from pipelines import graph_timing
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


TIMING_METHOD = (
    "each mode replayed from a CUDA graph of ~20 ms of unrolled calls on one set of static leaf inputs (medians of "
    "10 replays; the host's launch and autograd overhead out of the figure, no L2 flush between the calls): forward: "
    "the forward; full: forward + backward, a new autograd graph per call (no retain_graph), param grads None; "
    "backward: full minus forward. Where capture fails, per-call CUDA-event medians, L2 flushed before each, over "
    "~{rep} ms (do_bench's rule, at most 200 calls), every call on fresh leaf inputs and a fresh dy made untimed, "
    "backward the backward of a forward run untimed just before it. Each point's method is in its 'method' "
    "(cudagraph / events / wall); a point under {floor:g} us is launch latency, not judged. Peak MB: the full "
    "pass's max_memory_allocated on fresh inputs, inputs and dy counted once, dy handed over as a next layer's "
    "backward hands it (held by autograd alone: what lets a kernel write dX into dY safely)"
)
MAX_CALLS = 200
EVENTS = "events"  # per-call CUDA events, the host in the loop
WALL = "wall"  # perf_counter without CUDA: a dry run and the CPU tests


def time_modes(layer, inputs, rep: float = 20.0, dynamic: bool = False, device: str = "cuda") -> dict[str, float]:
    """forward / backward / full (ms, medians) and peak MB of one layer; `timed_modes` without the methods."""
    return timed_modes(layer, inputs, rep, dynamic, device)[0]


def timed_modes(
    layer, inputs, rep: float = 20.0, dynamic: bool = False, device: str = "cuda", cudagraph: bool = True
) -> tuple[dict[str, float], dict[str, str]]:
    """(times, methods): forward / backward / full (ms, medians) and peak MB of one layer, as Liger's benchmark
    scripts define the modes (utils.run_speed_benchmark: backward is y.backward(dy) alone, full is the forward and
    that backward), with none of their retain_graph; methods says per mode how it was timed.

    On CUDA each mode is replayed from a CUDA graph (pipelines/graph_timing, perf's timer): one set of static leaves
    cloned from `inputs`, every unrolled call of full a new autograd graph with one backward, so torch.compile's
    donated buffers are used once per graph and Liger's SiLUMul / GELUMul backward, writing its gradients into its
    saved inputs, only changes the static inputs' values. Where capture fails, the per-call method: `inputs` (a
    tensor or a list) are templates, never touched; each call clones them into new leaves (marked dynamic on the
    tokens dimension where `dynamic`) and dy is a new clone of one random dy (why fresh: a compiled backward's
    donated buffers raise on a second backward of one graph, Liger's SiLUMul leaves an input reused across calls
    holding gradients, Liger's norms write dX into dY, accumulated param grads add a kernel to every backward). The
    timer is CUDA events with an L2 flush before each call (triton.testing.do_bench's way); without CUDA,
    perf_counter (a dry run, and the CPU tests)."""
    templates = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
    cuda = device == "cuda" and torch.cuda.is_available()
    params = [p for p in layer.parameters() if p.requires_grad]
    flush = [torch.empty(256 * 2**20 // 4, dtype=torch.int32, device=device)] if cuda else []

    def fresh():
        xs = [x.detach().clone().requires_grad_(True) for x in templates]
        if dynamic:
            for x in xs:
                torch._dynamo.mark_dynamic(x, 0)
        for p in params:
            p.grad = None
        return xs

    def forward(xs):
        return one_output(layer(*xs))

    y = forward(fresh())
    dy_template = torch.randn_like(y)
    del y

    def with_graph():
        xs = fresh()
        return [forward(xs), dy_template.clone(), xs]

    def backward(state):
        y, dy = state.pop(0), state.pop(0)  # what is left of state keeps the inputs alive
        y.backward(dy)

    def full(state):
        y = forward(state.pop())
        y.backward(state.pop())

    method = EVENTS if cuda else WALL

    def per_call(setup, fn):
        return lambda: (_median(lambda s, f: _timed_call(s, f, flush[0] if cuda else None), setup, fn, rep), method)

    fallbacks = {
        "forward": per_call(fresh, forward),
        "backward": per_call(with_graph, backward),
        "full": per_call(lambda: [dy_template.clone(), fresh()], full),
    }
    graphs = graph_calls(forward, fresh, dy_template, params)
    times, methods = choose_modes(graphs, fallbacks, enabled=cuda and cudagraph)
    if cuda:  # the full pass's peak, its inputs and dy counted once (the templates and the flush buffer left out)
        flush.clear()
        times["peak_mb"] = _peak_mb(lambda: [dy_template.clone(), fresh()], handed_over(forward)) - held_mb(
            templates, dy_template
        )
    for p in params:
        p.grad = None
    return times, methods


def held_mb(templates, dy_template) -> float:
    """MB the harness itself keeps allocated through a peak measurement: the input templates and the dy template,
    each cloned into the pass (so without this every input and dy counted twice; the tenth session's table counted dy
    twice, both sides alike)."""
    return sum(t.numel() * t.element_size() for t in [*templates, dy_template]) / 2**20


def handed_over_check(layer, inputs, device: str = "cuda") -> dict:
    """One full pass of `layer` with dy handed over (HandedOver), as the peak figure runs it: shares_dy says whether
    the first input's .grad landed in dy's storage (a kernel writing dX into dY, and autograd adopting it as .grad);
    on CUDA, peak_bytes is the pass's max_memory_allocated above what was allocated before it (the fresh inputs and
    dy already counted there, so: outputs, saved tensors and the backward's own buffers)."""
    templates = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
    xs = [x.detach().clone().to(device).requires_grad_(True) for x in templates]
    for p in layer.parameters():
        p.grad = None
    cuda = device == "cuda" and torch.cuda.is_available()
    with torch.no_grad():
        dy = torch.randn_like(one_output(layer(*xs)))
    pointer = dy.data_ptr()
    if cuda:
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    box = [dy]
    del dy
    HandedOver.apply(one_output(layer(*xs)), box).sum().backward()
    out = {"shares_dy": xs[0].grad is not None and xs[0].grad.data_ptr() == pointer}
    if cuda:
        torch.cuda.synchronize()
        out["peak_bytes"] = torch.cuda.max_memory_allocated() - before
    for p in layer.parameters():
        p.grad = None
    return out


class HandedOver(torch.autograd.Function):
    """y unchanged; its backward gives the dy held in `box` and lets go of it, so autograd alone holds dy, as when
    the next layer's backward made it. A caller's `y.backward(dy)` keeps a reference torch counts, and the
    generated kernels write dX into dY's storage only where nothing else holds it (their _can_overwrite: a residual
    x + op(x) shares it); Liger's norms overwrite it either way. So peak memory is measured the way a model hands
    dY over, not the way a caller's dy is kept."""

    @staticmethod
    def forward(ctx, y, box):
        ctx.box = box
        return y.view_as(y)

    @staticmethod
    def backward(ctx, _sum_grad):
        return ctx.box.pop(), None


def handed_over(forward):
    """The full pass with dy handed over (HandedOver): state is [dy, inputs], dy held by the state only."""

    def full(state):
        y = forward(state.pop())
        HandedOver.apply(y, [state.pop()]).sum().backward()

    return full


GRAPH_BACKWARD = "cudagraph"  # the difference of two graph-timed modes is graph-timed too


def graph_calls(forward, fresh, dy_template, params) -> dict:
    """{mode: () -> ms} for forward and full, each from pipelines/graph_timing.graph_ms on one set of static leaves
    (made when the mode is timed, so a failed capture leaves nothing behind for the fallback)."""

    def timed_from_graph(full: bool):
        xs = fresh()
        dy = dy_template.clone()  # Liger's norms write dX into dY: the template stays the fallback's

        def make_call():
            if not full:
                return lambda: forward(xs)
            return lambda: forward(xs).backward(dy)

        return graph_timing.graph_ms(make_call, [*xs, *params])

    return {"forward": lambda: timed_from_graph(False), "full": lambda: timed_from_graph(True)}


def choose_modes(graphs: dict, fallbacks: dict, enabled: bool) -> tuple[dict[str, float], dict[str, str]]:
    """Forward and full from their graphs where capture works, else their fallbacks; backward is full minus forward
    where both were graph-timed (a backward alone cannot be unrolled in a graph without retain_graph, which
    torch.compile's donated buffers and Liger's in-place SiLUMul refuse), else its own fallback."""
    times, methods = {}, {}
    for mode in ("forward", "full"):
        times[mode], methods[mode] = graph_timing.timed(graphs[mode], fallbacks[mode], f"bench: {mode}", (), enabled)
    graph_timed = methods["forward"] == methods["full"] == graph_timing.CUDAGRAPH
    if graph_timed and times["full"] > times["forward"]:
        times["backward"], methods["backward"] = times["full"] - times["forward"], GRAPH_BACKWARD
    else:
        times["backward"], methods["backward"] = fallbacks["backward"]()
    return {mode: times[mode] for mode in MODES}, {mode: methods[mode] for mode in MODES}


def method_text(rep: float) -> str:
    return TIMING_METHOD.format(rep=rep, floor=graph_timing.LAUNCH_FLOOR_US)


def _timed_call(setup, fn, flush: torch.Tensor | None) -> float:
    """One call: setup() untimed, then fn(state) timed (ms); CUDA events after an L2 flush where flush is given."""
    import time

    state = setup()
    if flush is None:
        started = time.perf_counter()
        fn(state)
        return (time.perf_counter() - started) * 1e3
    flush.zero_()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn(state)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


def _median(call, setup, fn, rep: float) -> float:
    import statistics

    estimate = statistics.median(call(setup, fn) for _ in range(5))  # also the warm-up
    calls = max(5, min(MAX_CALLS, int(rep / max(estimate, 1e-3))))
    return statistics.median(call(setup, fn) for _ in range(calls))


def _peak_mb(setup, fn) -> float:
    """The median of three full passes' max_memory_allocated (MB)."""
    peaks = []
    for _ in range(3):
        state = setup()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        fn(state)
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated() / 2**20)
        del state
    return sorted(peaks)[1]


def measure(
    repo: Path, name: str, hidden: int, rows: int, rep: float, copy_gbps: float, providers: tuple = PROVIDERS
) -> dict:
    dtype = torch.bfloat16
    layers, n_inputs = load_layers(repo, name, hidden, dtype), input_count(name)
    # templates: time_modes clones them into fresh leaves for every timed call
    inputs = [torch.randn(rows, hidden, device="cuda", dtype=dtype) for _ in range(n_inputs)]
    with torch.no_grad():
        outputs = layers["liger"](*inputs)
        torch.testing.assert_close(outputs, layers["torch"](*inputs), atol=1e-1, rtol=5e-2)
    n_outputs = len(outputs) if isinstance(outputs, (tuple, list)) else 1
    result = {"name": name, "rows": rows, "hidden": hidden}
    for provider in providers:
        times, methods = timed_modes(layers[provider], inputs, rep)
        result[provider] = {**times, "method": methods}  # how each mode was timed, beside its figure
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
    result["not_judged"] = not_judged(result, providers)
    result["memory_saving_vs_eager_pct"] = 100 * (1 - result["liger"]["peak_mb"] / result["torch"]["peak_mb"])
    return result


def not_judged(result: dict, providers) -> dict[str, str]:
    """{mode: why} for the modes where any provider's time is under the launch floor: shown, never a claim."""
    out = {}
    for mode in MODES:
        why = [f"{p}: {graph_timing.under_floor(result[p][mode])}" for p in providers if under(result[p][mode])]
        if why:
            out[mode] = "; ".join(why)
    return out


def under(ms: float) -> bool:
    return bool(graph_timing.under_floor(ms))


def methods_cell(result: dict) -> str:
    """The distinct timing methods of a row (e.g. 'cudagraph' or 'cudagraph / events'), '-' for rows without."""
    seen = []
    for provider in PROVIDERS:
        for method in (result.get(provider, {}).get("method") or {}).values():
            if method not in seen:
                seen.append(method)
    return " / ".join(seen) or "-"


def markdown(results: list[dict], copy_gbps: float) -> str:
    rows = [
        f"bf16; copy bandwidth {copy_gbps:.0f} GB/s; speedup = other time / liger time (medians; timing: how the "
        f"row's points were timed, cudagraph or per-call events); not judged: modes under the "
        f"{graph_timing.LAUNCH_FLOOR_US:g} us launch floor",
        "",
        "| kernel | rows x hidden | fwd vs eager | bwd vs eager | full vs eager | fwd vs compile | bwd vs compile "
        "| full vs compile | peak MB liger / eager | memory saved | fwd % copy BW | bwd % copy BW | timing "
        "| not judged |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        rows.append(
            f"| {r['name']} | {r['rows']}x{r['hidden']} | {r['speedup_forward_vs_eager']:.2f}x "
            f"| {r['speedup_backward_vs_eager']:.2f}x | {r['speedup_full_vs_eager']:.2f}x "
            f"| {r['speedup_forward_vs_compile']:.2f}x | {r['speedup_backward_vs_compile']:.2f}x "
            f"| {r['speedup_full_vs_compile']:.2f}x | {r['liger']['peak_mb']:.0f} / {r['torch']['peak_mb']:.0f} "
            f"| {r['memory_saving_vs_eager_pct']:.1f}% | {r['liger_forward_pct_copy']:.0f}% "
            f"| {r['liger_backward_pct_copy']:.0f}% | {methods_cell(r)} | {', '.join(r.get('not_judged', {})) or '-'} |"
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
    parser.add_argument("--rep", type=float, default=50, help="ms of calls each mode is timed over (at most 200 calls)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    copy_gbps = copy_bandwidth()
    results = []
    for name in args.names:
        for hidden in args.hidden:
            results.append(measure(args.repo.resolve(), name, hidden, args.rows, args.rep, copy_gbps))
            print(markdown(results[-1:], copy_gbps).splitlines()[-1], flush=True)
    (args.out / "benchmark.json").write_text(
        json.dumps({"copy_gbps": copy_gbps, "method": method_text(args.rep), "results": results}, indent=2)
    )
    (args.out / "benchmark.md").write_text(markdown(results, copy_gbps))
    plot(results, args.out / "benchmark.png")
    print(markdown(results, copy_gbps))


if __name__ == "__main__":
    main()
