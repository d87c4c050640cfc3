"""Triton kernels for the grouped fused gather + mean pool: K features, each its own table [V_f, D_f], ids [N_f] and
offsets [B+1], pooled into one [B, sum D_f] output (feature f's columns at col_off_f), in one launch each way.

The features' addresses and sizes are one int64 tensor, META_FIELDS values per feature (`meta`, see
grouped_embedding_pool.py), cast to pointers in the kernel (`tl.load(...).to(tl.pointer_type(...))`: the grouped
partitioned mean of pooling_kernels.py does the same and ran on the H200 with triton 3.6). The grid is
(partition blocks, K, column blocks): program_id(1) is the feature, no search. The bodies are embedding_pool_kernels'
span and loop designs with a feature's pointers, its output column offset and the output's row stride.

The offsets are validated in the kernel: every offset a program reads is clamped into [0, N_f] (a bad offset can
read no id outside the feature's), and a program that saw one outside [0, N_f] or a decrease stores 0 into the meta
tensor's last slot (the host set it to 1), which the op asserts on the device without a host read (one launch for
all K features, against K in-graph checks).
"""

from __future__ import annotations

import triton
import triton.language as tl

# per feature: table, ids, offsets addresses; table row stride; D; output column offset; gradient base; N
# (the kernels spell the 8 out: a jit function reads no plain global)
META_FIELDS = 8


@triton.jit
def _feature(meta_ptr, ELEM: tl.constexpr, ID: tl.constexpr, OFFSET: tl.constexpr):
    """Feature program_id(1)'s table, ids and offsets pointers, row stride, D, output column offset, base, N."""
    row = meta_ptr + tl.program_id(1).to(tl.int64) * 8
    table_ptr = tl.load(row + 0).to(tl.pointer_type(ELEM))
    ids_ptr = tl.load(row + 1).to(tl.pointer_type(ID))
    offsets_ptr = tl.load(row + 2).to(tl.pointer_type(OFFSET))
    return (
        table_ptr,
        ids_ptr,
        offsets_ptr,
        tl.load(row + 3),
        tl.load(row + 4),
        tl.load(row + 5),
        tl.load(row + 6),
        tl.load(row + 7),
    )


@triton.jit
def _report_bad(meta_ptr, bad, K):
    """Store 0 into the flag slot (meta[K * 8]) where `bad` holds; every writer writes the same value."""
    if bad != 0:
        tl.store(meta_ptr + K * 8, 0)


@triton.jit
def _checked_span_bounds(offsets_ptr, B, N, b0, PARTS: tl.constexpr):
    """embedding_pool_kernels._span_bounds clamped into [0, N], and whether any offset read was outside or fell."""
    parts = b0 + tl.arange(0, PARTS)
    starts = tl.load(offsets_ptr + tl.minimum(parts, B)).to(tl.int64)
    ends = tl.load(offsets_ptr + tl.minimum(parts + 1, B)).to(tl.int64)
    bad = tl.max(((starts < 0) | (ends > N) | (ends < starts)).to(tl.int32), axis=0)
    starts = tl.minimum(tl.maximum(starts, 0), N)
    ends = tl.maximum(tl.minimum(tl.maximum(ends, 0), N), starts)
    span_lo = tl.min(starts, axis=0)
    span_hi = tl.max(ends, axis=0)
    return parts, starts, ends, span_lo, span_hi, bad


@triton.jit
def _checked_bounds(offsets_ptr, b, N):
    start = tl.load(offsets_ptr + b).to(tl.int64)
    end = tl.load(offsets_ptr + b + 1).to(tl.int64)
    bad = (start < 0) | (end > N) | (end < start)
    start = tl.minimum(tl.maximum(start, 0), N)
    end = tl.maximum(tl.minimum(end, N), start)
    return start, end, bad


@triton.jit
def grouped_embedding_mean_span_fwd_kernel(
    meta_ptr,
    out_ptr,
    B,
    K,
    OUT_STRIDE,
    ELEM: tl.constexpr,
    ID: tl.constexpr,
    OFFSET: tl.constexpr,
    PARTS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    IEEE: tl.constexpr,
):
    table_ptr, ids_ptr, offsets_ptr, stride, D, col_off, _base, N = _feature(meta_ptr, ELEM, ID, OFFSET)
    if tl.program_id(2) * BLOCK_D < D:
        b0 = tl.program_id(0).to(tl.int64) * PARTS
        cols = tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
        col_mask = cols < D
        parts, starts, ends, span_lo, span_hi, bad = _checked_span_bounds(offsets_ptr, B, N, b0, PARTS)
        rows0 = tl.arange(0, BLOCK_N)
        acc = tl.zeros((PARTS, BLOCK_D), dtype=tl.float32)
        for r in range(span_lo, span_hi, BLOCK_N):
            rows = r + rows0
            row_mask = rows < span_hi
            idx = tl.load(ids_ptr + rows, mask=row_mask, other=0).to(tl.int64)
            tile = tl.load(
                table_ptr + idx[:, None] * stride + cols[None, :],
                mask=row_mask[:, None] & col_mask[None, :],
                other=0.0,
            )
            owner = (rows[None, :] >= starts[:, None]) & (rows[None, :] < ends[:, None])  # [PARTS, BLOCK_N]
            if IEEE:
                acc = tl.dot(owner.to(tl.float32), tile.to(tl.float32), acc, input_precision="ieee")
            else:
                acc = tl.dot(owner.to(tile.dtype), tile, acc)
        mean = acc / tl.maximum(ends - starts, 1).to(tl.float32)[:, None]
        out_mask = (parts < B)[:, None] & col_mask[None, :]
        ptrs = out_ptr + parts[:, None] * OUT_STRIDE + col_off + cols[None, :]
        tl.store(ptrs, mean.to(out_ptr.dtype.element_ty), mask=out_mask)
        if tl.program_id(2) == 0:
            _report_bad(meta_ptr, bad, K)


@triton.jit
def grouped_embedding_mean_loop_fwd_kernel(
    meta_ptr,
    out_ptr,
    B,
    K,
    OUT_STRIDE,
    ELEM: tl.constexpr,
    ID: tl.constexpr,
    OFFSET: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    table_ptr, ids_ptr, offsets_ptr, stride, D, col_off, _base, N = _feature(meta_ptr, ELEM, ID, OFFSET)
    if tl.program_id(2) * BLOCK_D < D:
        b = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
        col_mask = cols < D
        start, end, bad = _checked_bounds(offsets_ptr, b, N)
        rows0 = tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
        for r in range(start, end, BLOCK_N):
            rows = r + rows0
            row_mask = rows < end
            idx = tl.load(ids_ptr + rows, mask=row_mask, other=0).to(tl.int64)
            ptrs = table_ptr + idx[:, None] * stride + cols[None, :]
            acc += tl.load(ptrs, mask=row_mask[:, None] & col_mask[None, :], other=0.0).to(tl.float32)
        mean = tl.sum(acc, axis=0) / tl.maximum(end - start, 1).to(tl.float32)
        tl.store(out_ptr + b * OUT_STRIDE + col_off + cols, mean.to(out_ptr.dtype.element_ty), mask=col_mask)
        if tl.program_id(2) == 0:
            _report_bad(meta_ptr, bad, K)


@triton.jit
def grouped_embedding_mean_span_bwd_kernel(
    meta_ptr,
    grad_out_ptr,
    grad_ptr,
    B,
    OUT_STRIDE,
    ELEM: tl.constexpr,
    ID: tl.constexpr,
    OFFSET: tl.constexpr,
    PARTS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """grad[base_f + ids[i] * D_f + c] += grad_out[b(i), col_off_f + c] / len(b(i)), fp32 atomics."""
    _table, ids_ptr, offsets_ptr, _stride, D, col_off, base, N = _feature(meta_ptr, ELEM, ID, OFFSET)
    if tl.program_id(2) * BLOCK_D < D:
        b0 = tl.program_id(0).to(tl.int64) * PARTS
        cols = tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
        col_mask = cols < D
        parts, starts, ends, span_lo, span_hi, _bad = _checked_span_bounds(offsets_ptr, B, N, b0, PARTS)
        scale = 1.0 / tl.maximum(ends - starts, 1).to(tl.float32)
        g_mask = (parts < B)[:, None] & col_mask[None, :]
        g_ptrs = grad_out_ptr + parts[:, None] * OUT_STRIDE + col_off + cols[None, :]
        g = tl.load(g_ptrs, mask=g_mask, other=0.0).to(tl.float32) * scale[:, None]  # [PARTS, BLOCK_D]
        rows0 = tl.arange(0, BLOCK_N)
        for r in range(span_lo, span_hi, BLOCK_N):
            rows = r + rows0
            row_mask = rows < span_hi
            idx = tl.load(ids_ptr + rows, mask=row_mask, other=0).to(tl.int64)
            owner = (rows[:, None] >= starts[None, :]) & (rows[:, None] < ends[None, :])  # [BLOCK_N, PARTS]
            row_grads = tl.dot(owner.to(tl.float32), g, input_precision="ieee")
            ptrs = grad_ptr + base + idx[:, None] * D + cols[None, :]
            tl.atomic_add(ptrs, row_grads, mask=row_mask[:, None] & col_mask[None, :], sem="relaxed")


@triton.jit
def grouped_embedding_mean_loop_bwd_kernel(
    meta_ptr,
    grad_out_ptr,
    grad_ptr,
    B,
    OUT_STRIDE,
    ELEM: tl.constexpr,
    ID: tl.constexpr,
    OFFSET: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    _table, ids_ptr, offsets_ptr, _stride, D, col_off, base, N = _feature(meta_ptr, ELEM, ID, OFFSET)
    if tl.program_id(2) * BLOCK_D < D:
        b = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
        col_mask = cols < D
        start, end, _bad = _checked_bounds(offsets_ptr, b, N)
        scale = 1.0 / tl.maximum(end - start, 1).to(tl.float32)
        g = tl.load(grad_out_ptr + b * OUT_STRIDE + col_off + cols, mask=col_mask, other=0.0).to(tl.float32)
        tile = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32) + (g * scale)[None, :]
        rows0 = tl.arange(0, BLOCK_N)
        for r in range(start, end, BLOCK_N):
            rows = r + rows0
            row_mask = rows < end
            idx = tl.load(ids_ptr + rows, mask=row_mask, other=0).to(tl.int64)
            ptrs = grad_ptr + base + idx[:, None] * D + cols[None, :]
            tl.atomic_add(ptrs, tile, mask=row_mask[:, None] & col_mask[None, :], sem="relaxed")


__all__ = [
    "META_FIELDS",
    "grouped_embedding_mean_loop_bwd_kernel",
    "grouped_embedding_mean_loop_fwd_kernel",
    "grouped_embedding_mean_span_bwd_kernel",
    "grouped_embedding_mean_span_fwd_kernel",
    "triton",
]
