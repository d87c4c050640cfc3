"""The fused gather + mean pool (interpreter) against nn.EmbeddingBag(mode="mean") in float64, forward and backward."""

import json

import pytest
import torch
import torch.nn.functional as F

from pipelines.fuse.runtime import embedding_partitioned_mean
from pipelines.fuse.runtime import embedding_pool

VOCAB, WIDTH = 40, 20
LENGTHS = [3, 0, 5, 1, 0, 2, 7, 1, 1, 4] * 4  # empty partitions, a span that crosses programs
SPAN = {"kernel": "span", "PARTS": 16, "BLOCK_N": 16, "BLOCK_D": 16}  # two column blocks, several row steps
LOOP = {"kernel": "loop", "BLOCK_N": 4, "BLOCK_D": 16}


def _batch(lengths, id_dtype=torch.int64, vocab=VOCAB, seed=0):
    generator = torch.Generator().manual_seed(seed)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.tensor(lengths, dtype=torch.int64).cumsum(0)])
    ids = torch.randint(0, vocab, (int(offsets[-1]),), generator=generator)
    return ids.to(id_dtype), offsets.to(id_dtype)


def _reference(table, ids, offsets, grad):
    """EmbeddingBag's forward and table gradient in float64."""
    exact = table.detach().double().requires_grad_()
    out = F.embedding_bag(ids.long(), exact, offsets[:-1].long(), mode="mean")
    out.backward(grad.double())
    return out.detach(), exact.grad


def _run(table, ids, offsets, config=None):
    out = embedding_pool.EmbeddingPartitionedMean.apply(table, ids, offsets, config)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out.dtype)
    out.backward(grad)
    return out, table.grad, grad


def _assert_matches(table, ids, offsets, config=None, tol=1e-6):
    out, grad_table, grad = _run(table, ids, offsets, config)
    expected_out, expected_grad = _reference(table, ids, offsets, grad)
    assert out.dtype == table.dtype and grad_table.dtype == table.dtype
    torch.testing.assert_close(out.double(), expected_out, rtol=tol, atol=tol)
    torch.testing.assert_close(grad_table.double(), expected_grad, rtol=tol, atol=tol)


@pytest.mark.parametrize("id_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("config", [SPAN, LOOP], ids=["span", "loop"])
def test_fp32_forward_and_backward_match_embedding_bag(config, id_dtype):
    table = torch.randn(VOCAB, WIDTH, requires_grad=True)
    _assert_matches(table, *_batch(LENGTHS, id_dtype), config)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_tables_come_back_in_their_dtype_with_fp32_accumulation(dtype):
    table = torch.randn(VOCAB, WIDTH).to(dtype).requires_grad_()
    _assert_matches(table, *_batch(LENGTHS), tol=1e-2)


def test_every_launch_the_bucket_table_holds_runs_correctly():
    configs = {json.dumps(c, sort_keys=True) for c in embedding_pool.load_launch_table().values()}
    assert {json.loads(c)["kernel"] for c in configs} == {"span", "loop"}
    ids, offsets = _batch([1, 3, 0, 2] * 8 + [40])
    for config in map(json.loads, sorted(configs)):
        config.pop("num_warps", None)
        config["BLOCK_D"] = min(config["BLOCK_D"], 32)
        table = torch.randn(VOCAB, WIDTH, requires_grad=True)
        _assert_matches(table, ids, offsets, config)


def test_repeated_ids_accumulate_their_gradient():
    table = torch.zeros(5, 3, requires_grad=True)
    ids = torch.tensor([2, 2, 2, 4, 2])
    offsets = torch.tensor([0, 3, 5])  # partition 0: id 2 three times; partition 1: ids 4 and 2
    out = embedding_partitioned_mean(table, ids, offsets)
    out.backward(torch.tensor([[3.0, 3.0, 3.0], [1.0, 2.0, 4.0]]))
    expected = torch.zeros(5, 3)
    expected[2] = torch.tensor([3.0, 3.0, 3.0]) + torch.tensor([0.5, 1.0, 2.0])
    expected[4] = torch.tensor([0.5, 1.0, 2.0])
    torch.testing.assert_close(table.grad, expected)


def test_empty_partitions_and_an_empty_batch_give_zeros_that_carry_a_grad_fn():
    table = torch.randn(VOCAB, WIDTH, requires_grad=True)
    out = embedding_partitioned_mean(table, *_batch([0, 2, 0]))
    assert torch.equal(out[0], torch.zeros(WIDTH)) and torch.equal(out[2], torch.zeros(WIDTH))
    empty = embedding_partitioned_mean(table, torch.zeros(0, dtype=torch.int64), torch.zeros(4, dtype=torch.int64))
    assert torch.equal(empty, torch.zeros(3, WIDTH)) and empty.grad_fn is not None
    empty.sum().backward()
    assert torch.equal(table.grad, torch.zeros(VOCAB, WIDTH))


def test_deterministic_mode_gives_the_same_gradient_bit_for_bit_run_after_run():
    ids, offsets = _batch(LENGTHS, vocab=6)  # few ids: many collisions
    grad = torch.randn(len(LENGTHS), WIDTH, dtype=torch.float64).float()
    atomic = embedding_pool.embedding_mean_backward(grad, ids, offsets, 6, torch.float32, SPAN)
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        runs = [embedding_pool.embedding_mean_backward(grad, ids, offsets, 6, torch.float32) for _ in range(2)]
    finally:
        torch.use_deterministic_algorithms(before)
    assert torch.equal(runs[0], runs[1])
    torch.testing.assert_close(runs[0], atomic, rtol=1e-6, atol=1e-6)


def test_short_partitions_take_the_span_design_and_long_ones_the_loop():
    short = embedding_pool.launch_config(65536, 65536 * 4, 64, torch.float32, torch.device("cpu"))
    long = embedding_pool.launch_config(1024, 1024 * 200, 128, torch.bfloat16, torch.device("cpu"))
    assert embedding_pool.launch_bucket(65536, 65536 * 4, 64, torch.float32) == "Blarge/L8/D64/fp32"
    assert short["kernel"] == "span" and short["PARTS"] >= 16
    assert long["kernel"] == "loop"


def test_the_launch_file_overrides_the_rule_per_bucket(tmp_path):
    path = tmp_path / "launch.json"
    measured = {"kernel": "loop", "BLOCK_N": 16, "BLOCK_D": 64, "num_warps": 8}
    path.write_text(json.dumps({"buckets": {"Blarge/L8/D64/fp32": measured}}))
    table = embedding_pool.load_launch_table(path)
    assert table["Blarge/L8/D64/fp32"] == measured
    assert table["Blarge/L2/D64/fp32"] == embedding_pool.rule_config("Blarge/L2/D64/fp32")


@pytest.mark.parametrize(
    ("ids", "offsets", "error", "message"),
    [
        ([1, 2, 3], [0, 2, 1, 3], ValueError, r"offsets must not decrease: offsets\[1\]=2 > offsets\[2\]=1"),
        ([1, 2, 3], [1, 3], ValueError, r"offsets must start at 0, got offsets\[0\]=1"),
        ([1, 2, 3], [0, 2], ValueError, r"offsets must end at N=3 \(the number of ids\), got offsets\[-1\]=2"),
        ([1, 2, 3], [[0, 3]], ValueError, r"offsets must be 1-D \[B\+1\] with B >= 0, got shape \(1, 2\)"),
        ([[1, 2, 3]], [0, 3], ValueError, r"ids must be 1-D \[N\], got shape \(1, 3\)"),
        ([1.0, 2.0], [0, 2], TypeError, r"ids must be int32 or int64, got torch.float32"),
        ([1, 2], [0.0, 2.0], TypeError, r"offsets must be int32 or int64, got torch.float32"),
    ],
)
def test_bad_ids_or_offsets_are_refused_with_the_reason(ids, offsets, error, message):
    with pytest.raises(error, match=message):
        embedding_partitioned_mean(torch.randn(VOCAB, 4), torch.tensor(ids), torch.tensor(offsets))


def test_bad_tables_are_refused_and_ids_are_range_checked_on_request():
    ids, offsets = torch.tensor([1, 2]), torch.tensor([0, 2])
    with pytest.raises(TypeError, match="table dtype torch.float64 is not fp32/bf16/fp16"):
        embedding_partitioned_mean(torch.randn(VOCAB, 4, dtype=torch.float64), ids, offsets)
    with pytest.raises(ValueError, match=r"table must be \[V, D\], got shape \(40,\)"):
        embedding_partitioned_mean(torch.randn(VOCAB), ids, offsets)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, V=40\), got 1..40"):
        embedding_partitioned_mean(torch.randn(VOCAB, 4), torch.tensor([1, 40]), offsets, check_ids=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_many_short_partitions_of_the_plain_partitioned_mean_take_the_span_kernel_in_the_previous_launch(dtype):
    # the rule now takes the short design there (test_pooling_short.py); short=False is the launch before it
    from pipelines.fuse.runtime import pooling

    partitions = embedding_pool.FEW_PARTITIONS
    lengths = torch.randint(0, 5, (partitions,), generator=torch.Generator().manual_seed(2))
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    values = torch.randn(int(offsets[-1]), 6).to(dtype)
    assert pooling._span_config(partitions, values.shape[0], 6, values)["kernel"] == "span"
    expected = F.embedding_bag(
        torch.arange(values.shape[0]), values.double(), offsets, mode="mean", include_last_offset=True
    )
    tol = 1e-6 if dtype == torch.float32 else 1e-2
    previous = pooling.partitioned_mean_forward(values, offsets, design="previous")
    torch.testing.assert_close(previous.double(), expected, rtol=tol, atol=tol)
