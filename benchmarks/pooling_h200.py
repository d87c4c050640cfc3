# ruff: noqa: B023  (each benchmark lambda is timed within the loop iteration that defines it)
"""All GPU measurements of the fuse / pooling work in one run: correctness, kernel timings, the demo encoder.

    python benchmarks/pooling_h200.py --out $OUT/pooling_h200.json

Medians from triton.testing.do_bench. See benchmarks/NOTES.md, section "fuse / pooling".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from pipelines.fuse import recsys  # noqa: E402
from pipelines.fuse.runtime import compile as fuse_compile  # noqa: E402
from pipelines.fuse.runtime import pooling  # noqa: E402

B, N, D = 1024, 205_829, 256


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


def correctness(g):
    checks = {}
    cases = {
        "empty_mixed": [3, 0, 5, 0, 1, 0],
        "all_empty": [0, 0, 0],
        "huge_among_tiny": [1] * 500 + [300_000] + [0, 2] * 300,
        "B1": [77_777],
        "uniform": lengths_for("uniform", g).tolist(),
    }
    for name, lens in cases.items():
        for dtype in (torch.float32, torch.bfloat16):
            off = offsets_of(torch.tensor(lens))
            v = torch.randn(int(off[-1]), 200, device="cuda", dtype=dtype, requires_grad=True)
            out = pooling.partitioned_mean(v, off)
            grad = torch.randn_like(out)
            out.backward(grad)
            ref = ref_mean(v.detach(), off)
            lengths = (off[1:] - off[:-1]).clamp(min=1).double().unsqueeze(1)
            gref = torch.repeat_interleave(grad.double() / lengths, off[1:] - off[:-1], dim=0, output_size=v.shape[0])
            checks[f"{name}/{dtype}"] = {
                "fwd_rel": rel_err(out, ref) if ref.norm() > 0 else out.abs().max().item(),
                "bwd_rel": rel_err(v.grad, gref) if gref.numel() else 0.0,
                "nan": bool(out.isnan().any() or v.grad.isnan().any()),
            }
    vs = [
        torch.randn(1000, 64, device="cuda"),
        torch.randn(5000, 256, device="cuda"),
        torch.randn(7, 32, device="cuda"),
    ]
    offs = [
        offsets_of(torch.tensor([400, 0, 600])),
        offsets_of(lengths_for("uniform", g)[:20] * 0 + 250),
        offsets_of(torch.tensor([7])),
    ]
    outs = pooling.grouped_partitioned_mean(vs, offs)
    checks["grouped"] = {"fwd_rel": max(rel_err(o, ref_mean(v, f)) for o, v, f in zip(outs, vs, offs, strict=False))}
    return checks


def bench_kernels(g):
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for kind in ("uniform", "skewed", "single"):
            lengths = lengths_for(kind, g)
            off = offsets_of(lengths)
            v = torch.randn(N, D, device="cuda", dtype=dtype)
            bytes_moved = v.numel() * v.element_size() + (len(lengths) * D * v.element_size())
            seg_lengths = lengths.cuda()
            grad = torch.randn(len(lengths), D, device="cuda", dtype=dtype)
            variants = {
                "segment_reduce": lambda: torch.segment_reduce(v, "mean", offsets=off),
                "embedding_bag": lambda: F.embedding_bag(torch.arange(N, device="cuda"), v, off[:-1], mode="mean"),
                "index_add": lambda: torch.zeros(len(lengths), D, device="cuda", dtype=dtype).index_add_(
                    0, torch.repeat_interleave(torch.arange(len(lengths), device="cuda"), seg_lengths, output_size=N), v
                )
                / seg_lengths.clamp(min=1).unsqueeze(1),
                "ours_default": lambda: pooling.partitioned_mean_forward(v, off),
            }
            if kind == "uniform" and dtype == torch.float32:
                bounds = off.tolist()
                variants["naive_loop"] = lambda: torch.stack(
                    [v[bounds[i] : bounds[i + 1]].mean(0) for i in range(len(bounds) - 1)]
                )
            for r in (64, 128, 256):
                for bn, w in ((8, 2), (16, 4), (32, 4)):
                    for stages in (1, 3):
                        for bd in (128, 256):
                            cfg = {"R": r, "BLOCK_N": bn, "BLOCK_D": bd, "num_warps": w, "num_stages": stages}
                            variants[f"ours_R{r}_N{bn}_D{bd}_w{w}_s{stages}"] = (
                                lambda cfg=cfg: pooling.partitioned_mean_forward(v, off, cfg)
                            )
            res = {
                name: do_bench(fn, warmup=25, rep=100 if name != "naive_loop" else 200, return_mode="median")
                for name, fn in variants.items()
            }
            bwd = {
                "ours_bwd_default": lambda: pooling.partitioned_mean_backward(grad, off, N),
                "repeat_interleave_bwd": lambda: torch.repeat_interleave(
                    grad / seg_lengths.clamp(min=1).unsqueeze(1).to(dtype), seg_lengths, dim=0, output_size=N
                ),
            }
            for r in (64, 128, 256):
                cfg = {"R": r, "BLOCK_N": 16, "BLOCK_D": 256, "num_warps": 4}
                bwd[f"ours_bwd_R{r}"] = lambda cfg=cfg: pooling.partitioned_mean_backward(grad, off, N, cfg)
            vg = v.detach().clone().requires_grad_()
            out_sr = torch.segment_reduce(vg, "mean", offsets=off)
            bwd["segment_reduce_bwd"] = lambda: torch.autograd.grad(out_sr, vg, grad, retain_graph=True)
            out_eb = F.embedding_bag(torch.arange(N, device="cuda"), vg, off[:-1], mode="mean")
            bwd["embedding_bag_bwd"] = lambda: torch.autograd.grad(out_eb, vg, grad, retain_graph=True)
            res.update({name: do_bench(fn, warmup=25, rep=100, return_mode="median") for name, fn in bwd.items()})
            rows.append({"dtype": str(dtype), "dist": kind, "bytes": bytes_moved, "ms": res})
            best = min((x, k) for k, x in res.items() if k.startswith("ours_R"))
            print(kind, dtype, {k: round(x, 4) for k, x in res.items() if not k.startswith("ours_R")}, best, flush=True)
    return rows


def copy_bandwidth():
    x = torch.empty(1 << 28, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)
    ms = do_bench(lambda: y.copy_(x), warmup=25, rep=100, return_mode="median")
    return 2 * x.numel() * 4 / ms / 1e6  # GB/s


def bench_demo():
    size = recsys.DemoSize.for_device("cuda")
    data = recsys.batches(size, 101, "cuda")
    base = recsys.NaiveEncoder(size).cuda()
    result = {}

    def fresh(cls):
        m = cls(size).cuda()
        m.load_state_dict(base.state_dict())
        return m

    first, ms = recsys.timed_steps(fresh(recsys.NaiveEncoder), data[:4], "cuda")
    result["naive_eager_ms"] = ms
    for cls in (recsys.IndexAddEncoder, recsys.SegmentReduceEncoder):
        _, ms = recsys.timed_steps(fresh(cls), data[:21], "cuda")
        result[f"{cls.__name__}_eager_ms"] = ms
        torch._dynamo.reset()
        first, ms = recsys.timed_steps(torch.compile(fresh(cls)), data[:41], "cuda")
        result[f"{cls.__name__}_compiled_ms"] = ms
        result[f"{cls.__name__}_compile_s"] = first
    torch._dynamo.reset()
    fused = fuse_compile(fresh(recsys.NaiveEncoder))
    first, ms = recsys.timed_steps(fused, data, "cuda")
    stats = fused.liger_fuse_stats
    result.update(
        pass_ms=ms,
        pass_first_step_s=first,
        pass_graphs_compiled_100_steps=stats.graphs_compiled,
        replaced=stats.replaced,
    )
    torch._dynamo.reset()
    check = fuse_compile(fresh(recsys.NaiveEncoder))
    loss, grads = recsys.first_step_grads(check, data[0])
    eager_loss, eager_grads = recsys.first_step_grads(fresh(recsys.NaiveEncoder), data[0])
    result["loss_abs_diff"] = (loss - eager_loss).abs().item()
    grads = {k.removeprefix("_orig_mod."): g for k, g in grads.items()}
    result["grad_max_rel"] = max(rel_err(grads[k], eager_grads[k]) for k in grads)
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="pooling_h200.json")
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    report = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "command": " ".join(sys.argv),
    }
    t = time.time()
    report["copy_GBps"] = copy_bandwidth()
    report["correctness"] = correctness(g)
    print(json.dumps(report["correctness"]), flush=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    report["demo"] = bench_demo()
    print(json.dumps(report["demo"]), flush=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    report["kernels"] = bench_kernels(g)
    report["wall_s"] = time.time() - t
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
