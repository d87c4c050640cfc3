"""Triton kernel for the partitioned mean's backward over rows in order: grad_out [B, D], offsets [B+1] -> [N, D].

The short design's backward (pooling_short_kernels.py) writes row j of each of its PARTS partitions per step, up to
the block's longest partition: at lengths spread over [0, 2L] about half the store slots it issues are masked off.
Here a program owns PARTS consecutive partitions too, but walks their rows as the one contiguous span they are,
[offsets[b0], offsets[b0 + PARTS]), BLOCK_N full rows at a time whatever the lengths. A row's partition is the
number of the block's partition ends at or below it (a [BLOCK_N, PARTS] comparison); its gradient is that
partition's row of grad_out (a gather the cache serves: a tile touches a few rows) divided by its length, in fp32,
stored in the gradient's dtype: the same values as the short design's. Rows outside [offsets[0], offsets[B]) are
zeroed by the first and last program. Offsets may be int32 or int64. Runs under TRITON_INTERPRET=1 on CPU tensors.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .embedding_pool_kernels import _span_bounds
from .pooling_short_kernels import _zero_rows


@triton.jit(do_not_specialize=["B", "N"])
def flat_mean_bwd_kernel(
    grad_out_ptr,
    offsets_ptr,
    grad_values_ptr,
    B,
    N,
    D,
    PARTS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    TAIL_N: tl.constexpr,
):
    b0 = tl.program_id(0).to(tl.int64) * PARTS
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < D
    _, _, ends, span_lo, span_hi = _span_bounds(offsets_ptr, B, b0, PARTS)
    ends = (ends - span_lo).to(tl.int32)  # span-relative
    rows0 = tl.arange(0, BLOCK_N)
    for r in range(span_lo, span_hi, BLOCK_N):
        rows = r + rows0
        row_mask = rows < span_hi
        local = tl.sum((ends[None, :] <= (rows - span_lo).to(tl.int32)[:, None]).to(tl.int32), axis=1)
        owner = b0 + tl.minimum(local, PARTS - 1)  # a row past the span (masked) is kept inside the block
        start = tl.load(offsets_ptr + owner, mask=row_mask, other=0).to(tl.int64)
        end = tl.load(offsets_ptr + owner + 1, mask=row_mask, other=1).to(tl.int64)
        mask = row_mask[:, None] & col_mask[None, :]
        g = tl.load(grad_out_ptr + owner[:, None] * D + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        row_grads = g / tl.maximum(end - start, 1).to(tl.float32)[:, None]
        ptrs = grad_values_ptr + rows[:, None] * D + cols[None, :]
        tl.store(ptrs, row_grads.to(grad_values_ptr.dtype.element_ty), mask=mask)
    # rows outside [offsets[0], offsets[B]) belong to no partition (the pass's op allows them): zero gradient
    if tl.program_id(0) == 0:
        _zero_rows(grad_values_ptr, 0, tl.load(offsets_ptr).to(tl.int64), D, cols, col_mask, TAIL_N, BLOCK_D)
    if tl.program_id(0) == tl.num_programs(0) - 1:
        last = tl.load(offsets_ptr + B).to(tl.int64)
        _zero_rows(grad_values_ptr, last, N, D, cols, col_mask, TAIL_N, BLOCK_D)


__all__ = ["flat_mean_bwd_kernel", "triton"]
