# ruff: noqa: B023
"""Why a bf16 row-tile read is slower than a flat one (NOTES, fuse / pooling, run 5): one launch of each read
variant and of the pooling forward, for Nsight Compute to profile side by side.

    ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
        --section LaunchStats --kernel-name regex:'_stream|partitioned_mean_fwd' python3 benchmarks/pooling_ncu.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks import pooling_h200 as bench  # noqa: E402
from pipelines.fuse.runtime import pooling  # noqa: E402


def main():
    rows = bench.N // 64 * 64
    g = torch.Generator().manual_seed(0)
    off = bench.offsets_of(bench.lengths_for("uniform", g))
    for dtype in (torch.float32, torch.bfloat16):
        values = torch.randn(rows, bench.D, device="cuda", dtype=dtype)
        flat = values.view(-1)
        for block_rows in (16, 64):
            out = torch.empty(rows // block_rows, bench.D, device="cuda")
            bench._stream_rows_kernel[(rows // block_rows, 1)](values, out, bench.D, block_rows, 256, num_warps=4)
            if dtype == torch.bfloat16:
                grid = (rows // block_rows, 1)
                bench._stream_rows_pairs_kernel[grid](values, out, bench.D, block_rows, 256, num_warps=4)
        out = torch.empty(flat.numel() // 8192, device="cuda")
        bench._stream_flat_kernel[(flat.numel() // 8192,)](flat, out, 8192, num_warps=8)
        full = torch.randn(bench.N, bench.D, device="cuda", dtype=dtype)
        pooling.partitioned_mean_forward(full, off)
        if dtype == torch.bfloat16:
            cfg = {"R": 1024, "BLOCK_N": 32, "BLOCK_D": 256, "num_warps": 4, "num_stages": 2, "UNROLL": 2}
            pooling.partitioned_mean_forward(full, off, {**cfg, "LOOP_STAGES": 3, "PAIRS": True})
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
