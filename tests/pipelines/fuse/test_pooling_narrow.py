"""The narrow forward (interpreter) against float64, forced by name, its launch from the shape; and the fp32 span
forward's bounds (the one H200 grid cell where span beat the short design)."""

import pytest
import torch

from pipelines.fuse.runtime import pooling
from pipelines.fuse.runtime import pooling_narrow_kernels

# empty partitions (runs of them too), lengths 0 / 1, one long partition (41 rows: the loop's longest run, not a
# multiple of UNROLL), B = 17: not a multiple of LANES x K, so the last program has lane rows and partitions past B
LENGTHS = [3, 0, 1, 0, 2, 41, 1, 1, 4, 0, 0, 0, 5, 1, 2, 9, 3]
CUDA = torch.device("cuda")  # only its type is read


def _offsets(lengths, start=0, dtype=torch.int64):
    return (torch.tensor([0, *lengths]).cumsum(0) + start).to(dtype)


def _reference(values, offsets):
    bounds = offsets.tolist()
    return torch.stack(
        [values[s:e].double().sum(0) / max(e - s, 1) for s, e in zip(bounds[:-1], bounds[1:], strict=True)]
    )


def _config(k):  # D = 13: two column blocks of 8, the second half masked
    return {"LANES": 2, "K": k, "BLOCK_D": 8, "UNROLL": 2}


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("offsets_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_narrow_forward_matches_float64_and_never_reads_rows_outside_the_partitions(dtype, offsets_dtype, k):
    generator = torch.Generator().manual_seed(11)
    offsets = _offsets(LENGTHS, start=2, dtype=offsets_dtype)  # rows 0-1 and the last 3 belong to no partition
    values = torch.randn(int(offsets[-1]) + 3, 13, generator=generator).to(dtype)
    values[:2] = values[-3:] = float("nan")  # read by mistake, they would poison a mean
    out = pooling._narrow_forward(values, offsets, _config(k))
    assert out.dtype == dtype and out.shape == (len(LENGTHS), 13)
    tolerance = {"rtol": 1e-6, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}
    torch.testing.assert_close(out.double(), _reference(values, offsets), **tolerance)
    empty = torch.tensor(LENGTHS) == 0
    assert not out[empty].any()  # the mean of no rows: zeros, as the other designs give


@pytest.mark.parametrize("k", [1, 2, 4])
def test_the_narrow_forward_adds_each_partition_as_the_short_design_does(k):
    # fp32, rows in the same order, one fp32 division: the same bits (CAP past the longest partition: no tail loop)
    generator = torch.Generator().manual_seed(12)
    offsets = _offsets(LENGTHS)
    values = torch.randn(int(offsets[-1]), 13, generator=generator)
    short = pooling._short_forward(values, offsets, {"PARTS": 4, "BLOCK_D": 8, "UNROLL": 2, "CAP": 64, "TAIL_N": 4})
    assert torch.equal(pooling._narrow_forward(values, offsets, _config(k)), short)


@pytest.fixture
def narrow_calls(monkeypatch):
    calls = []
    original = pooling._narrow_forward
    monkeypatch.setattr(pooling, "_narrow_forward", lambda *a: calls.append(a[-1]) or original(*a))
    return calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_design_narrow_is_forced_by_name_at_any_shape(dtype, narrow_calls):
    generator = torch.Generator().manual_seed(13)
    for lengths in (LENGTHS, [300, 0, 2], [0, 0, 5, 0]):  # short, long (past SHORT_MEAN_LENGTH), mostly empty
        offsets = _offsets(lengths, dtype=torch.int32)
        values = torch.randn(int(offsets[-1]), 20, generator=generator).to(dtype)
        out = pooling.partitioned_mean_forward(values, offsets, design="narrow")
        tolerance = {} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}
        torch.testing.assert_close(out.double(), _reference(values, offsets), **tolerance)
    n = int(_offsets(LENGTHS)[-1])
    assert narrow_calls[0] == pooling.narrow_config(len(LENGTHS), n, 20, dtype, torch.device("cpu"))
    assert [config["K"] for config in narrow_calls] == [4, 1, 4]  # mean length 4.3, 100.7, 1.25
    assert pooling.partitioned_mean_forward(torch.randn(0, 4), _offsets([0, 0]), design="narrow").eq(0).all()


def test_the_rule_does_not_take_the_narrow_design_yet(narrow_calls):
    for lengths in (LENGTHS, [40] * 70):
        offsets = _offsets(lengths)
        pooling.partitioned_mean_forward(torch.randn(int(offsets[-1]), 16), offsets)
    assert narrow_calls == []


@pytest.mark.parametrize(
    ("partitions", "mean_length", "width", "narrow"),
    [
        (262144, 16, 16, True),  # the cells segment_reduce still won on the H200
        (16384, 16, 16, True),
        (16384, 8, 16, True),  # the bounds' corners
        (16384, 32, 8, True),
        (8192, 16, 16, False),  # too few partitions
        (16384, 4, 16, False),  # L 4: the short design won there
        (16384, 33, 16, False),  # past the short mean length
        (262144, 16, 17, False),  # wider than NARROW_FORWARD_MAX_WIDTH
    ],
)
def test_the_proposed_narrow_rule_once_switched_on(partitions, mean_length, width, narrow, monkeypatch):
    assert not pooling.narrow_forward_wins(partitions, partitions * mean_length, width, torch.float32)  # off
    monkeypatch.setattr(pooling, "NARROW_FORWARD", True)
    for dtype in (torch.float32, torch.bfloat16):
        assert pooling.narrow_forward_wins(partitions, partitions * mean_length, width, dtype) == narrow


def test_switched_on_the_rule_runs_the_narrow_forward_before_span_and_short(narrow_calls, monkeypatch):
    monkeypatch.setattr(pooling, "NARROW_FORWARD", True)
    monkeypatch.setattr(pooling, "NARROW_FORWARD_MIN_PARTITIONS", 64)  # a small shape for the interpreter
    generator = torch.Generator().manual_seed(14)
    offsets = _offsets(torch.randint(0, 33, (64,), generator=generator).tolist())
    values = torch.randn(int(offsets[-1]), 16, generator=generator).to(torch.bfloat16)  # bf16 L 16: span's cell
    out = pooling.partitioned_mean_forward(values, offsets)
    assert len(narrow_calls) == 1
    torch.testing.assert_close(out.double(), _reference(values, offsets), rtol=1e-2, atol=1e-2)


def test_unknown_designs_are_refused_and_narrow_is_a_forward_design_only():
    offsets = _offsets([2, 1])
    with pytest.raises(ValueError, match="'narrower'"):
        pooling.partitioned_mean_forward(torch.randn(3, 4), offsets, design="narrower")
    with pytest.raises(ValueError, match="'narrow'"):
        pooling.partitioned_mean_backward(torch.randn(2, 4), offsets, 3, design="narrow")


@pytest.mark.parametrize(
    ("partitions", "mean_length", "width", "dtype", "lanes", "k", "unroll", "warps"),
    [
        (262144, 16, 16, torch.float32, 32, 4, 8, 4),  # 32 lane rows of 4 partitions, 16 bytes a thread
        (262144, 16, 16, torch.bfloat16, 32, 4, 8, 2),
        (262144, 4, 16, torch.float32, 32, 4, 8, 4),  # runs of 16 rows, 2 steps of 8
        (262144, 1, 16, torch.float32, 32, 4, 2, 4),
        (262144, 32, 16, torch.float32, 32, 2, 8, 4),  # runs of about 64 rows
        (262144, 200, 16, torch.float32, 32, 1, 8, 4),
        (16384, 16, 16, torch.float32, 8, 1, 8, 1),  # few partitions: K 1, then one warp of lane rows
        (16384, 16, 16, torch.bfloat16, 16, 1, 8, 1),  # a warp holds 16 lane rows of bf16
        (16384, 4, 16, torch.float32, 8, 1, 2, 1),
    ],
)
def test_the_narrow_launch_follows_the_shape(partitions, mean_length, width, dtype, lanes, k, unroll, warps):
    config = pooling.narrow_config(partitions, partitions * mean_length, width, dtype, CUDA)
    assert config == {"LANES": lanes, "K": k, "BLOCK_D": width, "UNROLL": unroll, "num_warps": warps}


def test_wide_rows_split_over_column_blocks_of_the_narrow_launch():
    config = pooling.narrow_config(262144, 262144 * 16, 1024, torch.float32, CUDA)
    assert (config["BLOCK_D"], config["LANES"], config["num_warps"]) == (64, 8, 4)


def test_cuda_narrow_launch_names_every_kernel_argument():
    # inside a graph the launch names every constexpr: a missing one fails only on a GPU
    config = pooling.narrow_config(262144, 16 * 262144, 16, torch.float32, CUDA)
    assert set(pooling_narrow_kernels.narrow_mean_fwd_kernel.arg_names[5:]) == set(config) - {"num_warps"}


@pytest.mark.parametrize(
    ("partitions", "mean_length", "width", "span"),
    [
        (262144, 16, 64, True),  # the H200 grid: span 0.301 ms, the short design 0.368
        (65536, 8, 64, True),  # the bounds' corner
        (262144, 32, 32, True),
        (262144, 4, 64, False),  # L 4: the short design 0.129, span 0.147
        (16384, 16, 64, False),  # 0.0258 against 0.0259
        (262144, 16, 16, False),  # D 16: 0.127 against 0.267
        (262144, 16, 128, False),  # D 128: 0.549 against 0.596
        (262144, 40, 64, False),  # past SHORT_MEAN_LENGTH: the tile kernel as before
    ],
)
def test_fp32_forwards_take_span_only_where_the_grid_measured_it_faster(partitions, mean_length, width, span):
    values = torch.empty(0, width)
    config = pooling._span_forward_config(partitions, partitions * mean_length, width, values)
    assert (config is not None and config["kernel"] == "span") == span
