"""Timing a pass from a CUDA graph, shared by the perf pipeline (pipelines/perf/measure.py) and the kernel pipeline's
benchmark (pipelines/kernel/bench.py): the host's launch and autograd overhead drops out of the figure, and where
capture fails the caller's own host-timed method stands in, the method recorded per point.

    graph_ms(make_call, leaves) -> median ms of one call, replayed from a graph of unrolled calls
    timed(graph, fallback, label) -> (ms, method): the graph's figure, or the fallback's where capture raised
    under_floor(ms) -> why a point carries no claim (under the launch floor), or ""
"""

from __future__ import annotations

import sys

GRAPH_REP_MS = 20  # unrolled calls per graph: about this much GPU time (do_bench_cudagraph's default)
GRAPH_REPLAYS = 10
CUDAGRAPH = "cudagraph"
# graph replays; the perf framework's do_bench; per-call CUDA events (the kernel bench); the dry run's clock
TIMING_METHODS = (CUDAGRAPH, "do_bench", "events", "wall")
HOST_TIMED = ("do_bench", "events", "wall")
# under 10 us a pass is two or three launches' latency, and 5% of it is launch jitter (benchmarks/NOTES.md, issue 12)
LAUNCH_FLOOR_US = 10.0


def graph_ms(make_call, leaves) -> float:
    """Median ms of one call, replayed from a CUDA graph of about GRAPH_REP_MS of unrolled calls. `make_call()` is
    run on the capture stream and returns the call (a backward's kernels run on its forward's stream, so whatever
    the call needs is built there); every leaf's grad is set to None before each call. Not triton's
    do_bench_cudagraph: that captures on a stream of its own, and a backward built before it then fails to capture
    (it did on the H200). Here the setup, the warm-up and the capture share one side stream."""
    import statistics

    import torch

    leaves = list(leaves)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn = make_call()
        fn()
        _clear(leaves)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            _clear(leaves)
            fn()
        end.record()
        torch.cuda.synchronize()
        repeat = max(1, min(1000, int(GRAPH_REP_MS / max(start.elapsed_time(end) / 5, 1e-3))))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(repeat):
                _clear(leaves)
                fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(GRAPH_REPLAYS):
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / repeat)
    torch.cuda.current_stream().wait_stream(stream)
    _clear(leaves)
    return statistics.median(times)


def _clear(leaves) -> None:
    for leaf in leaves:
        leaf.grad = None


def timed(graph, fallback, label: str, leaves=(), enabled: bool = True) -> tuple[float, str]:
    """(ms, method): `graph()` where capture works, else `fallback()` -> (ms, method), the failure said on stderr.
    A failed capture leaves the device synchronized and the leaves' grads None, so the fallback starts clean."""
    if enabled:
        try:
            return graph(), CUDAGRAPH
        except Exception as exc:  # not capturable (a host sync, a CPU tensor, an allocator the graph cannot hold)
            print(f"{label} not captured in a CUDA graph ({type(exc).__name__}: {exc}); host-timed", file=sys.stderr)
            _synchronize()
            _clear(leaves)
    return fallback()


def _synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def under_floor(ms: float) -> str:
    """Why a point is not judged, or "": under the launch floor a point is launch latency, not the kernel, however
    it was timed (a host-timed point over it stands, its method shown beside it)."""
    us = ms * 1e3
    return f"launch-bound, {us:.0f} us under the {LAUNCH_FLOOR_US:.0f} us floor" if us < LAUNCH_FLOOR_US else ""
