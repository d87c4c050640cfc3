"""The fused gather + mean pool with a SPARSE table gradient, as `nn.EmbeddingBag(mode="mean", sparse=True)` gives.

The forward is embedding_pool's (one launch, the [N, D] rows never written). The backward cannot avoid N rows: a
sparse COO gradient is one (id, row) pair per position, rows[i] = grad_out[b(i)] / len(b(i)), uncoalesced like
EmbeddingBag's (an optimizer such as SGD or SparseAdam coalesces it). One launch writes those rows, a program per
(partition, column block) broadcasting its partition's scaled gradient down the partition's positions: no atomics,
no [V, D] buffer, so the cost follows N, not the vocabulary (the dense backward zero-fills all of V x D).

Eager only: under torch.compile the pass keeps declining `F.embedding(..., sparse=True)` (counted, with the reason),
as AOTAutograd's traced backward holds dense tensors.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import embedding_pool
from .embedding_pool_kernels import partition_grad


@triton.jit
def embedding_mean_sparse_rows_kernel(
    grad_out_ptr,
    offsets_ptr,
    rows_ptr,
    D,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < D
    start, end, g = partition_grad(grad_out_ptr, offsets_ptr, b, cols, col_mask, D)
    tile = (tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32) + g[None, :]).to(rows_ptr.dtype.element_ty)
    rows0 = tl.arange(0, BLOCK_N)
    for r in range(start, end, BLOCK_N):
        rows = r + rows0
        mask = (rows < end)[:, None] & col_mask[None, :]
        tl.store(rows_ptr + rows[:, None] * D + cols[None, :], tile, mask=mask)


def sparse_rows(grad_out: torch.Tensor, offsets: torch.Tensor, rows: int, dtype: torch.dtype) -> torch.Tensor:
    """[N, D] in `dtype`: position i's share of its partition's gradient (offsets from 0 to N: every row written)."""
    grad_out = grad_out.contiguous()
    partitions, width = grad_out.shape
    out = grad_out.new_empty(rows, width, dtype=dtype)
    if partitions == 0 or rows == 0:
        return out
    config = embedding_pool.launch_config(partitions, rows, width, dtype, grad_out.device)
    block_d = config["BLOCK_D"]
    launch = {k: config[k] for k in ("num_warps",) if k in config}
    grid = (partitions, embedding_pool._cdiv(width, block_d))
    embedding_mean_sparse_rows_kernel[grid](
        grad_out, offsets.contiguous(), out, width, BLOCK_N=16, BLOCK_D=block_d, **launch
    )
    return out


class EmbeddingPartitionedMeanSparse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, table, ids, offsets):
        ctx.save_for_backward(ids, offsets)
        ctx.vocabulary, ctx.dtype = table.shape[0], table.dtype
        return embedding_pool.embedding_mean_forward(table, ids, offsets)

    @staticmethod
    def backward(ctx, grad_out):
        ids, offsets = ctx.saved_tensors
        rows = sparse_rows(grad_out, offsets, ids.shape[0], ctx.dtype)
        size = (ctx.vocabulary, grad_out.shape[1])
        grad_table = torch.sparse_coo_tensor(ids.to(torch.int64).unsqueeze(0), rows, size, check_invariants=False)
        return grad_table, None, None


__all__ = ["EmbeddingPartitionedMeanSparse", "embedding_mean_sparse_rows_kernel", "sparse_rows"]
