"""The short-partition design of the partitioned mean (interpreter) against float64, and the rule that picks it."""

import math

import pytest
import torch

from pipelines.fuse.runtime import pooling
from pipelines.fuse.runtime import pooling_short_kernels

# empty partitions, lengths 0 / 1, one past the block loop's CAP of 4 (summed by the tail loop), B not a multiple
# of PARTS (a partial last block)
LENGTHS = [3, 0, 1, 0, 2, 11, 1, 1, 4, 0, 5, 1, 2, 0, 9, 1, 3]
BLOCK = {"PARTS": 4, "BLOCK_D": 8, "UNROLL": 2, "CAP": 4, "TAIL_N": 4}  # D = 13: two column blocks, one masked
CUDA = torch.device("cuda")  # only its type is read: the rule runs on any host


def _offsets(lengths, start=0, dtype=torch.int64):
    return (torch.tensor([0, *lengths]).cumsum(0) + start).to(dtype)


def _reference(values, offsets, grad):
    """Forward and the values' gradient in float64; rows outside [offsets[0], offsets[-1]) get none."""
    exact = values.detach().double().requires_grad_()
    bounds = offsets.tolist()
    out = torch.stack([exact[s:e].sum(0) / max(e - s, 1) for s, e in zip(bounds[:-1], bounds[1:], strict=True)])
    out.backward(grad.double())
    return out.detach(), exact.grad


@pytest.mark.parametrize("offsets_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_short_kernels_match_float64_with_rows_outside_the_partitions(dtype, offsets_dtype):
    generator = torch.Generator().manual_seed(3)
    offsets = _offsets(LENGTHS, start=2, dtype=offsets_dtype)  # rows 0-1 and the last 3 belong to no partition
    values = torch.randn(int(offsets[-1]) + 3, 13, generator=generator).to(dtype)
    grad = torch.randn(len(LENGTHS), 13, generator=generator).to(dtype)
    expected_out, expected_grad = _reference(values, offsets, grad)
    out = pooling._short_forward(values, offsets, BLOCK)
    grad_values = pooling._short_backward(grad, offsets, values.shape[0], BLOCK)
    tol = 1e-6 if dtype == torch.float32 else 1e-2
    assert out.dtype == dtype and grad_values.dtype == dtype
    torch.testing.assert_close(out.double(), expected_out, rtol=tol, atol=tol)
    torch.testing.assert_close(grad_values.double(), expected_grad, rtol=tol, atol=tol)
    assert grad_values[:2].abs().sum() == 0 and grad_values[-3:].abs().sum() == 0


@pytest.mark.parametrize("lengths", [[1], [0], [0, 0, 0], [1] * 9, [200]], ids=["1x1", "1x0", "empty", "ones", "long"])
def test_the_entry_point_takes_the_rule_and_autograd_through_it(lengths):
    generator = torch.Generator().manual_seed(len(lengths))
    offsets = _offsets(lengths)
    values = torch.randn(int(offsets[-1]), 5, generator=generator, requires_grad=True)
    out = pooling.partitioned_mean(values, offsets)
    grad = torch.randn(out.shape, generator=generator)
    out.backward(grad)
    expected_out, expected_grad = _reference(values, offsets, grad)
    torch.testing.assert_close(out.double(), expected_out)
    torch.testing.assert_close(values.grad.double(), expected_grad)


@pytest.fixture
def short_calls(monkeypatch):
    """The names of the short kernels' entry points, in the order they ran (each still runs)."""
    calls = []
    for name in ("_short_forward", "_short_backward"):
        original = getattr(pooling, name)
        monkeypatch.setattr(pooling, name, lambda *a, _f=original, _n=name: calls.append(_n) or _f(*a))
    return calls


def test_the_pass_op_routes_short_partitions_to_the_short_kernels_and_long_ones_to_the_tile_kernel(short_calls):
    calls = short_calls
    short = torch.randn(12, 4, requires_grad=True)
    pooling.partitioned_mean_op(short, _offsets([3, 0, 1, 8])).sum().backward()  # mean length 3
    assert calls == ["_short_forward", "_short_backward"]
    long = torch.randn(70, 4, requires_grad=True)
    out = pooling.partitioned_mean_op(long, _offsets([70]))  # mean length 70 > SHORT_MEAN_LENGTH
    out.sum().backward()
    assert calls == ["_short_forward", "_short_backward"]
    torch.testing.assert_close(out, long.detach().mean(0, keepdim=True))


@pytest.mark.parametrize("design", ["short", "previous"])
def test_both_designs_can_be_forced_whatever_the_shape(design, monkeypatch):
    calls = []
    original = pooling._short_forward
    monkeypatch.setattr(pooling, "_short_forward", lambda *a: calls.append(1) or original(*a))
    offsets = _offsets([40, 0, 1])  # mean length 13.7: the rule's short design; 40 rows: the tail loop
    values = torch.randn(41, 6)
    out = pooling.partitioned_mean_forward(values, offsets, design=design)
    assert bool(calls) == (design == "short")
    grad = torch.randn(3, 6)
    expected_out, expected_grad = _reference(values, offsets, grad)
    torch.testing.assert_close(out.double(), expected_out)
    grad_values = pooling.partitioned_mean_backward(grad, offsets, 41, design=design)
    torch.testing.assert_close(grad_values.double(), expected_grad)


def test_the_rule_switches_at_the_mean_length_and_derives_the_launch_from_the_shape():
    limit = pooling.SHORT_MEAN_LENGTH
    assert pooling.short_config(1024, 1024 * limit, 64, torch.float32, CUDA) is not None
    assert pooling.short_config(1024, 1024 * limit + 1, 64, torch.float32, CUDA) is None
    assert pooling.short_config(1024, 1024 * 200, 64, torch.float32, CUDA, force=True) is not None
    # many one-row partitions of D = 16: a program takes PARTS of them, one row a step
    many = pooling.short_config(262144, 262144, 16, torch.float32, CUDA)
    assert many == {**many, "PARTS": 64, "BLOCK_D": 16, "UNROLL": 1, "num_warps": 4}
    assert pooling.short_config(262144, 4 * 262144, 16, torch.float32, CUDA)["UNROLL"] == 4
    # few wide partitions: fewer per program, so that the launch still has SHORT_MIN_PROGRAMS programs
    few = pooling.short_config(1024, 1024, 1024, torch.float32, CUDA)
    assert few["BLOCK_D"] == 256 and math.ceil(1024 / few["PARTS"]) * 4 >= pooling.SHORT_MIN_PROGRAMS


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_every_grid_launch_keeps_its_step_in_budget_and_fills_the_gpu(dtype):
    for b in (1, 64, 1024, 16384, 262144):
        for length in (1, 4, 16):
            for d in (16, 64, 100, 128, 256, 1024):
                config = pooling.short_config(b, b * length, d, dtype, CUDA)
                step = config["PARTS"] * config["BLOCK_D"] * config["UNROLL"] * dtype.itemsize
                programs = math.ceil(b / config["PARTS"]) * math.ceil(d / config["BLOCK_D"])
                assert step <= pooling.SHORT_STEP_BYTES, (b, length, d, config)
                assert config["PARTS"] == 1 or programs >= pooling.SHORT_MIN_PROGRAMS, (b, length, d, config)
                sizes = [config[k] for k in ("PARTS", "BLOCK_D", "UNROLL", "TAIL_N", "num_warps")]
                assert all(size & (size - 1) == 0 for size in sizes), config


@pytest.mark.parametrize("backward", [False, True])
def test_cuda_short_launch_names_every_kernel_argument(backward):
    # inside a graph the launch names every constexpr: a missing one fails only on a GPU
    kernel = pooling_short_kernels.short_mean_bwd_kernel if backward else pooling_short_kernels.short_mean_fwd_kernel
    positional = 6 if backward else 5  # tensors and sizes, passed in order by _short_forward / _short_backward
    config = pooling.short_config(16384, 4 * 16384, 64, torch.bfloat16, CUDA)
    assert set(kernel.arg_names[positional:]) == set(config) - {"num_warps"}


def test_the_gpu_scripts_design_check_and_grid_row_run_on_the_interpreter(monkeypatch):
    # what the H200 call runs first: every design against float64, a partition past SHORT_CAP, int32
    # offsets; then one skew cell of the grid with its timing stubbed (the variants it times, the row it writes)
    from benchmarks import pooling_grid_gpu as grid

    monkeypatch.setattr(grid, "DEVICE", "cpu")
    monkeypatch.setattr(grid, "SHORT_CASES", [(5, 2, 12, True, True)])
    monkeypatch.setattr(grid, "ALL_DTYPES", {"bf16": torch.bfloat16})  # fp32 / fp16: the kernel test above
    rows = grid.short_correctness(grid.Clock(60))
    assert [r["dtype"] for r in rows] == ["bf16"] and all(r["ok"] for r in rows), rows
    assert all(r[design]["forward_rel_err"] < 1e-2 for r in rows for design in grid.DESIGNS)
    timed = []
    monkeypatch.setattr(
        grid, "timed_both", lambda call, leaf, label: timed.append(call()) or {"forward_ms": 1.0, "full_ms": 2.0}
    )
    # a skew cell: one partition past SHORT_CAP; every variant timed computes the same mean
    row = grid.grid_row(6, 2, 12, "bf16", "skew", ceiling_gbs=1.0, long_rows=pooling.SHORT_CAP + 40)
    assert row["long_rows"] == pooling.SHORT_CAP + 40 and row["short"] == "same launch as ours"
    assert len(timed) == 7 and all(out.shape == (6, 12) for out in timed)  # ours, previous, flat, narrow, 3 baselines
    for out in timed[1:]:
        torch.testing.assert_close(out.float(), timed[0].float(), rtol=2e-2, atol=2e-2)
    assert "| 6 | 2 | 12 | bf16 | 168 |" in grid.markdown({"device": "cpu", "torch": "", "triton": "", "skew": [row]})


@pytest.mark.parametrize(
    ("dtype", "mean_length", "width", "design"),
    [
        (torch.bfloat16, 4, 128, "span"),  # the H200 grids: tensor-core span forward ahead at L x D = 256
        (torch.bfloat16, 16, 64, "span"),
        (torch.bfloat16, 4, 64, "span"),  # L x D = 256
        (torch.bfloat16, 16, 16, "span"),
        (torch.bfloat16, 4, 16, "short"),  # L x D = 64: the short design ahead
        (torch.bfloat16, 8, 16, "span"),  # 128: between the two, where the threshold sits
        (torch.bfloat16, 2, 128, "short"),  # fewer than 3 rows a partition
        (torch.bfloat16, 1, 1024, "short"),  # one row a partition: nothing for span's products to sum
        (torch.float32, 16, 256, "short"),  # fp32 products are emulated: the short design ahead everywhere
    ],
)
def test_the_forward_rule_keeps_span_where_it_measured_faster(dtype, mean_length, width, design, monkeypatch):
    from pipelines.fuse.runtime import embedding_pool

    calls = []
    monkeypatch.setattr(pooling, "_short_forward", lambda values, offsets, block: calls.append("short"))
    monkeypatch.setattr(
        embedding_pool, "plain_mean_span_forward", lambda values, offsets, config: calls.append(config["kernel"])
    )
    partitions = embedding_pool.FEW_PARTITIONS
    offsets = torch.arange(partitions + 1) * mean_length
    pooling.partitioned_mean_forward(torch.empty(partitions * mean_length, width, dtype=dtype), offsets)
    assert calls == [design]
    calls.clear()
    pooling.partitioned_mean_forward(torch.empty(partitions * mean_length, width, dtype=dtype), offsets, design="short")
    assert calls == ["short"]  # forcing the short design still forces it


@pytest.mark.parametrize(
    ("partitions", "mean_length", "width", "backward_short"),
    [
        (64, 40, 16, True),  # narrow rows past SHORT_MEAN_LENGTH: the backward takes the short design
        (64, 256, 8, True),
        (64, 257, 16, False),  # past NARROW_MEAN_LENGTH
        (64, 40, 17, False),  # wider than NARROW_WIDTH
        (63, 40, 16, False),  # fewer than NARROW_MIN_PARTITIONS
        (64, 32, 16, False),  # within SHORT_MEAN_LENGTH: the short rule itself decides, both passes
    ],
)
def test_the_narrow_rows_rule_bounds(partitions, mean_length, width, backward_short):
    rows = partitions * mean_length
    assert pooling.narrow_rows_take_short(partitions, rows, width, torch.bfloat16, backward=True) == backward_short
    assert pooling.narrow_rows_take_short(partitions, rows, width, torch.float32, backward=False) == backward_short
    assert not pooling.narrow_rows_take_short(partitions, rows, width, torch.bfloat16, backward=False)
    assert not pooling.narrow_rows_take_short(partitions, rows, width, torch.float16, backward=False)


@pytest.mark.parametrize(
    ("dtype", "designs"),
    [(torch.bfloat16, ["_short_backward"]), (torch.float32, ["_short_forward", "_short_backward"])],
)
def test_narrow_rows_take_the_short_backward_and_the_fp32_forward(dtype, designs, short_calls):
    calls = short_calls
    generator = torch.Generator().manual_seed(0)
    lengths = [0, 1, 67, 140] * 16  # 64 partitions, mean length 52: past SHORT_MEAN_LENGTH; one past the CAP
    offsets = _offsets(lengths)
    values = torch.randn(int(offsets[-1]), 5, generator=generator).to(dtype).requires_grad_()
    out = pooling.partitioned_mean(values, offsets)
    grad = torch.randn(out.shape, generator=generator).to(dtype)
    out.backward(grad)
    assert calls == designs
    expected_out, expected_grad = _reference(values, offsets, grad)
    tolerance = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(out.double(), expected_out, **tolerance)
    torch.testing.assert_close(values.grad.double(), expected_grad, **tolerance)
