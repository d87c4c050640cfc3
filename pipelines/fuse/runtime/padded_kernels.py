"""Triton kernels for the masked mean over a padded tensor: x [B, L, D], lengths [B] -> out [B, D].

What the user writes: `(x * (arange(L)[None, :] < lengths[:, None])[..., None]).sum(1) / counts`. Row b sums its
first rows_b = clamp(lengths[b], 0, L) rows (the mask's prefix); the rows past it are never read (the pad costs no
bandwidth: at a mean length well under L, most of x). MODE says what the sum is divided by, as the user's counts:
0 nothing (the pass divides by the user's own counts tensor after the op), 1 max(lengths[b], 1) (a clamped count:
an empty row gives 0), 2 lengths[b] as given (an empty row gives 0 / 0 = NaN, a length past L divides by itself,
as `sum / lengths[:, None]` does).

Forward: a program owns PARTS consecutive batch rows x BLOCK_D columns (the short partitioned-mean design of
pooling_short_kernels.py); step j loads row j of every batch row of the block at once, masked by j < rows_b,
UNROLL steps in flight, up to the block's longest row count. Few batch rows with long lengths split the L axis over
SPLIT programs (axis 2, CHUNK rows each) that write fp32 partial sums; padded.py adds them and divides.

Backward: dX[b, l] = (grad_out[b] / divisor_b) * (l < rows_b) over every [B, L, D] element, flattened rows x
BLOCK_D columns a program: rows past the length get zeros (written, as dX is a new [B, L, D] tensor). The product
by the 0 / 1 mask, not a select, keeps the user's autograd exactly: a NaN or infinite gradient row (an unclamped
zero count) gives NaN on every row of x there, as `grad * mask` does. Kernels run under TRITON_INTERPRET=1 on CPU.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _scaled(acc, raw, MODE: tl.constexpr):
    """acc [PARTS, BLOCK_D] divided by each row's count as MODE says (raw: the lengths as given, int64)."""
    if MODE == 1:
        acc = acc / tl.maximum(raw, 1).to(tl.float32)[:, None]
    elif MODE == 2:
        acc = acc / raw.to(tl.float32)[:, None]
    return acc


@triton.jit(do_not_specialize=["B", "L", "CHUNK"])  # one compile per launch, whatever the sizes' divisibility
def padded_mean_fwd_kernel(
    x_ptr,
    lengths_ptr,
    out_ptr,
    partial_ptr,
    B,
    L,
    D,
    stride_b,
    stride_l,
    CHUNK,
    MODE: tl.constexpr,
    SPLIT: tl.constexpr,
    PARTS: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UNROLL: tl.constexpr,
):
    parts = tl.program_id(0).to(tl.int64) * PARTS + tl.arange(0, PARTS)
    inside = parts < B
    raw = tl.load(lengths_ptr + parts, mask=inside, other=0).to(tl.int64)
    rows = tl.minimum(tl.maximum(raw, 0), L)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < D
    lo = tl.program_id(2).to(tl.int64) * CHUNK
    hi = tl.minimum(rows, lo + CHUNK)
    base = x_ptr + parts[:, None] * stride_b + cols[None, :]
    acc = tl.zeros((PARTS, BLOCK_D), dtype=tl.float32)
    for j in range(lo, tl.max(hi, axis=0), UNROLL):
        for u in tl.static_range(UNROLL):
            mask = ((j + u) < hi)[:, None] & col_mask[None, :]
            acc += tl.load(base + (j + u) * stride_l, mask=mask, other=0.0).to(tl.float32)
    out_mask = inside[:, None] & col_mask[None, :]
    if SPLIT:  # fp32 partial sums [SPLIT, B, D]: padded.py adds them up and divides
        offset = (tl.program_id(2).to(tl.int64) * B + parts)[:, None] * D + cols[None, :]
        tl.store(partial_ptr + offset, acc, mask=out_mask)
    else:
        mean = _scaled(acc, raw, MODE)
        tl.store(out_ptr + parts[:, None] * D + cols[None, :], mean.to(out_ptr.dtype.element_ty), mask=out_mask)


@triton.jit(do_not_specialize=["B", "L"])
def padded_mean_bwd_kernel(
    grad_out_ptr,
    lengths_ptr,
    grad_x_ptr,
    B,
    L,
    D,
    MODE: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    flat = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)  # b * L + l over the [B * L] rows
    inside = flat < B * L
    b = flat // L
    raw = tl.load(lengths_ptr + b, mask=inside, other=0).to(tl.int64)
    keep = ((flat - b * L) < tl.minimum(tl.maximum(raw, 0), L)).to(tl.float32)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = inside[:, None] & (cols < D)[None, :]
    g = tl.load(grad_out_ptr + b[:, None] * D + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    g = _scaled(g, raw, MODE) * keep[:, None]
    tl.store(grad_x_ptr + flat[:, None] * D + cols[None, :], g.to(grad_x_ptr.dtype.element_ty), mask=mask)


__all__ = ["padded_mean_bwd_kernel", "padded_mean_fwd_kernel", "triton"]
