"""Triton kernels for batched partitioned mean pooling: values [N, D], offsets [B+1] -> out [B, D].

Work is split into *virtual tiles* so that one huge partition among many tiny ones, or B = 1, still spreads
over the whole GPU in one launch. Partition b owns the tiles `G(b) .. G(b+1)-1` with
`G(b) = b + (offsets[b] - offsets[0]) // R`: one tile per partition plus one per multiple of R rows it
crosses, so the grid, `B + N // R`, is known from shapes alone (no host sync on offsets, which keeps the op
traceable by torch.compile). A program finds its partition by binary search over G, which is monotone.
A partition that fits one tile is reduced and stored by that tile alone; a longer one adds each tile's
partial mean atomically into a zeroed fp32 output. Backward uses the same tiles and writes each row once.
Accumulation is fp32 for every input dtype. Kernels run under TRITON_INTERPRET=1 on CPU tensors.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _tile_index(offsets_ptr, B, p, R: tl.constexpr, LOG_B: tl.constexpr):
    """The partition b owning virtual tile p: the largest b in [0, B) with G(b) <= p."""
    base = tl.load(offsets_ptr).to(tl.int64)
    lo = tl.zeros((), dtype=tl.int64)
    hi = tl.zeros((), dtype=tl.int64) + B
    for _ in tl.static_range(LOG_B):
        mid = (lo + hi) // 2
        g = mid + (tl.load(offsets_ptr + mid).to(tl.int64) - base) // R
        take = g <= p
        lo = tl.where(take, mid, lo)
        hi = tl.where(take, hi, mid)
    return lo, base


@triton.jit
def _pool_tile(
    values_ptr,
    offsets_ptr,
    out_ptr,
    B,
    D,
    p,
    pid_d,
    R: tl.constexpr,
    LOG_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    b, base = _tile_index(offsets_ptr, B, p, R, LOG_B)
    start = tl.load(offsets_ptr + b).to(tl.int64)
    end = tl.load(offsets_ptr + b + 1).to(tl.int64)
    first_tile = (start - base) // R
    g_b = b + first_tile
    k = p - g_b
    g_next = b + 1 + (end - base) // R
    count = end - start
    single = (end - 1 - base) // R <= first_tile  # the partition's rows (if any) lie in one tile
    lo = tl.maximum(start, base + (first_tile + k) * R)
    hi = tl.minimum(end, base + (first_tile + k + 1) * R)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < D
    if p < g_next:
        if (single == 0) | (k == 0):
            acc = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
            rows0 = tl.arange(0, BLOCK_N)
            for r in range(lo, hi, BLOCK_N):
                rows = r + rows0
                mask = (rows < hi)[:, None] & col_mask[None, :]
                acc += tl.load(values_ptr + rows[:, None] * D + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            partial = tl.sum(acc, axis=0) / tl.maximum(count, 1).to(tl.float32)
            if single:
                tl.store(out_ptr + b * D + cols, partial, mask=col_mask)
            elif hi > lo:
                tl.atomic_add(out_ptr + b * D + cols, partial, mask=col_mask)


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
    R: tl.constexpr,
    LOG_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    b, base = _tile_index(offsets_ptr, B, p, R, LOG_B)
    start = tl.load(offsets_ptr + b).to(tl.int64)
    end = tl.load(offsets_ptr + b + 1).to(tl.int64)
    first_tile = (start - base) // R
    k = p - (b + first_tile)
    g_next = b + 1 + (end - base) // R
    lo = tl.maximum(start, base + (first_tile + k) * R)
    hi = tl.minimum(end, base + (first_tile + k + 1) * R)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < D
    rows0 = tl.arange(0, BLOCK_N)
    if p < g_next:
        scale = 1.0 / tl.maximum(end - start, 1).to(tl.float32)
        g = tl.load(grad_out_ptr + b * D + cols, mask=col_mask, other=0.0).to(tl.float32) * scale
        tile = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32) + g[None, :]
        tile = tile.to(grad_values_ptr.dtype.element_ty)
        for r in range(lo, hi, BLOCK_N):
            rows = r + rows0
            mask = (rows < hi)[:, None] & col_mask[None, :]
            tl.store(grad_values_ptr + rows[:, None] * D + cols[None, :], tile, mask=mask)
        # rows outside [offsets[0], offsets[B]) belong to no partition: their gradient is zero
        zero = tl.zeros((BLOCK_N, BLOCK_D), dtype=grad_values_ptr.dtype.element_ty)
        if (b == 0) & (k == 0):
            for r in range(0, start, BLOCK_N):
                rows = r + rows0
                mask = (rows < start)[:, None] & col_mask[None, :]
                tl.store(grad_values_ptr + rows[:, None] * D + cols[None, :], zero, mask=mask)
        if (b == B - 1) & (p == g_next - 1):
            for r in range(end, N, BLOCK_N):
                rows = r + rows0
                mask = (rows < N)[:, None] & col_mask[None, :]
                tl.store(grad_values_ptr + rows[:, None] * D + cols[None, :], zero, mask=mask)


@triton.jit
def partitioned_mean_fwd_kernel(
    values_ptr,
    offsets_ptr,
    out_ptr,
    B,
    D,
    R: tl.constexpr,
    LOG_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    _pool_tile(
        values_ptr,
        offsets_ptr,
        out_ptr,
        B,
        D,
        tl.program_id(0).to(tl.int64),
        tl.program_id(1),
        R,
        LOG_B,
        BLOCK_N,
        BLOCK_D,
    )


@triton.jit
def partitioned_mean_bwd_kernel(
    grad_out_ptr,
    offsets_ptr,
    grad_values_ptr,
    B,
    N,
    D,
    R: tl.constexpr,
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
    F: tl.constexpr,
    ELEM: tl.constexpr,
    R: tl.constexpr,
    LOG_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Several features (own values, offsets, B, D) in one launch; tables hold each feature's addresses."""
    p = tl.program_id(0).to(tl.int64)
    f = _feature_of(tile_base_ptr, p, F)
    values_ptr = tl.load(values_table + f).to(tl.pointer_type(ELEM))
    offsets_ptr = tl.load(offsets_table + f).to(tl.pointer_type(tl.int64))
    out_ptr = tl.load(out_table + f).to(tl.pointer_type(tl.float32))
    B = tl.load(shape_table + 3 * f)
    D = tl.load(shape_table + 3 * f + 2)
    pid_d = tl.program_id(1)
    if pid_d * BLOCK_D < D:
        _pool_tile(
            values_ptr, offsets_ptr, out_ptr, B, D, p - tl.load(tile_base_ptr + f), pid_d, R, LOG_B, BLOCK_N, BLOCK_D
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
    R: tl.constexpr,
    LOG_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    p = tl.program_id(0).to(tl.int64)
    f = _feature_of(tile_base_ptr, p, F)
    grad_ptr = tl.load(grad_table + f).to(tl.pointer_type(ELEM))
    offsets_ptr = tl.load(offsets_table + f).to(tl.pointer_type(tl.int64))
    grad_values_ptr = tl.load(grad_values_table + f).to(tl.pointer_type(ELEM))
    B = tl.load(shape_table + 3 * f)
    N = tl.load(shape_table + 3 * f + 1)
    D = tl.load(shape_table + 3 * f + 2)
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
