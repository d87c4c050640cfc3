"""Diagnosis (not the shipped path): the generated DyT backward's launch against Liger's hand-written one, on a GPU.

The generated row-wise backward of an op that reduces nothing along a row splits its columns
(`BACKWARD_COL_BLOCK`, `BACKWARD_WARPS`, `BACKWARD_PROGRAMS_PER_SM` in the generated ops file). This times, backward
only, each from a CUDA graph (triton.testing.do_bench_cudagraph), at widths and token counts beyond Liger's own sweep:
- Liger's `liger_dyt_bwd` (autotuned over BLOCK_N x warps x stages, one warm-up call first);
- the generated kernel with its shipped constants ("ours");
- the previous design: one program a whole row, SM-count programs, calculate_settings' warps ("whole rows");
- on a subset of shapes, every (column block, warps, programs an SM) variant.

    python3 -m benchmarks.dyt_backward_gpu LIGER_SRC OUT_JSON   # LIGER_SRC: a checkout's src/ with ops/loo_dyt.py
"""

import argparse
import importlib
import itertools
import json
import sys
import time

TOKENS = (512, 1024, 2048, 4096, 8192, 16384)
WIDTHS = (768, 2048, 4096, 8192, 16384)
SWEEP_SHAPES = [(t, w) for t in (1024, 4096, 16384) for w in (2048, 4096, 8192)]
SWEEP = list(itertools.product((512, 1024, 2048), (4, 8), (2, 4, 8)))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("liger_src")
    parser.add_argument("out")
    parser.add_argument("--budget-s", type=float, default=150)
    args = parser.parse_args()
    sys.path.insert(0, args.liger_src)
    import torch
    from triton.testing import do_bench_cudagraph

    ops = importlib.import_module("liger_kernel.ops.loo_dyt")
    liger = importlib.import_module("liger_kernel.ops.dyt")
    from liger_kernel.ops.utils import calculate_settings

    shipped = (ops.BACKWARD_COL_BLOCK, ops.BACKWARD_WARPS, ops.BACKWARD_PROGRAMS_PER_SM)
    started = time.monotonic()
    rows = []

    def timed(fn):
        fn()
        torch.cuda.synchronize()
        return do_bench_cudagraph(fn, rep=20)

    def ours(config, inputs):
        ops.BACKWARD_COL_BLOCK, ops.BACKWARD_WARPS, ops.BACKWARD_PROGRAMS_PER_SM = config
        return timed(lambda: ops.loo_dyt_backward(*inputs, in_place=False))

    def check(inputs):
        want = liger.liger_dyt_bwd(*inputs)
        got = ops.loo_dyt_backward(*inputs, in_place=False)
        return [
            ((g.float() - w.float()).abs().max() / w.float().abs().max().clamp_min(1e-30)).item()
            for g, w in zip(got, want, strict=True)
        ]

    shapes = [(t, w, torch.bfloat16) for w in WIDTHS for t in TOKENS] + [(t, 4096, torch.float32) for t in TOKENS]
    for tokens, width, dtype in shapes:
        if time.monotonic() - started > args.budget_s:
            print(f"budget spent: stopped before {tokens}x{width}", flush=True)
            break
        torch.manual_seed(0)
        x = torch.randn(tokens, width, device="cuda", dtype=dtype)
        dy = torch.randn_like(x)
        alpha = torch.full((1,), 0.5, device="cuda", dtype=dtype)
        gamma = torch.randn(width, device="cuda", dtype=dtype)
        beta = torch.randn(width, device="cuda", dtype=dtype)
        inputs = (dy, x, alpha, gamma, beta)
        ops.BACKWARD_COL_BLOCK, ops.BACKWARD_WARPS, ops.BACKWARD_PROGRAMS_PER_SM = shipped
        row = {"tokens": tokens, "width": width, "dtype": str(dtype).removeprefix("torch."), "rel_err": check(inputs)}
        row["liger"] = timed(lambda inputs=inputs: liger.liger_dyt_bwd(*inputs))
        row["ours"] = ours(shipped, inputs)
        row["whole_rows"] = ours((1 << 30, calculate_settings(width)[1], 1), inputs)
        if (tokens, width) in SWEEP_SHAPES and dtype == torch.bfloat16:
            row["sweep"] = {f"{c}/{w}/{p}": ours((c, w, p), inputs) for c, w, p in SWEEP}
        ops.BACKWARD_COL_BLOCK, ops.BACKWARD_WARPS, ops.BACKWARD_PROGRAMS_PER_SM = shipped
        rows.append(row)
        best = min(row.get("sweep", {}).items(), key=lambda kv: kv[1], default=("-", float("nan")))
        print(
            f"{tokens:>6} x {width:>5} {row['dtype']:>8}  liger {row['liger'] * 1e3:8.2f} us  ours {row['ours'] * 1e3:8.2f}"
            f" ({row['liger'] / row['ours']:.2f}x)  whole rows {row['whole_rows'] * 1e3:8.2f}"
            f" ({row['liger'] / row['whole_rows']:.2f}x)  best variant {best[0]} {best[1] * 1e3:.2f}  err {max(row['rel_err']):.1e}",
            flush=True,
        )
        with open(args.out, "w") as f:
            json.dump({"shipped": shipped, "torch": torch.__version__, "rows": rows}, f, indent=1)
    wins = sum(r["ours"] <= r["liger"] for r in rows)
    print(f"ours at least Liger's speed in {wins} of {len(rows)} shapes", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
