# ruff: noqa: B023  (each benchmark lambda is timed within the loop iteration that defines it)
"""All GPU measurements of the fuse / pooling work in one run: correctness, kernel timings, the demo encoder.

    python3 benchmarks/pooling_h200.py --out $OUT/pooling_h200.json [--v1 .pooling_v1]

`--v1 DIR` names a folder holding the previous kernel (commit 34a3c0b's pooling.py / pooling_kernels.py, ops
renamed to liger_fuse_v1::) so old and new run on the same machine in the same call. Every section records
its error instead of stopping the run. Medians from triton.testing.do_bench (L2 cleared between runs).
See benchmarks/NOTES.md, section "fuse / pooling".
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from pipelines.fuse import recsys  # noqa: E402
from pipelines.fuse.runtime import compile as fuse_compile  # noqa: E402
from pipelines.fuse.runtime import families  # noqa: E402
from pipelines.fuse.runtime import pooling  # noqa: E402

B, N, D = 1024, 205_829, 256
V2_SWEEP = {  # (R, BLOCK_N, BLOCK_D, num_warps, num_stages); R is a runtime argument (no recompile)
    torch.float32: [(256, 16, 256, 4, 2), (1024, 16, 256, 4, 2), (512, 32, 256, 8, 2), (512, 16, 128, 4, 2),
                    (512, 8, 256, 4, 3), (512, 32, 256, 4, 2)],
    torch.bfloat16: [(256, 32, 256, 4, 2), (1024, 32, 256, 4, 2), (512, 64, 256, 8, 2), (512, 16, 256, 4, 2),
                     (512, 32, 128, 4, 2), (512, 32, 256, 8, 3)],
}  # fmt: skip


def section(report: dict, name: str, fn, *args):
    started = time.time()
    try:
        report[name] = fn(*args)
    except Exception:  # a failing section must not cost the rest of the device call
        report[name] = {"error": traceback.format_exc()[-3000:]}
    print(f"[{name}] {time.time() - started:.1f}s", json.dumps(report[name])[:2500], flush=True)


def guarded(fn):
    try:
        return fn()
    except Exception as error:  # one failing variant must not hide the others
        return {"error": repr(error)[:1500]}


def lengths_for(kind: str, g) -> torch.Tensor:
    if kind == "single":
        return torch.tensor([N])
    if kind == "uniform":
        raw = torch.rand(B, generator=g) + 0.5
    else:  # skewed: one huge partition (half the rows) among many tiny ones, some empty
        raw = torch.rand(B, generator=g) ** 4
        raw[B // 3] = raw.sum()
    lengths = (raw / raw.sum() * N).floor().long()
    lengths[-1] += N - lengths.sum()
    return lengths


def offsets_of(lengths):
    return torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]).cuda()


def rel_err(out, ref):
    return ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


def ref_mean(values, offsets):
    lengths = offsets[1:] - offsets[:-1]
    seg = torch.repeat_interleave(
        torch.arange(lengths.numel(), device=values.device), lengths, output_size=values.shape[0]
    )
    s = torch.zeros(lengths.numel(), values.shape[1], dtype=torch.float64, device=values.device)
    return s.index_add_(0, seg, values.double()) / lengths.clamp(min=1).double().unsqueeze(1)


def poison_allocator():
    """Leave NaN in the caching allocator's free blocks, so an unwritten output element shows up as NaN."""
    junk = torch.full((1 << 28,), float("nan"), device="cuda")
    del junk


def check_case(fn, lens, dtype, width=200):
    off = offsets_of(torch.tensor(lens))
    v = torch.randn(int(off[-1]), width, device="cuda", dtype=dtype, requires_grad=True)
    poison_allocator()
    out = fn(v, off)
    grad = torch.randn_like(out)
    poison_allocator()
    out.backward(grad)
    ref = ref_mean(v.detach(), off)
    lengths = (off[1:] - off[:-1]).clamp(min=1).double().unsqueeze(1)
    gref = torch.repeat_interleave(grad.double() / lengths, off[1:] - off[:-1], dim=0, output_size=v.shape[0])
    return {
        "fwd_rel": rel_err(out, ref) if ref.norm() > 0 else out.abs().sum().item(),
        "bwd_rel": rel_err(v.grad, gref) if gref.norm() > 0 else v.grad.abs().sum().item(),
        "nan": bool(out.isnan().any() or v.grad.isnan().any()),
        "dtype_kept": out.dtype == dtype,
    }


def correctness(g):
    checks = {}
    cases = {
        "empty_mixed": [3, 0, 5, 0, 1, 0],
        "all_empty": [0, 0, 0],
        "huge_among_tiny": [1] * 500 + [300_000] + [0, 2] * 300,
        "B1": [77_777],
        "uniform": lengths_for("uniform", g).tolist(),
        "skewed": lengths_for("skewed", g).tolist(),
    }
    compiled = torch.compile(lambda v, o: pooling.partitioned_mean(v, o) * 1.0, dynamic=True)
    for name, lens in cases.items():
        for dtype in (torch.float32, torch.bfloat16):
            labelled = [("eager", pooling.partitioned_mean)]
            if name in ("uniform", "skewed"):  # one B: one compile per dtype (dynamic in N)
                labelled.append(("compiled", compiled))
            for label, fn in labelled:
                try:
                    checks[f"{name}/{dtype}/{label}"] = check_case(fn, lens, dtype)
                except Exception as error:  # one failing case must not hide the others
                    checks[f"{name}/{dtype}/{label}"] = {"error": repr(error)[:500]}
    vs = [
        torch.randn(1000, 64, device="cuda"),
        torch.randn(5000, 256, device="cuda"),
        torch.randn(7, 32, device="cuda"),
    ]
    offs = [offsets_of(torch.tensor([400, 0, 600])), offsets_of(torch.full((20,), 250)), offsets_of(torch.tensor([7]))]
    outs = pooling.grouped_partitioned_mean(vs, offs)
    checks["grouped"] = {"fwd_rel": max(rel_err(o, ref_mean(v, f)) for o, v, f in zip(outs, vs, offs, strict=False))}
    return checks


def inlined_by_inductor():
    """Does Inductor launch our Triton kernels from its generated code (no Python custom-op fallback)?"""
    from torch._inductor.utils import run_and_get_code

    off = offsets_of(torch.tensor([3, 500, 0, 70]))
    v = torch.randn(int(off[-1]), 64, device="cuda", requires_grad=True)
    fn = torch.compile(lambda v, o: pooling.partitioned_mean(v, o).sum())
    _, codes = run_and_get_code(lambda: fn(v, off).backward())
    code = "\n".join(codes)
    return {
        "fwd_kernel_in_generated_code": "partitioned_mean_fwd_kernel" in code,
        "bwd_kernel_in_generated_code": "partitioned_mean_bwd_kernel" in code,
        "python_op_called": "torch.ops.liger_fuse.partitioned_mean" in code,
    }


def kernel_us(fn, calls=20):
    """Device time of the launches fn makes, from the profiler: free of host overhead, unlike do_bench's events."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    return {e.key[:60]: round(e.self_device_time_total / calls, 2) for e in events}


def bench(fn, slow=False):
    return do_bench(fn, warmup=5 if slow else 10, rep=20 if slow else 50, return_mode="median")


def bench_kernels(g, v1):
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for kind in ("uniform", "skewed", "single"):
            lengths = lengths_for(kind, g)
            off = offsets_of(lengths)
            b = len(lengths)
            v = torch.randn(N, D, device="cuda", dtype=dtype)
            es = v.element_size()
            seg_lengths = lengths.cuda()
            grad = torch.randn(b, D, device="cuda", dtype=dtype)
            counters = torch.zeros(b * 2, dtype=torch.int32, device="cuda")
            fwd = {
                "v2_default": lambda: pooling.partitioned_mean_forward(v, off),
                "v2_default_counters_reused": lambda: pooling.partitioned_mean_forward(v, off, counters=counters),
                "segment_reduce": lambda: torch.segment_reduce(v, "mean", offsets=off),
                "embedding_bag": lambda: F.embedding_bag(torch.arange(N, device="cuda"), v, off[:-1], mode="mean"),
            }
            if v1 is not None:
                fwd["v1_default"] = lambda: v1.partitioned_mean_forward(v, off)
            for r, bn, bd, w, s in V2_SWEEP[dtype]:
                cfg = {"R": r, "BLOCK_N": bn, "BLOCK_D": bd, "num_warps": w, "num_stages": s}
                fwd[f"v2_R{r}_N{bn}_D{bd}_w{w}_s{s}"] = lambda cfg=cfg: pooling.partitioned_mean_forward(v, off, cfg)
            bwd = {
                "v2_bwd_default": lambda: pooling.partitioned_mean_backward(grad, off, N),
                "repeat_interleave_bwd": lambda: torch.repeat_interleave(
                    grad / seg_lengths.clamp(min=1).unsqueeze(1).to(dtype), seg_lengths, dim=0, output_size=N
                ),
            }
            if v1 is not None:
                bwd["v1_bwd_default"] = lambda: v1.partitioned_mean_backward(grad, off, N)
            slow = {"segment_reduce", "embedding_bag"} if kind != "uniform" else set()
            res = {name: bench(fn, name in slow) for name, fn in {**fwd, **bwd}.items()}
            for name in ("v1_default", "v2_default", "v1_bwd_default", "v2_bwd_default"):
                if name in fwd or name in bwd:
                    res[f"{name}_profiled_us"] = kernel_us({**fwd, **bwd}[name])
            ref = ref_mean(v, off)
            res_err = rel_err(pooling.partitioned_mean_forward(v, off), ref)
            rows.append(
                {
                    "dtype": str(dtype),
                    "dist": kind,
                    "fwd_bytes": (N + b) * D * es,
                    "bwd_bytes": (N + b) * D * es,
                    "ms": res,
                    "v2_default_rel_err": res_err,
                }
            )
            print(kind, dtype, {k: x if isinstance(x, dict) else round(x, 4) for k, x in res.items()}, flush=True)
    return rows


def copy_bandwidth():
    x = torch.randn(1 << 28, device="cuda")
    y = torch.empty_like(x)
    ms = do_bench(lambda: y.copy_(x), warmup=25, rep=100, return_mode="median")
    return 2 * x.numel() * 4 / ms / 1e6  # GB/s


class OpaqueMean(torch.autograd.Function):
    """The v2 kernels behind opaque custom ops (launched from Python): isolates what triton_op buys."""

    @staticmethod
    def forward(ctx, values, offsets):
        ctx.save_for_backward(offsets)
        ctx.rows = values.shape[0]
        return torch.ops.liger_fuse.partitioned_mean_opaque(values, offsets)

    @staticmethod
    def backward(ctx, grad_out):
        (offsets,) = ctx.saved_tensors
        return torch.ops.liger_fuse.partitioned_mean_backward_opaque(grad_out, offsets, ctx.rows), None


def pass_step_ms(make_model, data, pool_fn):
    families.KERNEL_FUNCTIONS["triton_partitioned_mean"] = pool_fn
    torch._dynamo.reset()
    fused = fuse_compile(make_model())
    first, ms = recsys.timed_steps(fused, data, "cuda")
    stats = fused.liger_fuse_stats
    return {"ms": ms, "first_step_s": first, "graphs_compiled": stats.graphs_compiled, "replaced": stats.replaced}


def compiled_step_ms(model, data):
    torch._dynamo.reset()
    first, ms = recsys.timed_steps(torch.compile(model), data, "cuda")
    return {"ms": ms, "first_step_s": first}


def profile_steps(model, data):
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile

    recsys.timed_steps(model, data[:3], "cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for batch in data[3:8]:
            recsys.train_step(model, optimizer, batch)
        torch.cuda.synchronize()
    averages = prof.key_averages()
    events = [e for e in averages if e.device_type == torch.autograd.DeviceType.CUDA]
    events.sort(key=lambda e: -e.self_device_time_total)
    return {
        "gpu_us_per_step": sum(e.self_device_time_total for e in events) / 5,
        "cpu_self_us_per_step": sum(e.self_cpu_time_total for e in averages if e not in events) / 5,
        "kernels_per_step": sum(e.count for e in events) / 5,
        "top_kernels_us_per_step": {e.key[:90]: round(e.self_device_time_total / 5, 1) for e in events[:10]},
    }


def bench_demo(v1):
    size = recsys.DemoSize.for_device("cuda")
    data = recsys.batches(size, 101, "cuda")
    torch.manual_seed(0)
    base = recsys.NaiveEncoder(size).cuda()
    result = {}

    def fresh(cls=recsys.NaiveEncoder):
        m = cls(size).cuda()
        m.load_state_dict(base.state_dict())
        return m

    _, result["naive_eager_ms"] = recsys.timed_steps(fresh(), data[:3], "cuda")
    triton_op = families.KERNEL_FUNCTIONS["triton_partitioned_mean"]
    variants = {
        "pass_triton_op": lambda: pass_step_ms(fresh, data, triton_op),
        "SegmentReduceEncoder_compiled": lambda: compiled_step_ms(fresh(recsys.SegmentReduceEncoder), data),
        "pass_v2_opaque": lambda: pass_step_ms(fresh, data, OpaqueMean.apply),
        "IndexAddEncoder_compiled": lambda: compiled_step_ms(fresh(recsys.IndexAddEncoder), data),
    }
    if v1 is not None:
        variants["pass_v1_opaque"] = lambda: pass_step_ms(fresh, data, torch.ops.liger_fuse_v1.partitioned_mean)
    for name, run in variants.items():
        result[name] = guarded(run)
    for cls in (recsys.IndexAddEncoder, recsys.SegmentReduceEncoder):
        _, result[f"{cls.__name__}_eager_ms"] = recsys.timed_steps(fresh(cls), data[:41], "cuda")
    for name in ("pass_triton_op", "SegmentReduceEncoder_compiled"):  # again: the spread between runs
        result[f"{name}_again"] = guarded(variants[name])
    families.KERNEL_FUNCTIONS["triton_partitioned_mean"] = triton_op
    torch._dynamo.reset()
    check = fuse_compile(fresh())
    loss, grads = recsys.first_step_grads(check, data[0])
    eager_loss, eager_grads = recsys.first_step_grads(fresh(), data[0])
    result["loss_abs_diff"] = (loss - eager_loss).abs().item()
    result["grad_max_rel"] = max(rel_err(grads[k], eager_grads[k]) for k in grads)
    torch._dynamo.reset()
    result["profile_pass_triton_op"] = profile_steps(fuse_compile(fresh()), data)
    torch._dynamo.reset()
    result["profile_segment_reduce_compiled"] = profile_steps(torch.compile(fresh(recsys.SegmentReduceEncoder)), data)
    return result


def load_v1(folder: str | None):
    if not folder or not Path(folder).is_dir():
        return None
    sys.path.insert(0, str(Path(folder).resolve()))
    return importlib.import_module("pooling_v1")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="pooling_h200.json")
    parser.add_argument("--v1", default=None, help="folder with the previous kernel (pooling_v1.py)")
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    v1 = load_v1(args.v1)
    report = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "command": " ".join(sys.argv),
        "v1_loaded": v1 is not None,
    }
    t = time.time()
    for name, fn, *rest in (
        ("copy_GBps", copy_bandwidth),
        ("correctness", correctness, g),
        ("kernels", bench_kernels, g, v1),
        ("inductor_inlines_kernels", inlined_by_inductor),
        ("demo", bench_demo, v1),
    ):
        section(report, name, fn, *rest)
        Path(args.out).write_text(json.dumps(report, indent=1))  # what a timeout leaves still comes back
    report["wall_s"] = time.time() - t
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
