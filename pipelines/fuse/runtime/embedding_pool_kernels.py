"""Triton kernels for the fused gather + mean pool: table [V, D], ids [N], offsets [B+1] -> out [B, D].

Rows are read from the table through `ids` and summed in fp32 on chip; the [N, D] intermediate is never written.
Two designs, picked by the shape bucket (see embedding_pool.py):

* **span** (many short partitions, mean length about 1-16): a program owns PARTS consecutive partitions. Their ids
  are one contiguous span [offsets[b0], offsets[b0 + PARTS]), read BLOCK_N at a time whatever the partitions'
  lengths; each gathered row tile is reduced into the PARTS outputs with a one-hot [PARTS, BLOCK_N] matrix on the
  tensor cores (exact: a one-hot product adds each row once, fp32 accumulation, IEEE for fp32). A partition of 1-4
  ids no longer costs a program and a serial chain of loads of its own.
  With GATHER off the same kernel is the plain partitioned mean (values [N, D] read in order), which pooling.py
  routes many short partitions to.
* **loop** (long partitions): a program owns one partition and loops over its ids BLOCK_N at a time.

Backward scatters grad_out[b] / len(b) into the table's dense fp32 gradient with atomic adds, in the same two
designs (the span one expands the PARTS gradient rows to its BLOCK_N ids with the transposed one-hot product).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _span_bounds(offsets_ptr, B, b0, PARTS: tl.constexpr):
    """Per-partition starts and ends of partitions b0 .. b0+PARTS (those past B are empty at offsets[B])."""
    parts = b0 + tl.arange(0, PARTS)
    starts = tl.load(offsets_ptr + tl.minimum(parts, B)).to(tl.int64)
    ends = tl.load(offsets_ptr + tl.minimum(parts + 1, B)).to(tl.int64)
    span_lo = tl.load(offsets_ptr + tl.minimum(b0, B)).to(tl.int64)
    span_hi = tl.load(offsets_ptr + tl.minimum(b0 + PARTS, B)).to(tl.int64)
    return parts, starts, ends, span_lo, span_hi


@triton.jit
def _split_dot(owner, tile, acc, WIDEN: tl.constexpr):
    """acc + owner @ tile for fp32 rows on the bf16 tensor cores: each row is the exact sum of three bf16 parts
    (8 significand bits each, 24 in all), and a one-hot product of a bf16 part is exact, so the three products add
    every row once in fp32, as IEEE products would, at tensor-core rather than FMA speed. WIDEN (the interpreter,
    whose numpy dot has no bf16) multiplies the same parts in fp32."""
    x = tile.to(tl.float32)
    high = x.to(tl.bfloat16)
    rest = x - high.to(tl.float32)
    middle = rest.to(tl.bfloat16)
    low = (rest - middle.to(tl.float32)).to(tl.bfloat16)
    if WIDEN:
        one = owner.to(tl.float32)
        acc = tl.dot(one, high.to(tl.float32), acc, input_precision="ieee")
        acc = tl.dot(one, middle.to(tl.float32), acc, input_precision="ieee")
        acc = tl.dot(one, low.to(tl.float32), acc, input_precision="ieee")
    else:
        one = owner.to(tl.bfloat16)
        acc = tl.dot(one, high, acc)
        acc = tl.dot(one, middle, acc)
        acc = tl.dot(one, low, acc)
    return acc


@triton.jit
def embedding_mean_span_fwd_kernel(
    table_ptr,
    ids_ptr,
    offsets_ptr,
    out_ptr,
    B,
    D,
    table_stride,
    PARTS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    IEEE: tl.constexpr,
    GATHER: tl.constexpr,
    SPLIT: tl.constexpr = False,
):
    b0 = tl.program_id(0).to(tl.int64) * PARTS
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < D
    parts, starts, ends, span_lo, span_hi = _span_bounds(offsets_ptr, B, b0, PARTS)
    rows0 = tl.arange(0, BLOCK_N)
    acc = tl.zeros((PARTS, BLOCK_D), dtype=tl.float32)
    for r in range(span_lo, span_hi, BLOCK_N):
        rows = r + rows0
        row_mask = rows < span_hi
        if GATHER:
            idx = tl.load(ids_ptr + rows, mask=row_mask, other=0).to(tl.int64)
        else:  # the plain partitioned mean: row i of the values is row i of the "table"
            idx = rows
        tile = tl.load(
            table_ptr + idx[:, None] * table_stride + cols[None, :],
            mask=row_mask[:, None] & col_mask[None, :],
            other=0.0,
        )
        owner = (rows[None, :] >= starts[:, None]) & (rows[None, :] < ends[:, None])  # [PARTS, BLOCK_N]
        if SPLIT:
            acc = _split_dot(owner, tile, acc, IEEE)
        elif IEEE:
            acc = tl.dot(owner.to(tl.float32), tile.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(owner.to(tile.dtype), tile, acc)
    count = tl.maximum(ends - starts, 1).to(tl.float32)
    mean = acc / count[:, None]
    out_mask = (parts < B)[:, None] & col_mask[None, :]
    tl.store(out_ptr + parts[:, None] * D + cols[None, :], mean.to(out_ptr.dtype.element_ty), mask=out_mask)


@triton.jit
def embedding_mean_loop_fwd_kernel(
    table_ptr,
    ids_ptr,
    offsets_ptr,
    out_ptr,
    B,
    D,
    table_stride,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < D
    start = tl.load(offsets_ptr + b).to(tl.int64)
    end = tl.load(offsets_ptr + b + 1).to(tl.int64)
    rows0 = tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    for r in range(start, end, BLOCK_N):
        rows = r + rows0
        row_mask = rows < end
        idx = tl.load(ids_ptr + rows, mask=row_mask, other=0).to(tl.int64)
        ptrs = table_ptr + idx[:, None] * table_stride + cols[None, :]
        acc += tl.load(ptrs, mask=row_mask[:, None] & col_mask[None, :], other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / tl.maximum(end - start, 1).to(tl.float32)
    tl.store(out_ptr + b * D + cols, mean.to(out_ptr.dtype.element_ty), mask=col_mask)


@triton.jit
def embedding_mean_span_bwd_kernel(
    grad_out_ptr,
    ids_ptr,
    offsets_ptr,
    grad_table_ptr,
    B,
    D,
    PARTS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    b0 = tl.program_id(0).to(tl.int64) * PARTS
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < D
    parts, starts, ends, span_lo, span_hi = _span_bounds(offsets_ptr, B, b0, PARTS)
    scale = 1.0 / tl.maximum(ends - starts, 1).to(tl.float32)
    g_mask = (parts < B)[:, None] & col_mask[None, :]
    g = tl.load(grad_out_ptr + parts[:, None] * D + cols[None, :], mask=g_mask, other=0.0).to(tl.float32)
    g = g * scale[:, None]  # [PARTS, BLOCK_D]
    rows0 = tl.arange(0, BLOCK_N)
    for r in range(span_lo, span_hi, BLOCK_N):
        rows = r + rows0
        row_mask = rows < span_hi
        idx = tl.load(ids_ptr + rows, mask=row_mask, other=0).to(tl.int64)
        owner = (rows[:, None] >= starts[None, :]) & (rows[:, None] < ends[None, :])  # [BLOCK_N, PARTS]
        row_grads = tl.dot(owner.to(tl.float32), g, input_precision="ieee")
        ptrs = grad_table_ptr + idx[:, None] * D + cols[None, :]
        tl.atomic_add(ptrs, row_grads, mask=row_mask[:, None] & col_mask[None, :], sem="relaxed")


@triton.jit
def partition_grad(grad_out_ptr, offsets_ptr, b, cols, col_mask, D):
    """Partition b's rows [start, end) and its share of the gradient, grad_out[b] / len(b), over `cols` (fp32)."""
    start = tl.load(offsets_ptr + b).to(tl.int64)
    end = tl.load(offsets_ptr + b + 1).to(tl.int64)
    scale = 1.0 / tl.maximum(end - start, 1).to(tl.float32)
    g = tl.load(grad_out_ptr + b * D + cols, mask=col_mask, other=0.0).to(tl.float32) * scale
    return start, end, g


@triton.jit
def embedding_mean_loop_bwd_kernel(
    grad_out_ptr,
    ids_ptr,
    offsets_ptr,
    grad_table_ptr,
    B,
    D,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < D
    start, end, g = partition_grad(grad_out_ptr, offsets_ptr, b, cols, col_mask, D)
    tile = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32) + g[None, :]
    rows0 = tl.arange(0, BLOCK_N)
    for r in range(start, end, BLOCK_N):
        rows = r + rows0
        row_mask = rows < end
        idx = tl.load(ids_ptr + rows, mask=row_mask, other=0).to(tl.int64)
        ptrs = grad_table_ptr + idx[:, None] * D + cols[None, :]
        tl.atomic_add(ptrs, tile, mask=row_mask[:, None] & col_mask[None, :], sem="relaxed")


__all__ = [
    "embedding_mean_loop_bwd_kernel",
    "embedding_mean_loop_fwd_kernel",
    "embedding_mean_span_bwd_kernel",
    "embedding_mean_span_fwd_kernel",
    "partition_grad",
    "triton",
]
