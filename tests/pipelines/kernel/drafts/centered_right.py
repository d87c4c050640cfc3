import torch
import triton
import triton.language as tl

from liger_kernel.ops.utils import ensure_contiguous


@triton.jit
def _centered_kernel(X, Y, n_rows, n_cols, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    col_mask = cols < n_cols
    total = tl.zeros((BLOCK_COLS,), dtype=tl.float32)
    for start in range(0, n_rows, BLOCK_ROWS):
        rows = start + tl.arange(0, BLOCK_ROWS)
        mask = (rows[:, None] < n_rows) & col_mask[None, :]
        x = tl.load(X + rows[:, None] * n_cols + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        total += tl.sum(x, axis=0)
    mean = total / n_rows
    for start in range(0, n_rows, BLOCK_ROWS):
        rows = start + tl.arange(0, BLOCK_ROWS)
        mask = (rows[:, None] < n_rows) & col_mask[None, :]
        offsets = rows[:, None] * n_cols + cols[None, :]
        x = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + offsets, (x - mean[None, :]).to(Y.dtype.element_ty), mask=mask)


def _centered(x):
    """x - x.mean(0): every dimension after the first is a column of one cross-row mean."""
    x2 = x.reshape(x.shape[0], -1)
    y = torch.empty_like(x2)
    n_rows, n_cols = x2.shape
    block_cols = 32
    grid = (triton.cdiv(n_cols, block_cols),)
    _centered_kernel[grid](x2, y, n_rows, n_cols, BLOCK_ROWS=16, BLOCK_COLS=block_cols)
    return y.view(x.shape)


class LigerCenteredFunction(torch.autograd.Function):
    @staticmethod
    @ensure_contiguous
    def forward(ctx, x):
        return _centered(x)

    @staticmethod
    @ensure_contiguous
    def backward(ctx, dy):
        # d/dx (x - mean_0(x)) applied to dy is dy - mean_0(dy): the same kernel
        return _centered(dy)
