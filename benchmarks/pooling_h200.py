# ruff: noqa: B023  (each benchmark lambda is timed within the loop iteration that defines it)
"""All GPU measurements of the fuse / pooling work in one run: correctness, kernel timings, the demo encoder.

    python3 benchmarks/pooling_h200.py --out $OUT/pooling_h200.json [--v1 .pooling_v1] [--sections sweep ...]

`--v1 DIR` names a folder holding the previous kernel (commit 34a3c0b's pooling.py / pooling_kernels.py, ops
renamed to liger_fuse_v1::) so old and new run on the same machine in the same call. Every section records
its error instead of stopping the run. Medians from triton.testing.do_bench (L2 cleared between runs).
See benchmarks/NOTES.md, section "fuse / pooling".
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from pipelines.fuse import recsys  # noqa: E402
from pipelines.fuse.runtime import compile as fuse_compile  # noqa: E402
from pipelines.fuse.runtime import families  # noqa: E402
from pipelines.fuse.runtime import pooling  # noqa: E402
from pipelines.kernel import bench as kernel_bench  # noqa: E402

B, N, D = 1024, 205_829, 256
DEMO_D = 128  # the demo encoder's embedding width; its lengths are 1..400 per history
# (BLOCK_N, UNROLL, BLOCK_D, num_warps, LOOP_STAGES) for the anchor shape; R is a runtime argument (no recompile)
ANCHOR_SWEEP = [
    (bn, u, bd, w, 1) for bn in (16, 32, 64) for u in (1, 2, 4) for bd in (128, 256) for w in (4, 8) if bn * u <= 128
] + [(16, 1, 256, 4, 3), (32, 1, 256, 4, 3), (32, 1, 128, 4, 3), (64, 1, 256, 8, 3)]
DEMO_SWEEP = [
    (bn, u, bd, w, 1) for bn, u in ((16, 1), (32, 1), (16, 4), (32, 2), (32, 4), (64, 2)) for bd in (64, 128) for w in (4, 8)
]  # fmt: skip


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
    # bf16 values starting 2 bytes into an allocation cannot be read as 32-bit words: the row-tile read must run
    shifted = torch.randn(5000 * 256 + 1, device="cuda", dtype=torch.bfloat16)[1:].view(5000, 256)
    off = offsets_of(torch.full((20,), 250))
    checks["bf16_odd_storage_offset"] = {
        "fwd_rel": rel_err(pooling.partitioned_mean(shifted, off), ref_mean(shifted, off))
    }
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


def profiled_kernels(fn, calls: int, before=None) -> list:
    """The CUDA kernels of `calls` calls of fn under the profiler (device time, free of host overhead), after one
    warm-up call; `before` runs ahead of each call (an L2 flush) and its own kernels are left out."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            if before is not None:
                before()
            fn()
        torch.cuda.synchronize()
    flushes = ("FillFunctor", "reduce_kernel") if before is not None else ()
    return [
        e
        for e in prof.key_averages()
        if e.device_type == torch.autograd.DeviceType.CUDA and not any(f in e.key for f in flushes)
    ]


def kernel_us(fn, calls=20):
    """Device time per call of each kernel fn launches, calls back to back."""
    return {e.key[:60]: round(e.self_device_time_total / calls, 2) for e in profiled_kernels(fn, calls)}


def bench(fn, slow=False):
    return do_bench(fn, warmup=5 if slow else 10, rep=20 if slow else 50, return_mode="median")


def bench_kernels(g, v1):
    rows = []
    compiled_mean = torch.compile(pooling.partitioned_mean)
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
                "v2_compiled": lambda: compiled_mean(v, off),  # how a model runs it: Inductor launches the kernel
                "segment_reduce": lambda: torch.segment_reduce(v, "mean", offsets=off),
                "embedding_bag": lambda: F.embedding_bag(torch.arange(N, device="cuda"), v, off[:-1], mode="mean"),
            }
            if v1 is not None:
                fwd["v1_default"] = lambda: v1.partitioned_mean_forward(v, off)
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
            res["host_us"] = {name: kernel_bench.host_us(fwd[name], 200) for name in ("v2_default", "v2_compiled")}
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


def device_us(fn, match: str, calls: int = 10, flush: str = "dirty") -> float:
    """Device time per call of the kernels whose name holds `match`, L2 flushed before each call.

    flush "dirty" zeroes 256 MB as do_bench does: L2 is left full of dirty lines the timed kernel then writes back
    (~60 MB); "clean" reads 256 MB instead, so the timed kernel starts from a cold L2 with nothing to write back."""
    buffer = torch.ones(256 * 2**20 // 4, dtype=torch.int, device="cuda")
    clear = buffer.zero_ if flush == "dirty" else buffer.max
    kernels = profiled_kernels(fn, calls, before=clear)
    return sum(e.self_device_time_total for e in kernels if match in e.key) / calls


def demo_lengths(g) -> torch.Tensor:
    return torch.randint(1, 401, (B,), generator=g)


def sweep_case(values, off, configs, rs=(512,), flush="dirty"):
    counters = torch.zeros(off.numel() * 4, dtype=torch.int32, device="cuda")
    ref = ref_mean(values, off)
    out = {}
    for bn, u, bd, w, st, *pairs in configs:
        for r in rs:
            cfg = {
                "R": r,
                "BLOCK_N": bn,
                "BLOCK_D": bd,
                "num_warps": w,
                "num_stages": 2,
                "UNROLL": u,
                "LOOP_STAGES": st,
                "PAIRS": bool(pairs and pairs[0]),
            }
            name = f"R{r}_N{bn}_U{u}_D{bd}_w{w}_s{st}" + ("_pairs" if cfg["PAIRS"] else "")
            try:
                out[name] = device_us(
                    lambda cfg=cfg: pooling.partitioned_mean_forward(values, off, cfg, counters=counters),
                    "partitioned_mean_fwd_kernel",
                    flush=flush,
                )
                err = rel_err(pooling.partitioned_mean_forward(values, off, cfg, counters=counters), ref)
                if err > (1e-5 if values.dtype == torch.float32 else 4e-3):  # a fast wrong config is no candidate
                    out[name] = f"wrong: rel. error {err:.2e}"
            except Exception as error:  # one bad config (out of resources) must not stop the sweep
                out[name] = repr(error)[:200]
    return out


def sweep(g):
    """Forward kernel time per launch config: the anchor shape (3 length distributions x 2 dtypes) and the demo's."""
    result = {"anchor": {}, "demo": {}}
    for dtype in (torch.float32, torch.bfloat16):
        for kind in ("uniform", "skewed", "single"):
            off = offsets_of(lengths_for(kind, g))
            values = torch.randn(N, D, device="cuda", dtype=dtype)
            result["anchor"][f"{kind}/{dtype}"] = sweep_case(values, off, ANCHOR_SWEEP)
            print("sweep", kind, dtype, flush=True)
    off = offsets_of(demo_lengths(g))
    values = torch.randn(int(off[-1]), DEMO_D, device="cuda")
    result["demo"]["fp32"] = sweep_case(values, off, DEMO_SWEEP, rs=(128, 256, 512))
    result["best"] = best_configs(result)
    return result


# (BLOCK_N, UNROLL, BLOCK_D, num_warps, LOOP_STAGES[, PAIRS]) per dtype: the run-4 defaults and bf16 read as 32-bit
# words (PAIRS; BLOCK_D counts bf16 columns, so 256 is a [BLOCK_N, 128] word tile like fp32's default)
SPLIT_SWEEP = {
    torch.bfloat16: [(32, 1, 128, 4, 3), (32, 1, 256, 4, 3, 1), (16, 2, 256, 4, 3, 1), (32, 2, 256, 4, 3, 1)],
    torch.float32: [(32, 4, 128, 4, 1), (16, 2, 128, 4, 3)],
}  # fmt: skip


def split_sweep(g):
    """Run 5 (ncu): a bf16 row-tile read stalls on shared-memory traffic (MIO queue) where bf16 read as 32-bit words
    (PAIRS) does not, and the forward is occupancy-bound (25-31%, registers / pipeline buffers): smaller tiles,
    more warps, and the loop pipelined through shared memory instead of registers."""
    result = {}
    for dtype, configs in SPLIT_SWEEP.items():
        for kind in ("uniform", "skewed", "single"):
            off = offsets_of(lengths_for(kind, g))
            values = torch.randn(N, D, device="cuda", dtype=dtype)
            for flush in ("clean", "dirty"):  # dirty: do_bench's flush, whose write-back the timed kernel pays
                result[f"{flush}/{kind}/{dtype}"] = sweep_case(values, off, configs, (512, 1024, 2048), flush)
            print("split_sweep", kind, dtype, flush=True)
    result["best"] = {}
    for flush, dtype in itertools.product(("clean", "dirty"), SPLIT_SWEEP):
        keys = [k for k in result if k.startswith(flush) and k.endswith(str(dtype))]
        name = fastest([result[k] for k in keys])
        result["best"][f"{flush}/{dtype}"] = {"config": name, **{k: result[k][name] for k in keys}}
    result["resources"] = compiled_resources(pooling._kernels().partitioned_mean_fwd_kernel)
    return result


def compiled_resources(jit_fn) -> list:
    """Registers, spills and shared memory of every compiled variant of a kernel: what limits programs per SM."""
    out = []
    for cache in jit_fn.device_caches.values():
        for kernel in cache[0].values():
            constants = getattr(kernel.src, "constants", {})
            names = {jit_fn.arg_names[k[0]] if isinstance(k, tuple) else k: v for k, v in constants.items()}
            out.append(
                {
                    **{k: v for k, v in names.items() if k.isupper() and isinstance(v, int | bool)},
                    "num_warps": kernel.metadata.num_warps,
                    "n_regs": kernel.n_regs,
                    "n_spills": kernel.n_spills,
                    "shared": kernel.metadata.shared,
                }
            )
    return out


def fastest(cases: list[dict]) -> str:
    """The config with the least time summed over the cases (each {config: us}); configs that failed in any are out."""
    names = [n for n in cases[0] if all(isinstance(c[n], float) for c in cases)]
    return min(names, key=lambda n: sum(c[n] for c in cases))


def best_configs(result) -> dict:
    """Per dtype: the config with the least summed time over the three anchor distributions; the demo's best."""
    best = {}
    for dtype in ("torch.float32", "torch.bfloat16"):
        keys = [k for k in result["anchor"] if k.endswith(dtype)]
        name = fastest([result["anchor"][k] for k in keys])
        best[dtype] = {"config": name, **{k.split("/")[0]: result["anchor"][k][name] for k in keys}}
    demo = result["demo"]["fp32"]
    name = fastest([demo])
    best["demo_fp32"] = {"config": name, "us": demo[name]}
    return best


def demo_interleaved(rounds: int = 5, steps: int = 20):
    """Step time of the pass and the hand-vectorised compiled encoders, timed in alternating rounds: the host noise
    that made two runs of one variant differ by 0.4 ms hits every variant alike."""
    size = recsys.DemoSize.for_device("cuda")
    data = recsys.batches(size, steps + 1, "cuda")
    torch.manual_seed(0)
    base = recsys.NaiveEncoder(size).cuda()

    def fresh(cls=recsys.NaiveEncoder):
        m = cls(size).cuda()
        m.load_state_dict(base.state_dict())
        return m

    torch._dynamo.reset()
    models = {
        "pass_triton_op": fuse_compile(fresh()),
        "SegmentReduceEncoder_compiled": torch.compile(fresh(recsys.SegmentReduceEncoder)),
        "IndexAddEncoder_compiled": torch.compile(fresh(recsys.IndexAddEncoder)),
    }
    first = {name: recsys.timed_steps(model, data[:3], "cuda")[0] for name, model in models.items()}
    per_round = {name: [] for name in models}
    for _ in range(rounds):
        for name, model in models.items():
            per_round[name].append(recsys.timed_steps(model, data, "cuda")[1])
    stats = models["pass_triton_op"].liger_fuse_stats
    profiles = {name: profile_steps(models[name], data) for name in ("pass_triton_op", "SegmentReduceEncoder_compiled")}
    return {
        "gpu_profile": profiles,
        "rounds_ms": per_round,
        "median_of_rounds_ms": {n: sorted(v)[len(v) // 2] for n, v in per_round.items()},
        "first_step_s": first,
        "pass_graphs_compiled": stats.graphs_compiled,
    }


@triton.jit
def _stream_rows_kernel(values_ptr, out_ptr, D, ROWS: tl.constexpr, BLOCK_D: tl.constexpr):
    """The floor for reading [N, D]: program i sums rows [i*ROWS, (i+1)*ROWS) (N divisible), no partitions."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    tile = tl.load(values_ptr + rows[:, None] * D + cols[None, :]).to(tl.float32)
    tl.store(out_ptr + tl.program_id(0).to(tl.int64) * D + cols, tl.sum(tile, axis=0))


@triton.jit
def _stream_rows_flat_kernel(values_ptr, out_ptr, ROWS: tl.constexpr, D: tl.constexpr):
    """The same sums as _stream_rows_kernel, read as one flat 1-D stream of ROWS * D values and folded at the end."""
    flat = tl.program_id(0).to(tl.int64) * ROWS * D + tl.arange(0, ROWS * D)
    tile = tl.reshape(tl.load(values_ptr + flat).to(tl.float32), (ROWS, D))
    tl.store(out_ptr + tl.program_id(0).to(tl.int64) * D + tl.arange(0, D), tl.sum(tile, axis=0))


@triton.jit
def _stream_rows_pairs_kernel(values_ptr, out_ptr, D, ROWS: tl.constexpr, BLOCK_D: tl.constexpr):
    """_stream_rows_kernel for bf16 read as 32-bit words (two columns each)."""
    words_ptr = values_ptr.to(tl.pointer_type(tl.int32))
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    words = tl.program_id(1) * (BLOCK_D // 2) + tl.arange(0, BLOCK_D // 2)
    tile = tl.load(words_ptr + rows[:, None] * (D // 2) + words[None, :])
    lo = tl.sum((tile << 16).to(tl.float32, bitcast=True), axis=0)
    hi = tl.sum((tile & -65536).to(tl.float32, bitcast=True), axis=0)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    tl.store(out_ptr + tl.program_id(0).to(tl.int64) * D + cols, tl.interleave(lo, hi))


def read_floor():
    """What reading the anchor's values costs without any partition logic: copy, a streaming Triton read, sum(0)."""
    result = {}
    rows = N // 64 * 64
    for dtype in (torch.float32, torch.bfloat16):
        values = torch.randn(rows, D, device="cuda", dtype=dtype)
        copy = torch.empty_like(values)
        res = {"bytes_read": values.numel() * values.element_size()}
        res["copy_us"] = device_us(lambda: copy.copy_(values), "")  # "": every kernel but the L2 flush
        for block_rows, block_d, warps in ((64, 256, 4), (64, 128, 4), (32, 256, 4), (128, 128, 8), (16, 256, 4)):
            out = torch.empty(rows // block_rows, D, device="cuda")
            grid = (rows // block_rows, D // block_d)
            res[f"stream_R{block_rows}_D{block_d}_w{warps}_us"] = device_us(
                lambda: _stream_rows_kernel[grid](values, out, D, block_rows, block_d, num_warps=warps), "_stream_rows"
            )
        for block_rows, warps in ((16, 4), (32, 4), (32, 8), (64, 8)):
            out = torch.empty(rows // block_rows, D, device="cuda")
            res[f"stream_flat_R{block_rows}_w{warps}_us"] = device_us(
                lambda: _stream_rows_flat_kernel[(rows // block_rows,)](values, out, block_rows, D, num_warps=warps),
                "_stream_rows_flat",
            )
        pairs_shapes = ((16, 256, 4), (32, 256, 4), (64, 256, 4), (64, 256, 8)) if dtype == torch.bfloat16 else ()
        for block_rows, block_d, warps in pairs_shapes:
            out = torch.empty(rows // block_rows, D, device="cuda")
            grid = (rows // block_rows, D // block_d)
            res[f"stream_pairs_R{block_rows}_D{block_d}_w{warps}_us"] = device_us(
                lambda: _stream_rows_pairs_kernel[grid](values, out, D, block_rows, block_d, num_warps=warps),
                "_stream_rows_pairs",
            )
        for name, fn in (("rows", _stream_rows_kernel), ("flat", _stream_rows_flat_kernel)):
            res[f"resources_{name}"] = compiled_resources(fn)
        result[str(dtype)] = res
    return result


def clean_l2():
    """The anchor forward (defaults), a streaming read and a copy of the same values, timed after a read-only flush."""
    result = {}
    rows = N // 64 * 64
    g = torch.Generator().manual_seed(1)
    for dtype in (torch.float32, torch.bfloat16):
        values = torch.randn(rows, D, device="cuda", dtype=dtype)
        copy = torch.empty_like(values)
        out = torch.empty(rows // 64, D, device="cuda")
        res = {}
        for flush in ("dirty", "clean"):
            res[f"copy_us_{flush}"] = device_us(lambda: copy.copy_(values), "", flush=flush)
            res[f"stream_us_{flush}"] = device_us(
                lambda: _stream_rows_kernel[(rows // 64, 2)](values, out, D, 64, 128, num_warps=4),
                "_stream",
                flush=flush,
            )
            for kind in ("uniform", "skewed", "single"):
                off = offsets_of(lengths_for(kind, g))
                off = off.clamp(max=rows)
                counters = torch.zeros(off.numel() * 4, dtype=torch.int32, device="cuda")
                res[f"pool_{kind}_us_{flush}"] = device_us(
                    lambda: pooling.partitioned_mean_forward(values, off, counters=counters), "fwd_kernel", flush=flush
                )
        result[str(dtype)] = res
    return result


@triton.jit
def _stream_flat_kernel(values_ptr, out_ptr, BLOCK: tl.constexpr):
    """The purest read: program i sums elements [i*BLOCK, (i+1)*BLOCK) of a flat buffer (size divisible)."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + tl.program_id(0), tl.sum(tl.load(values_ptr + offsets).to(tl.float32), axis=0))


def read_sizes():
    """Time to read n bytes (flat streaming read) and to copy them, fp32 and bf16, 26 MB .. 844 MB, dirty and clean
    L2: a fixed cost shows up as the intercept of time over bytes, the bandwidth as its slope."""
    result = {}
    block = 8192
    for dtype in (torch.float32, torch.bfloat16):
        rows = []
        for mb in (26, 53, 105, 211, 422, 844):
            n = mb * 2**20 // torch.tensor([], dtype=dtype).element_size() // block * block
            values = torch.randn(n, device="cuda", dtype=dtype)
            copy = torch.empty_like(values)
            out = torch.empty(n // block, device="cuda")
            row = {"bytes": n * values.element_size()}
            for flush in ("dirty", "clean"):
                row[f"read_us_{flush}"] = device_us(
                    lambda: _stream_flat_kernel[(n // block,)](values, out, block, num_warps=8), "_stream", flush=flush
                )
                row[f"copy_us_{flush}"] = device_us(lambda: copy.copy_(values), "", flush=flush)
            rows.append(row)
        result[str(dtype)] = rows
    return result


def backward_sweep(g):
    result = {}
    for dtype in (torch.float32, torch.bfloat16):
        for kind in ("uniform", "skewed", "single"):
            off = offsets_of(lengths_for(kind, g))
            grad = torch.randn(off.numel() - 1, D, device="cuda", dtype=dtype)
            row = {}
            for (bn, bd, w), r in itertools.product(((32, 256, 4), (16, 256, 4), (64, 256, 8)), (128, 256, 512, 1024)):
                cfg = {"R": r, "BLOCK_N": bn, "BLOCK_D": bd, "num_warps": w, "num_stages": 2}
                row[f"R{r}_N{bn}_D{bd}_w{w}"] = device_us(
                    lambda cfg=cfg: pooling.partitioned_mean_backward(grad, off, N, cfg), "partitioned_mean_bwd_kernel"
                )
            result[f"{kind}/{dtype}"] = row
    return result


class OpaqueMean(torch.autograd.Function):
    """The kernels behind the opaque custom ops (launched from Python); since s10-pool-wire the pass's own ops are opaque
    too, so this equals the pass's path."""

    @staticmethod
    def forward(ctx, values, offsets):
        ctx.save_for_backward(offsets)
        ctx.rows = values.shape[0]
        return torch.ops.liger_fuse.partitioned_mean(values, offsets)

    @staticmethod
    def backward(ctx, grad_out):
        (offsets,) = ctx.saved_tensors
        return torch.ops.liger_fuse.partitioned_mean_backward(grad_out, offsets, ctx.rows), None


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
    parser.add_argument("--sections", nargs="*", help="run only these sections (default: all)")
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
    sections = (
        ("copy_GBps", kernel_bench.copy_bandwidth),
        ("correctness", correctness, g),
        ("sweep", sweep, g),
        ("split_sweep", split_sweep, g),
        ("backward_sweep", backward_sweep, g),
        ("read_floor", read_floor),
        ("clean_l2", clean_l2),
        ("read_sizes", read_sizes),
        ("kernels", bench_kernels, g, v1),
        ("inductor_inlines_kernels", inlined_by_inductor),
        ("demo", bench_demo, v1),
        ("demo_interleaved", demo_interleaved),
    )
    for name, fn, *rest in sections:
        if args.sections and name not in args.sections:
            continue
        section(report, name, fn, *rest)
        Path(args.out).write_text(json.dumps(report, indent=1))  # what a timeout leaves still comes back
    report["wall_s"] = time.time() - t
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
