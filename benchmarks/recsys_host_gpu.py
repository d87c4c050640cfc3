"""The host microseconds per call of the recsys step's pooling pieces on a GPU, before / after the in-graph offsets
check, and the demo's step in each of the pass's three paths (twelfth session, s12-host). The step is host-bound
(GPU busy 0.26 ms of a 1.7 ms step), so what each call costs the host decides it. Each piece is called CALLS times
back to back with no sync inside (the host's time per call while the GPU keeps up), after a warm-up; the GPU time
per call is from CUDA events over the same loop.

The pass's paths (embedding_pool.py), chosen when a graph is traced:
  checked_op  LIGER_FUSE_CHECKS_IN_GRAPH=0: the checked custom op, offsets asserted by eager ops inside it (before)
  prechecked  the default: the check in the graph (Inductor fuses it), ops with no Python autograd kernel
  inductor    LIGER_FUSE_LAUNCH=inductor: the same, the kernels as triton_ops that Inductor launches itself

    PYTHONPATH=<site with liger_bot> python3 -m benchmarks.recsys_host_gpu [--sections host compiled steps demo]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F

from pipelines.fuse import recsys
from pipelines.fuse.runtime import embedding_pool
from pipelines.fuse.runtime import pooling

CALLS = 300
PATHS = {
    "checked_op": {"LIGER_FUSE_CHECKS_IN_GRAPH": "0", "LIGER_FUSE_LAUNCH": "op"},
    "prechecked": {"LIGER_FUSE_CHECKS_IN_GRAPH": "1", "LIGER_FUSE_LAUNCH": "op"},
    "inductor": {"LIGER_FUSE_CHECKS_IN_GRAPH": "1", "LIGER_FUSE_LAUNCH": "inductor"},
}


DEVICE = "cuda"  # --device cpu: a smoke run of the sections' code under the interpreter (small sizes, no figures)


def host_us(fn, calls: int = CALLS) -> dict:
    cuda = DEVICE == "cuda"
    calls = calls if cuda else 3
    for _ in range(20 if cuda else 1):
        fn()
    _sync()
    start_event, stop_event = (torch.cuda.Event(enable_timing=True) for _ in range(2)) if cuda else (None, None)
    if cuda:
        start_event.record()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - start) / calls * 1e6
    if not cuda:
        return {"host_us": round(host, 1)}
    stop_event.record()
    _sync()
    return {
        "host_us": round(host, 1),
        "gpu_or_host_bound_us": round(start_event.elapsed_time(stop_event) * 1e3 / calls, 1),
    }


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _inputs():
    size = recsys.DemoSize.for_device(DEVICE)
    ids, offsets, _ = recsys.batches(size, 1, DEVICE)[0]
    table = torch.randn(size.items, size.dim, device=DEVICE, requires_grad=True)
    grad_out = torch.randn(offsets.shape[0] - 1, size.dim, device=DEVICE)
    return size, table, ids, offsets, grad_out


def host_section() -> dict:
    """Each op alone, eager, grad off: the old op's pieces and the new ops'."""
    size, table, ids, offsets, grad_out = _inputs()
    rows = ids.shape[0]
    tiny = torch.ones(4, device=DEVICE)
    ops = torch.ops.liger_fuse
    pieces = {
        "empty eager op (tiny + 1)": lambda: tiny + 1,
        "F.embedding_bag mean forward": lambda: F.embedding_bag(ids, table, offsets[:-1], mode="mean"),
        "before: liger_fuse::embedding_partitioned_mean (op: checks + launch)": lambda: (
            ops.embedding_partitioned_mean(table, ids, offsets)
        ),
        "before: assert_offsets_on_device": lambda: pooling.assert_offsets_on_device(offsets, rows),
        "before: liger_fuse::embedding_partitioned_mean_backward (op)": lambda: (
            ops.embedding_partitioned_mean_backward(grad_out, ids, offsets, size.items, table.dtype)
        ),
        "embedding_mean_forward (launch alone)": lambda: embedding_pool.embedding_mean_forward(table, ids, offsets),
        "embedding_mean_backward (zeros + launch)": lambda: embedding_pool.embedding_mean_backward(
            grad_out, ids, offsets, size.items, table.dtype
        ),
        "after: liger_fuse::embedding_mean_prechecked (op: launch, no check)": lambda: (
            ops.embedding_mean_prechecked.default(table, ids, offsets)
        ),
        "after: liger_fuse::embedding_mean_prechecked_backward (op)": lambda: (
            ops.embedding_mean_prechecked_backward.default(grad_out, ids, offsets, size.items, table.dtype)
        ),
        "after, eager: offsets_checked_in_graph (in a graph: one fused Inductor kernel)": lambda: (
            embedding_pool.offsets_checked_in_graph(offsets, rows)
        ),
    }
    with torch.no_grad():
        return {name: host_us(fn) for name, fn in pieces.items()}


def _set_path(path: str) -> None:
    os.environ.update(PATHS[path])


def _embedding_then_pool(table, ids, offsets):
    return pooling.partitioned_mean_op(F.embedding(ids, table), offsets)  # the pass fuses the two


def compiled_section() -> dict:
    """The pass's pooled call alone, compiled through the pass (dynamic sizes), forward + backward: host us per call
    in each path."""
    from pipelines.fuse.runtime import compile as fuse_compile

    size, table, ids, offsets, grad_out = _inputs()
    out = {}
    for path in PATHS:
        _set_path(path)
        torch._dynamo.reset()
        pooled = fuse_compile(_embedding_then_pool, inner=_inner(), dynamic=True)

        def step(pooled=pooled):
            pooled(table, ids, offsets).backward(grad_out)

        out[path] = host_us(step, calls=100)
        with torch.no_grad():
            out[path + " (forward only, grad off)"] = host_us(lambda pooled=pooled: pooled(table, ids, offsets))
        out[path + " replaced_by"] = pooled.liger_fuse_stats.replaced_by
        out[path + " fallbacks"] = pooled.liger_fuse_stats.fallbacks
    _set_path("prechecked")
    return out


def steps_section(rounds: int = 5, steps: int = 20) -> dict:
    """The demo's step (fwd + bwd + SGD, lengths change every batch) for EmbeddingBag eager and the pass in each path,
    interleaved in rounds (the step is host-bound: the same variant timed twice has differed by 0.4 ms)."""
    from pipelines.fuse.runtime import compile as fuse_compile

    size = recsys.DemoSize.for_device(DEVICE)
    steps = steps if DEVICE == "cuda" else 2
    data = recsys.batches(size, steps + 1, DEVICE)
    torch.manual_seed(0)
    base = recsys.NaiveEncoder(size).to(DEVICE)
    bag = recsys.EmbeddingBagEncoder(size).to(DEVICE)
    bag.load_state_dict(base.state_dict())
    models = {"embedding_bag_eager": bag}
    torch._dynamo.reset()
    first = {}
    for path in PATHS:
        _set_path(path)
        models[path] = fuse_compile(copy.deepcopy(base), inner=_inner())
        first[path], _ = recsys.timed_steps(models[path], data, DEVICE)  # compiles (static, then dynamic) here
    _set_path("prechecked")
    medians = {name: [] for name in models}
    for _ in range(rounds):
        for name, model in models.items():
            medians[name].append(recsys.timed_steps(model, data, DEVICE)[1])
    stats = {path: models[path].liger_fuse_stats for path in PATHS}
    return {
        "step_ms_median_of_rounds": {name: round(statistics.median(ms), 4) for name, ms in medians.items()},
        "step_ms_per_round": {name: [round(m, 4) for m in ms] for name, ms in medians.items()},
        "first_step_s": {path: round(s, 2) for path, s in first.items()},
        "graphs_compiled": {path: s.graphs_compiled for path, s in stats.items()},
        "fallbacks": {path: s.fallbacks for path, s in stats.items()},
        "replaced_by": {path: s.replaced_by for path, s in stats.items()},
    }


def _inner() -> str:
    return "inductor" if DEVICE == "cuda" else "aot_eager"


def demo_section() -> dict:
    """`liger-bot demo recsys --device cuda --steps 10 --compile-limit 30`, in this process (the default path)."""
    from pipelines.fuse import demo

    torch._dynamo.reset()
    return demo.run(DEVICE, 10, compile_limit_s=30)


# the opt-in Inductor launch last: were its kernels to fail on the device, the CUDA context would not recover
SECTIONS = {"host": host_section, "demo": demo_section, "compiled": compiled_section, "steps": steps_section}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", nargs="+", choices=list(SECTIONS), default=list(SECTIONS))
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    gpu = torch.cuda.get_device_name() if DEVICE == "cuda" else "none (cpu smoke run)"
    result = {"torch": torch.__version__, "gpu": gpu, "calls": CALLS}
    for name in args.sections:
        start = time.perf_counter()
        try:
            result[name] = SECTIONS[name]()
        except Exception as exc:  # one section's failure must not lose the others' figures
            result[name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        result[name + "_wall_s"] = round(time.perf_counter() - start, 1)
        print(json.dumps({name: result[name]}, indent=1), flush=True)
        if args.out:  # after every section: a later one that hangs past the limit loses only its own figures
            with open(args.out, "w") as handle:
                json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
