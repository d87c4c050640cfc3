"""Triton kernels for batched partitioned mean pooling: values [N, D], offsets [B+1] -> out [B, D].

One launch, grid `(B + N // R, cdiv(D, BLOCK_D))`, known from shapes alone (no host sync on offsets, so the op
stays traceable by torch.compile). Partition b is cut into `tiles(b) = cdiv(len, R)` tiles of R rows counted
from its own start:

* program p < B is the *head*: tile 0 of partition p, found without any search. A partition of at most R rows
  (every partition of the usual short-history batch) is reduced by its head alone, which writes the mean once,
  in the output dtype: no atomics, no zero-filled output, no cast afterwards.
* program p >= B takes the R-row boundary j = p - B + 1 (row `base + j * R`). It lies in (start, end] of
  exactly one partition, found by binary search; that partition runs its extra tile k = j - (start-base)//R
  there if it has one (a partition holds at least `tiles - 1` such boundaries), else the program is idle.

A partition longer than R (one huge partition among tiny ones, B = 1) is thus spread over many programs; each
writes its fp32 partial sum to its own workspace row and counts itself in on a per-(partition, D-block)
counter; the last to arrive sums the partials, writes the mean and puts the counter back to zero. Accumulation
is fp32 for every input dtype. Backward uses the same tiles and writes each row of grad_values once. Kernels
run under TRITON_INTERPRET=1 on CPU tensors.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _partition_holding(offsets_ptr, B, row, LOG_B: tl.constexpr):
    """The smallest b in [0, B) with offsets[b + 1] >= row: the partition whose rows (start, end] hold `row`."""
    lo = tl.zeros((), dtype=tl.int64)
    hi = tl.zeros((), dtype=tl.int64) + B - 1
    for _ in tl.static_range(LOG_B):
        mid = (lo + hi) // 2
        reaches = tl.load(offsets_ptr + mid + 1).to(tl.int64) >= row
        hi = tl.where(reaches, mid, hi)
        lo = tl.where(reaches, lo, mid + 1)
    return lo


@triton.jit
def _tile(offsets_ptr, B, p, R, LOG_B: tl.constexpr):
    """(b, start, end, k, tiles, first_boundary) for program p; k >= tiles means the program has no work."""
    base = tl.load(offsets_ptr).to(tl.int64)
    if p < B:
        b = p
    else:
        b = _partition_holding(offsets_ptr, B, base + (p - B + 1) * R, LOG_B)
    start = tl.load(offsets_ptr + b).to(tl.int64)
    end = tl.load(offsets_ptr + b + 1).to(tl.int64)
    tiles = tl.maximum(tl.cdiv(end - start, R), 1)
    first_boundary = (start - base) // R + 1
    k = tl.where(p < B, 0, p - B + 1 - first_boundary + 1)
    # a boundary past the last row belongs to no partition
    k = tl.where((p >= B) & (base + (p - B + 1) * R > tl.load(offsets_ptr + B).to(tl.int64)), tiles, k)
    return b, start, end, k, tiles, first_boundary


@triton.jit
def _pool_tile(
    values_ptr,
    offsets_ptr,
    out_ptr,
    ws_ptr,
    ws_stride,
    counters_ptr,
    counters_stride,
    B,
    D,
    p,
    pid_d,
    R,
    LOG_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UNROLL: tl.constexpr,
    LOOP_STAGES: tl.constexpr,
    PAIRS: tl.constexpr,
):
    b, start, end, k, tiles, first_boundary = _tile(offsets_ptr, B, p, R, LOG_B)
    if k < tiles:
        cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
        col_mask = cols < D
        lo = start + k * R
        hi = tl.minimum(end, lo + R)
        rows0 = tl.arange(0, BLOCK_N)
        if PAIRS:
            # bf16 read as 32-bit words, each holding columns 2j (low half) and 2j+1 (high half): the loads and the
            # accumulators get fp32's layout, which streams at the read floor where a bf16 row tile does not
            words_ptr = values_ptr.to(tl.pointer_type(tl.int32))
            word_cols = pid_d * (BLOCK_D // 2) + tl.arange(0, BLOCK_D // 2)
            word_mask = word_cols < D // 2
            acc_lo = tl.zeros((BLOCK_N, BLOCK_D // 2), dtype=tl.float32)
            acc_hi = tl.zeros((BLOCK_N, BLOCK_D // 2), dtype=tl.float32)
            for r in tl.range(lo, hi, BLOCK_N * UNROLL, num_stages=LOOP_STAGES):
                for u in tl.static_range(UNROLL):
                    rows = r + u * BLOCK_N + rows0
                    mask = (rows < hi)[:, None] & word_mask[None, :]
                    words = tl.load(words_ptr + rows[:, None] * (D // 2) + word_cols[None, :], mask=mask, other=0)
                    acc_lo += (words << 16).to(tl.float32, bitcast=True)
                    acc_hi += (words & -65536).to(tl.float32, bitcast=True)
            total = tl.interleave(tl.sum(acc_lo, axis=0), tl.sum(acc_hi, axis=0))
        else:
            acc = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
            # UNROLL independent tile loads per step keep more bytes in flight per program: a short partition is
            # otherwise a chain of load-latency waits (bf16 moves half the bytes per tile of fp32)
            for r in tl.range(lo, hi, BLOCK_N * UNROLL, num_stages=LOOP_STAGES):
                for u in tl.static_range(UNROLL):
                    rows = r + u * BLOCK_N + rows0
                    mask = (rows < hi)[:, None] & col_mask[None, :]
                    acc += tl.load(values_ptr + rows[:, None] * D + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            total = tl.sum(acc, axis=0)
        count = tl.maximum(end - start, 1).to(tl.float32)
        out_ty = out_ptr.dtype.element_ty
        if tiles == 1:
            tl.store(out_ptr + b * D + cols, (total / count).to(out_ty), mask=col_mask)
        else:
            tl.store(ws_ptr + p * ws_stride + cols, total, mask=col_mask)
            tl.debug_barrier()  # every thread's partial is written before the counter says so
            counter = counters_ptr + b * counters_stride + pid_d
            if tl.atomic_add(counter, 1, sem="acq_rel") == tiles - 1:
                # the last tile in: the head's row is b, the extras' rows are B + first_boundary - 1 onwards
                extra0 = B + first_boundary - 1
                partial = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
                for s in range(0, tiles - 1, BLOCK_N):
                    slots = s + rows0
                    mask = (slots < tiles - 1)[:, None] & col_mask[None, :]
                    ptrs = ws_ptr + (extra0 + slots)[:, None] * ws_stride + cols[None, :]
                    partial += tl.load(ptrs, mask=mask, other=0.0, cache_modifier=".cg")
                head = tl.load(ws_ptr + b * ws_stride + cols, mask=col_mask, other=0.0, cache_modifier=".cg")
                mean = (tl.sum(partial, axis=0) + head) / count
                tl.store(out_ptr + b * D + cols, mean.to(out_ty), mask=col_mask)
                tl.atomic_xchg(counter, 0)  # zero again for the next launch


@triton.jit
def _pool_grad_tile(
    grad_out_ptr,
    offsets_ptr,
    grad_values_ptr,
    B,
    N,
    D,
    p,
    pid_d,
    R,
    LOG_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    b, start, end, k, tiles, first_boundary = _tile(offsets_ptr, B, p, R, LOG_B)
    if k < tiles:
        cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
        col_mask = cols < D
        rows0 = tl.arange(0, BLOCK_N)
        lo = start + k * R
        hi = tl.minimum(end, lo + R)
        scale = 1.0 / tl.maximum(end - start, 1).to(tl.float32)
        g = tl.load(grad_out_ptr + b * D + cols, mask=col_mask, other=0.0).to(tl.float32) * scale
        tile = (tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32) + g[None, :]).to(grad_values_ptr.dtype.element_ty)
        for r in range(lo, hi, BLOCK_N):
            rows = r + rows0
            mask = (rows < hi)[:, None] & col_mask[None, :]
            tl.store(grad_values_ptr + rows[:, None] * D + cols[None, :], tile, mask=mask)
        # rows outside [offsets[0], offsets[B]) belong to no partition: their gradient is zero
        zero = tl.zeros((BLOCK_N, BLOCK_D), dtype=grad_values_ptr.dtype.element_ty)
        if p == 0:
            for r in range(0, start, BLOCK_N):
                rows = r + rows0
                mask = (rows < start)[:, None] & col_mask[None, :]
                tl.store(grad_values_ptr + rows[:, None] * D + cols[None, :], zero, mask=mask)
        if p == B - 1:
            for r in range(end, N, BLOCK_N):
                rows = r + rows0
                mask = (rows < N)[:, None] & col_mask[None, :]
                tl.store(grad_values_ptr + rows[:, None] * D + cols[None, :], zero, mask=mask)


@triton.jit
def partitioned_mean_fwd_kernel(
    values_ptr,
    offsets_ptr,
    out_ptr,
    ws_ptr,
    counters_ptr,
    B,
    D,
    R,
    LOG_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UNROLL: tl.constexpr,
    LOOP_STAGES: tl.constexpr,
    PAIRS: tl.constexpr,
):
    _pool_tile(
        values_ptr,
        offsets_ptr,
        out_ptr,
        ws_ptr,
        D,
        counters_ptr,
        tl.num_programs(1),
        B,
        D,
        tl.program_id(0).to(tl.int64),
        tl.program_id(1),
        R,
        LOG_B,
        BLOCK_N,
        BLOCK_D,
        UNROLL,
        LOOP_STAGES,
        PAIRS,
    )


@triton.jit
def partitioned_mean_bwd_kernel(
    grad_out_ptr,
    offsets_ptr,
    grad_values_ptr,
    B,
    N,
    D,
    R,
    LOG_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    _pool_grad_tile(
        grad_out_ptr,
        offsets_ptr,
        grad_values_ptr,
        B,
        N,
        D,
        tl.program_id(0).to(tl.int64),
        tl.program_id(1),
        R,
        LOG_B,
        BLOCK_N,
        BLOCK_D,
    )


@triton.jit
def _feature_of(tile_base_ptr, p, F: tl.constexpr):
    f = tl.zeros((), dtype=tl.int32)
    for i in tl.static_range(1, F):
        f += (p >= tl.load(tile_base_ptr + i)).to(tl.int32)
    return f


@triton.jit
def grouped_partitioned_mean_fwd_kernel(
    values_table,
    offsets_table,
    out_table,
    shape_table,
    tile_base_ptr,
    ws_ptr,
    counters_ptr,
    WS_STRIDE,
    F: tl.constexpr,
    ELEM: tl.constexpr,
    LOG_B: tl.constexpr,
    R,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UNROLL: tl.constexpr,
    LOOP_STAGES: tl.constexpr,
):
    """Several features (own values, offsets, B, D) in one launch; tables hold each feature's addresses.

    shape_table holds (B, N, D, first counter) per feature; workspace rows follow the global program id."""
    p = tl.program_id(0).to(tl.int64)
    f = _feature_of(tile_base_ptr, p, F)
    values_ptr = tl.load(values_table + f).to(tl.pointer_type(ELEM))
    offsets_ptr = tl.load(offsets_table + f).to(tl.pointer_type(tl.int64))
    out_ptr = tl.load(out_table + f).to(tl.pointer_type(ELEM))
    B = tl.load(shape_table + 4 * f)
    D = tl.load(shape_table + 4 * f + 2)
    tile_base = tl.load(tile_base_ptr + f)
    counters = counters_ptr + tl.load(shape_table + 4 * f + 3) * tl.num_programs(1)
    pid_d = tl.program_id(1)
    if pid_d * BLOCK_D < D:
        _pool_tile(
            values_ptr,
            offsets_ptr,
            out_ptr,
            ws_ptr + tile_base * WS_STRIDE,
            WS_STRIDE,
            counters,
            tl.num_programs(1),
            B,
            D,
            p - tile_base,
            pid_d,
            R,
            LOG_B,
            BLOCK_N,
            BLOCK_D,
            UNROLL,
            LOOP_STAGES,
            False,  # PAIRS: a feature's D may be odd
        )


@triton.jit
def grouped_partitioned_mean_bwd_kernel(
    grad_table,
    offsets_table,
    grad_values_table,
    shape_table,
    tile_base_ptr,
    F: tl.constexpr,
    ELEM: tl.constexpr,
    LOG_B: tl.constexpr,
    R,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    p = tl.program_id(0).to(tl.int64)
    f = _feature_of(tile_base_ptr, p, F)
    grad_ptr = tl.load(grad_table + f).to(tl.pointer_type(ELEM))
    offsets_ptr = tl.load(offsets_table + f).to(tl.pointer_type(tl.int64))
    grad_values_ptr = tl.load(grad_values_table + f).to(tl.pointer_type(ELEM))
    B = tl.load(shape_table + 4 * f)
    N = tl.load(shape_table + 4 * f + 1)
    D = tl.load(shape_table + 4 * f + 2)
    pid_d = tl.program_id(1)
    if pid_d * BLOCK_D < D:
        _pool_grad_tile(
            grad_ptr,
            offsets_ptr,
            grad_values_ptr,
            B,
            N,
            D,
            p - tl.load(tile_base_ptr + f),
            pid_d,
            R,
            LOG_B,
            BLOCK_N,
            BLOCK_D,
        )


__all__ = [
    "grouped_partitioned_mean_bwd_kernel",
    "grouped_partitioned_mean_fwd_kernel",
    "partitioned_mean_bwd_kernel",
    "partitioned_mean_fwd_kernel",
    "triton",
]
