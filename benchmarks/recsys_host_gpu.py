"""Diagnosis (not a shipped path): the host microseconds per call of the recsys step's pooling pieces on a GPU, at
the CUDA demo's size. The demo's step is host-bound (GPU busy 0.26 ms of a 1.7 ms step, twelfth session), so what
each call costs the host decides it. Each piece is called CALLS times back to back with no sync inside (the host's
time per call while the GPU keeps up), after a warm-up; the GPU time per call is from CUDA events over the same loop.

    PYTHONPATH=<site with liger_bot> python3 -m benchmarks.recsys_host_gpu
"""

from __future__ import annotations

import json
import time

import torch
import torch.nn.functional as F

from pipelines.fuse import recsys
from pipelines.fuse.runtime import embedding_pool
from pipelines.fuse.runtime import pooling

CALLS = 300


def host_us(fn) -> dict:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start_event, stop_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start_event.record()
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    host = (time.perf_counter() - start) / CALLS * 1e6
    stop_event.record()
    torch.cuda.synchronize()
    return {
        "host_us": round(host, 1),
        "gpu_or_host_bound_us": round(start_event.elapsed_time(stop_event) * 1e3 / CALLS, 1),
    }


def main() -> None:
    size = recsys.DemoSize.for_device("cuda")
    ids, offsets, _ = recsys.batches(size, 1, "cuda")[0]
    table = torch.randn(size.items, size.dim, device="cuda", requires_grad=True)
    rows = ids.shape[0]
    grad_out = torch.randn(offsets.shape[0] - 1, size.dim, device="cuda")
    tiny = torch.ones(4, device="cuda")
    pieces = {
        "empty eager op (tiny + 1)": lambda: tiny + 1,
        "F.embedding_bag mean forward": lambda: F.embedding_bag(ids, table, offsets[:-1], mode="mean"),
        "liger_fuse::embedding_partitioned_mean (op: checks + launch)": lambda: (
            torch.ops.liger_fuse.embedding_partitioned_mean(table, ids, offsets)
        ),
        "embedding_mean_forward (launch alone)": lambda: embedding_pool.embedding_mean_forward(table, ids, offsets),
        "launch_config": lambda: embedding_pool.launch_config(
            offsets.shape[0] - 1, rows, size.dim, table.dtype, table.device
        ),
        "assert_offsets_on_device": lambda: pooling.assert_offsets_on_device(offsets, rows),
        "_check_types": lambda: embedding_pool._check_types(table, ids, offsets),
        "liger_fuse::embedding_partitioned_mean_backward (op)": lambda: (
            torch.ops.liger_fuse.embedding_partitioned_mean_backward(grad_out, ids, offsets, size.items, table.dtype)
        ),
        "embedding_mean_backward (zeros + launch)": lambda: embedding_pool.embedding_mean_backward(
            grad_out, ids, offsets, size.items, table.dtype
        ),
        "torch.zeros of the table's gradient": lambda: torch.zeros(size.items, size.dim, device="cuda"),
    }
    with torch.no_grad():
        result = {name: host_us(fn) for name, fn in pieces.items()}
    print(
        json.dumps(
            {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "calls": CALLS, **result}, indent=1
        )
    )


if __name__ == "__main__":
    main()
