"""The flat backward and the span forward's fp32 split (interpreter) against float64, forced through the design
argument, and the flat launch derived from the shape."""

import pytest
import torch

from pipelines.fuse.runtime import embedding_pool
from pipelines.fuse.runtime import pooling

# empty partitions, lengths 0 / 1, one long partition spanning several BLOCK_N tiles, B not a multiple of PARTS
LENGTHS = [3, 0, 1, 0, 2, 41, 1, 1, 4, 0, 5, 1, 2, 0, 9, 1, 3]
FLAT = {"PARTS": 4, "BLOCK_N": 8, "BLOCK_D": 8, "TAIL_N": 8}  # D = 13: two column blocks, one masked
CUDA = torch.device("cuda")  # only its type is read


def _offsets(lengths, start=0, dtype=torch.int64):
    return (torch.tensor([0, *lengths]).cumsum(0) + start).to(dtype)


def _reference_grad(grad, offsets, rows):
    expected = torch.zeros(rows, grad.shape[1], dtype=torch.float64)
    bounds = offsets.tolist()
    for b, (start, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        expected[start:end] = grad[b].double() / max(end - start, 1)
    return expected


@pytest.mark.parametrize("offsets_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_flat_backward_matches_float64_and_zeroes_rows_outside_the_partitions(dtype, offsets_dtype):
    generator = torch.Generator().manual_seed(5)
    offsets = _offsets(LENGTHS, start=2, dtype=offsets_dtype)  # rows 0-1 and the last 3 belong to no partition
    rows = int(offsets[-1]) + 3
    grad = torch.randn(len(LENGTHS), 13, generator=generator).to(dtype)
    grad_values = pooling._flat_backward(grad, offsets, rows, FLAT)
    assert grad_values.dtype == dtype and grad_values.shape == (rows, 13)
    torch.testing.assert_close(grad_values.double(), _reference_grad(grad, offsets, rows), **_tolerance(dtype))
    assert not grad_values[:2].any() and not grad_values[-3:].any()


def _tolerance(dtype):
    return {"rtol": 1e-6, "atol": 1e-7} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}


def test_the_flat_backward_is_what_design_flat_runs_and_equals_the_short_one(monkeypatch):
    calls = []
    original = pooling._flat_backward
    monkeypatch.setattr(pooling, "_flat_backward", lambda *a: calls.append(a[-1]) or original(*a))
    offsets = _offsets(LENGTHS)
    grad = torch.randn(len(LENGTHS), 13)
    flat = pooling.partitioned_mean_backward(grad, offsets, int(offsets[-1]), design="flat")
    assert len(calls) == 1
    short = pooling.partitioned_mean_backward(grad, offsets, int(offsets[-1]), design="short")
    assert torch.equal(flat, short)  # the same division in fp32, the same rounding


def test_the_span_forward_splits_fp32_into_three_exact_bf16_parts():
    """Rows spread over 40 orders of magnitude: with the third part left out this misses by 8e-4 relative (checked);
    the three parts add each row as fp32 does."""
    assert embedding_pool._span_dot(torch.float32)["SPLIT"]
    generator = torch.Generator().manual_seed(7)
    offsets = _offsets(LENGTHS)
    scale = torch.logspace(-20, 20, 13, dtype=torch.float64).float()
    values = torch.randn(int(offsets[-1]), 13, generator=generator) * scale
    out = pooling.partitioned_mean_forward(values, offsets, design="span")
    bounds = offsets.tolist()
    exact = torch.stack(
        [values[s:e].double().sum(0) / max(e - s, 1) for s, e in zip(bounds[:-1], bounds[1:], strict=True)]
    )
    torch.testing.assert_close(out.double(), exact, rtol=1e-6, atol=0)


def test_an_unknown_design_is_refused_with_the_designs_named():
    offsets = _offsets([2, 1])
    with pytest.raises(ValueError, match="'flat'"):
        pooling.partitioned_mean_forward(torch.randn(3, 4), offsets, design="flat")  # a backward design
    with pytest.raises(ValueError, match="short"):
        pooling.partitioned_mean_backward(torch.randn(2, 4), offsets, 3, design="tile")


@pytest.mark.parametrize(
    ("partitions", "rows", "width", "parts", "block_n", "block_d"),
    [
        (262144, 262144 * 16, 16, 32, 128, 16),  # L 16: 32 partitions of about 16 rows, 512 rows a program
        (262144, 262144 * 200, 16, 4, 128, 16),  # L 200: 512 / 200 rounded up to a power of two
        (262144, 262144, 64, 64, 32, 64),  # L 1: the most, 64
        (16384, 16384 * 16, 16, 8, 128, 16),  # 2048 programs: halved from 32 to 8
        (64, 64 * 4, 1024, 2, 16, 256),  # wide rows: 4 column blocks, BLOCK_N at its least
    ],
)
def test_the_flat_launch_follows_the_shape(partitions, rows, width, parts, block_n, block_d):
    config = pooling.flat_config(partitions, rows, width, torch.float32, CUDA)
    assert (config["PARTS"], config["BLOCK_N"], config["BLOCK_D"]) == (parts, block_n, block_d)
    assert config["num_warps"] == 4


@pytest.mark.parametrize(
    ("partitions", "mean_length", "width", "dtype", "flat"),
    [
        (262144, 4, 64, torch.bfloat16, True),  # the H200 grid: 0.40x of the short design's backward
        (16384, 16, 128, torch.bfloat16, True),  # 0.60x
        (16384, 16, 16, torch.float32, True),  # D 16 from L 16: 0.88x
        (262144, 200, 16, torch.bfloat16, True),  # 0.81x
        (262144, 16, 16, torch.bfloat16, False),  # 64 partitions a program at D 16: 2.2x slower
        (16384, 1, 64, torch.bfloat16, False),  # 8 rows a program, a 32-row tile: 1.35x slower
        (1024, 200, 64, torch.bfloat16, False),  # 512 programs: 1.64x slower
        (262144, 4, 128, torch.float32, False),  # fp32 past D 64: mixed
        (16384, 300, 16, torch.bfloat16, False),  # past NARROW_MEAN_LENGTH: not measured
    ],
)
def test_the_flat_backward_rule_takes_the_cells_it_measured_faster(partitions, mean_length, width, dtype, flat):
    assert pooling.flat_backward_wins(partitions, partitions * mean_length, width, dtype) == flat


def test_the_backward_rule_runs_the_flat_design_where_it_wins(monkeypatch):
    calls = []
    monkeypatch.setattr(pooling, "_flat_backward", lambda grad, offsets, rows, config: calls.append(config) or "flat")
    partitions, mean_length = 16384, 16
    offsets = torch.arange(partitions + 1) * mean_length
    grad = torch.empty(partitions, 128, dtype=torch.bfloat16)
    assert pooling.partitioned_mean_backward(grad, offsets, partitions * mean_length) == "flat"
    assert calls == [pooling.flat_config(partitions, partitions * mean_length, 128, torch.bfloat16, grad.device)]


@pytest.mark.parametrize(
    ("partitions", "mean_length", "dtype", "span"),
    [
        (16384, 200, torch.bfloat16, True),  # narrow rows past the short mean length: span 0.72-0.98x of the tile's
        (1024, 200, torch.bfloat16, False),  # 2.4x slower at B 1,024
        (16384, 200, torch.float32, False),  # fp32: 3.1x slower
        (16384, 300, torch.bfloat16, False),  # past NARROW_MEAN_LENGTH
    ],
)
def test_narrow_long_bf16_forwards_take_span_from_many_partitions(partitions, mean_length, dtype, span):
    values = torch.empty(0, 16, dtype=dtype)
    config = pooling._span_forward_config(partitions, partitions * mean_length, 16, values)
    assert (config is not None and config["kernel"] == "span") == span
