"""The fused gather + mean pool with a sparse table gradient (interpreter), against nn.EmbeddingBag(sparse=True)."""

import pytest
import torch
import torch.nn.functional as F

from pipelines.fuse.runtime import embedding_partitioned_mean

VOCAB, WIDTH = 30, 20  # two column blocks of 16
LENGTHS = [3, 0, 5, 1, 0, 2, 20, 1]  # empty partitions, one longer than a row block


def _batch(lengths, id_dtype):
    generator = torch.Generator().manual_seed(0)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.tensor(lengths).cumsum(0)])
    ids = torch.randint(0, VOCAB, (int(offsets[-1]),), generator=generator)
    ids[:4] = 7  # a repeated id: its rows must add up, not overwrite
    return ids.to(id_dtype), offsets.to(id_dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("id_dtype", [torch.int64, torch.int32])
def test_the_sparse_gradient_is_embedding_bag_s_and_a_sparse_tensor(dtype, id_dtype):
    ids, offsets = _batch(LENGTHS, id_dtype)
    table = torch.randn(VOCAB, WIDTH, generator=torch.Generator().manual_seed(1)).to(dtype).requires_grad_()
    grad = torch.randn(len(LENGTHS), WIDTH, generator=torch.Generator().manual_seed(2)).to(dtype)
    out = embedding_partitioned_mean(table, ids, offsets, sparse=True)
    out.backward(grad)
    exact = table.detach().double().requires_grad_()
    expected = F.embedding_bag(ids.long(), exact, offsets[:-1].long(), mode="mean", sparse=True)
    expected.backward(grad.double())
    assert table.grad.is_sparse and exact.grad.is_sparse
    assert table.grad._nnz() == ids.shape[0]  # one row per position, uncoalesced, as EmbeddingBag's
    assert table.grad.dtype == dtype
    tol = 1e-6 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.double(), expected.detach(), rtol=tol, atol=tol)
    torch.testing.assert_close(table.grad.to_dense().double(), exact.grad.to_dense(), rtol=tol, atol=tol)


def test_a_sparse_step_moves_only_the_rows_it_read():
    ids, offsets = _batch(LENGTHS, torch.int64)
    table = torch.nn.Parameter(torch.randn(VOCAB, WIDTH))
    before = table.detach().clone()
    optimizer = torch.optim.SGD([table], lr=0.5)
    embedding_partitioned_mean(table, ids, offsets, sparse=True).square().sum().backward()
    optimizer.step()
    moved = (table.detach() != before).any(1)
    read = torch.zeros(VOCAB, dtype=torch.bool)
    read[ids] = True
    assert torch.equal(moved, read)


def test_no_rows_gives_an_empty_sparse_gradient():
    table = torch.randn(VOCAB, WIDTH, requires_grad=True)
    ids, offsets = torch.zeros(0, dtype=torch.int64), torch.zeros(3, dtype=torch.int64)
    out = embedding_partitioned_mean(table, ids, offsets, sparse=True)
    assert out.shape == (2, WIDTH) and not out.any()
    out.sum().backward()
    assert table.grad.is_sparse and table.grad._nnz() == 0
