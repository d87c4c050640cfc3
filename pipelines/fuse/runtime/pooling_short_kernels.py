"""Triton kernels for the partitioned mean at short partitions: values [N, D], offsets [B+1] -> out [B, D].

The tile kernels of pooling_kernels.py give every partition a program of its own (B + N // R programs) and reduce
a [BLOCK_N, BLOCK_D] row tile per step: at a mean length of 1-4 almost every lane of that tile is masked off and
the program's fixed cost (offsets, the tile's cross-thread sum, a launch slot) is paid per partition. The span
kernel of embedding_pool_kernels.py packs partitions but reduces them with a one-hot product, which is exact but
costs PARTS multiply-adds per value read, emulated in fp32 (the H200 grid: 1.4-2.3x behind segment_reduce there).

Here a program owns a 2-D block: PARTS consecutive partitions (one per row of the block) x BLOCK_D columns. Step j
loads row `start_b + j` of every partition b of the block at once, masked by `j < len_b`, UNROLL such steps per
iteration in flight, up to the block's longest partition (at most CAP rows); each value is read once and added
once, in fp32. A partition longer than CAP (a rare long history among short ones) is left out of the block's store
and summed again whole by the same program in [TAIL_N, BLOCK_D] row tiles afterwards (the block's registers free
by then), so no length is ever wrong, only slower than the tile kernel, which splits it over programs, would be:
the launch rule (pooling.short_config) takes this design only at short mean lengths.

The backward is the mean's broadcast: grad_values[i] = grad_out[b(i)] / len(b), written by the same blocks (row
`start_b + j` of every partition per step), rows outside [offsets[0], offsets[B]) zeroed by the first and last
program. Offsets may be int32 or int64 (read as int64). Kernels run under TRITON_INTERPRET=1 on CPU tensors.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _block(offsets_ptr, B, PARTS: tl.constexpr):
    """This program's partitions, their starts and lengths (0 past B), the longest length."""
    parts = tl.program_id(0).to(tl.int64) * PARTS + tl.arange(0, PARTS)
    inside = parts < B
    starts = tl.load(offsets_ptr + parts, mask=inside, other=0).to(tl.int64)
    ends = tl.load(offsets_ptr + parts + 1, mask=inside, other=0).to(tl.int64)
    lengths = ends - starts
    return parts, inside, starts, lengths, tl.max(lengths, axis=0)


@triton.jit(do_not_specialize=["B"])  # one compile per launch, whatever B's divisibility
def short_mean_fwd_kernel(
    values_ptr,
    offsets_ptr,
    out_ptr,
    B,
    D,
    PARTS: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UNROLL: tl.constexpr,
    CAP: tl.constexpr,
    TAIL_N: tl.constexpr,
):
    parts, inside, starts, lengths, longest = _block(offsets_ptr, B, PARTS)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < D
    held = tl.where(lengths <= CAP, lengths, 0)  # a longer partition is summed by the tail loop below
    acc = tl.zeros((PARTS, BLOCK_D), dtype=tl.float32)
    for j in range(0, tl.max(held, axis=0), UNROLL):
        for u in tl.static_range(UNROLL):
            mask = ((j + u) < held)[:, None] & col_mask[None, :]
            ptrs = values_ptr + (starts + j + u)[:, None] * D + cols[None, :]
            acc += tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    mean = acc / tl.maximum(lengths, 1).to(tl.float32)[:, None]
    out_mask = (inside & (lengths <= CAP))[:, None] & col_mask[None, :]
    tl.store(out_ptr + parts[:, None] * D + cols[None, :], mean.to(out_ptr.dtype.element_ty), mask=out_mask)
    if longest > CAP:  # a partition longer than CAP: summed again whole in row tiles, one at a time
        rows0 = tl.arange(0, TAIL_N)
        first = tl.program_id(0).to(tl.int64) * PARTS
        for b in range(first, tl.minimum(first + PARTS, B)):
            start = tl.load(offsets_ptr + b).to(tl.int64)
            end = tl.load(offsets_ptr + b + 1).to(tl.int64)
            if end - start > CAP:
                tail = tl.zeros((TAIL_N, BLOCK_D), dtype=tl.float32)
                for r in range(start, end, TAIL_N):
                    rows = r + rows0
                    mask = (rows < end)[:, None] & col_mask[None, :]
                    ptrs = values_ptr + rows[:, None] * D + cols[None, :]
                    tail += tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
                mean_b = tl.sum(tail, axis=0) / (end - start).to(tl.float32)
                tl.store(out_ptr + b * D + cols, mean_b.to(out_ptr.dtype.element_ty), mask=col_mask)


@triton.jit
def _zero_rows(grad_values_ptr, lo, hi, D, cols, col_mask, TAIL_N: tl.constexpr, BLOCK_D: tl.constexpr):
    zero = tl.zeros((TAIL_N, BLOCK_D), dtype=grad_values_ptr.dtype.element_ty)
    rows0 = tl.arange(0, TAIL_N)
    for r in range(lo, hi, TAIL_N):
        rows = r + rows0
        mask = (rows < hi)[:, None] & col_mask[None, :]
        tl.store(grad_values_ptr + rows[:, None] * D + cols[None, :], zero, mask=mask)


@triton.jit(do_not_specialize=["B", "N"])
def short_mean_bwd_kernel(
    grad_out_ptr,
    offsets_ptr,
    grad_values_ptr,
    B,
    N,
    D,
    PARTS: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UNROLL: tl.constexpr,
    CAP: tl.constexpr,
    TAIL_N: tl.constexpr,
):
    parts, inside, starts, lengths, longest = _block(offsets_ptr, B, PARTS)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < D
    g_mask = inside[:, None] & col_mask[None, :]
    g = tl.load(grad_out_ptr + parts[:, None] * D + cols[None, :], mask=g_mask, other=0.0).to(tl.float32)
    rows_grad = (g / tl.maximum(lengths, 1).to(tl.float32)[:, None]).to(grad_values_ptr.dtype.element_ty)
    for j in range(0, tl.minimum(longest, CAP), UNROLL):
        for u in tl.static_range(UNROLL):
            mask = ((j + u) < lengths)[:, None] & col_mask[None, :]
            tl.store(grad_values_ptr + (starts + j + u)[:, None] * D + cols[None, :], rows_grad, mask=mask)
    if longest > CAP:  # a partition longer than CAP: its rows past CAP in row tiles, one at a time
        rows0 = tl.arange(0, TAIL_N)
        first = tl.program_id(0).to(tl.int64) * PARTS
        for b in range(first, tl.minimum(first + PARTS, B)):
            start = tl.load(offsets_ptr + b).to(tl.int64)
            end = tl.load(offsets_ptr + b + 1).to(tl.int64)
            if end - start > CAP:
                row = tl.load(grad_out_ptr + b * D + cols, mask=col_mask, other=0.0).to(tl.float32)
                row = row / (end - start).to(tl.float32)
                tile = (tl.zeros((TAIL_N, BLOCK_D), dtype=tl.float32) + row[None, :]).to(
                    grad_values_ptr.dtype.element_ty
                )
                for r in range(start + CAP, end, TAIL_N):
                    rows = r + rows0
                    mask = (rows < end)[:, None] & col_mask[None, :]
                    tl.store(grad_values_ptr + rows[:, None] * D + cols[None, :], tile, mask=mask)
    # rows outside [offsets[0], offsets[B]) belong to no partition (the pass's op allows them): zero gradient
    if tl.program_id(0) == 0:
        _zero_rows(grad_values_ptr, 0, tl.load(offsets_ptr).to(tl.int64), D, cols, col_mask, TAIL_N, BLOCK_D)
    if tl.program_id(0) == tl.num_programs(0) - 1:
        last = tl.load(offsets_ptr + B).to(tl.int64)
        _zero_rows(grad_values_ptr, last, N, D, cols, col_mask, TAIL_N, BLOCK_D)


__all__ = ["short_mean_bwd_kernel", "short_mean_fwd_kernel", "triton"]
