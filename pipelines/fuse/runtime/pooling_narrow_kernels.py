"""Triton kernel for the partitioned mean's forward on narrow rows at short mean lengths: values [N, D], offsets [B+1]
-> out [B, D].

The short design (pooling_short_kernels.py) loads row j of each of its PARTS partitions per step, up to the block's
longest partition: at lengths spread over [0, 2L] about half the row slots it issues are masked off, and at D 16 its
[PARTS, BLOCK_D] tile of 64 values is spread over 128 threads (each value loaded twice). torch.segment_reduce's CUDA
kernel gives each (segment, column) pair a thread that walks the segment's own rows, so a warp waits only for its
own two segments (D 16), never for a block's longest.

A Triton program has one trip count, so here a lane (one column of one lane row) walks a contiguous run of K
consecutive partitions instead of one: their rows [offsets[b], offsets[b + K]) are one span in memory, read row by
row in order, UNROLL rows a step, with no gaps. The program holds LANES such lane rows x BLOCK_D columns (about 512
lanes, 16 bytes a thread: each value loaded once, as one 16-byte load with its row's other columns) and loops to the
longest run; a run is the sum of K lengths, so the runs of one program are closer to each other than single lengths
are (at L 16, 32 runs of 4 in steps of 8 rows: about 61% of the row slots used, against the short design's 52%, on
the grid's lengths). Each row is added, in fp32, into the accumulator of the partition holding it (K accumulators a
lane: acc_k += row where start_k <= row < end_k, a select and an add, nothing stored inside the loop so the loads of a
step stay independent); the K means are stored once at the end, in the output dtype (acc / max(len, 1): an empty
partition gives zeros, the same values as the short design's). Rows outside [offsets[0], offsets[B]) are never read.
Offsets may be int32 or int64 (read as int64). K is 1, 2 or 4. Runs under TRITON_INTERPRET=1 on CPU tensors.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _bounds(offsets_ptr, first, lo, B, k: tl.constexpr):
    """Rows [start, end) of partition first + k of each lane row, relative to the run's first row (past B: empty)."""
    start = tl.load(offsets_ptr + tl.minimum(first + k, B)).to(tl.int64) - lo
    end = tl.load(offsets_ptr + tl.minimum(first + k + 1, B)).to(tl.int64) - lo
    return start, end


@triton.jit
def _take(acc, x, rel, start, end):
    """acc plus the row where it belongs to this partition (adding 0.0 elsewhere leaves acc exactly as it was)."""
    inside = (rel >= start) & (rel < end)
    return acc + tl.where(inside[:, None], x, 0.0)


@triton.jit
def _store_mean(out_ptr, acc, part, start, end, B, D, cols, col_mask):
    mean = acc / tl.maximum(end - start, 1).to(tl.float32)[:, None]
    mask = (part < B)[:, None] & col_mask[None, :]
    tl.store(out_ptr + part[:, None] * D + cols[None, :], mean.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["B"])  # one compile per launch, whatever B's divisibility
def narrow_mean_fwd_kernel(
    values_ptr,
    offsets_ptr,
    out_ptr,
    B,
    D,
    LANES: tl.constexpr,
    K: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UNROLL: tl.constexpr,
):
    first = (tl.program_id(0).to(tl.int64) * LANES + tl.arange(0, LANES)) * K  # each lane row's first partition
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < D
    lo = tl.load(offsets_ptr + tl.minimum(first, B)).to(tl.int64)
    total = tl.load(offsets_ptr + tl.minimum(first + K, B)).to(tl.int64) - lo  # rows of the run
    s0, e0 = _bounds(offsets_ptr, first, lo, B, 0)
    acc0 = tl.zeros((LANES, BLOCK_D), dtype=tl.float32)
    acc1 = acc0
    acc2 = acc0
    acc3 = acc0
    if K >= 2:
        s1, e1 = _bounds(offsets_ptr, first, lo, B, 1)
    if K >= 4:
        s2, e2 = _bounds(offsets_ptr, first, lo, B, 2)
        s3, e3 = _bounds(offsets_ptr, first, lo, B, 3)
    for r in range(0, tl.max(total, axis=0), UNROLL):
        for u in tl.static_range(UNROLL):
            rel = r + u
            mask = (rel < total)[:, None] & col_mask[None, :]
            x = tl.load(values_ptr + (lo + rel)[:, None] * D + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            if K == 1:
                acc0 += x  # the run is the partition
            else:
                acc0 = _take(acc0, x, rel, s0, e0)
                acc1 = _take(acc1, x, rel, s1, e1)
                if K >= 4:
                    acc2 = _take(acc2, x, rel, s2, e2)
                    acc3 = _take(acc3, x, rel, s3, e3)
    _store_mean(out_ptr, acc0, first, s0, e0, B, D, cols, col_mask)
    if K >= 2:
        _store_mean(out_ptr, acc1, first + 1, s1, e1, B, D, cols, col_mask)
    if K >= 4:
        _store_mean(out_ptr, acc2, first + 2, s2, e2, B, D, cols, col_mask)
        _store_mean(out_ptr, acc3, first + 3, s3, e3, B, D, cols, col_mask)


__all__ = ["narrow_mean_fwd_kernel", "triton"]
