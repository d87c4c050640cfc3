"""The Triton pooling kernels (interpreter) against the PyTorch definition, forward and backward."""

import os
import subprocess
import sys

import pytest
import torch

from pipelines.fuse.runtime import pooling

CASES = {
    "mixed_with_empty": [3, 0, 5, 1, 0],
    "all_empty": [0, 0, 0],
    "huge_among_tiny": [1, 0, 2] * 4 + [300] + [1, 0],
    "single_partition": [37],
}


def _offsets(lengths):
    return torch.cat([torch.zeros(1, dtype=torch.int64), torch.tensor(lengths).cumsum(0)])


def _reference_grad(grad, offsets, rows):
    lengths = offsets[1:] - offsets[:-1]
    scaled = grad.double() / lengths.clamp(min=1).double().unsqueeze(1)
    return torch.repeat_interleave(scaled, lengths, dim=0, output_size=rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", CASES)
def test_forward_and_backward_match_the_definition(case, dtype):
    offsets = _offsets(CASES[case])
    values = torch.randn(int(offsets[-1]), 6, dtype=dtype, requires_grad=True)
    out = pooling.partitioned_mean(values, offsets)
    expected = pooling.partitioned_mean_reference(values.detach().double(), offsets)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert out.dtype == dtype and out.shape == (len(CASES[case]), 6)
    torch.testing.assert_close(out.double(), expected, rtol=tol, atol=tol)
    grad = torch.randn_like(out)
    out.backward(grad)
    torch.testing.assert_close(
        values.grad.double(), _reference_grad(grad, offsets, values.shape[0]), rtol=tol, atol=tol
    )


@pytest.mark.parametrize(
    ("offsets", "message"),
    [
        ([0, 5, 3, 10], r"offsets must not decrease: offsets\[1\]=5 > offsets\[2\]=3"),
        ([0, 3, 11], r"offsets must end at N=10 \(values' rows\), got offsets\[-1\]=11"),
        ([0, 3, 9], r"offsets must end at N=10 \(values' rows\), got offsets\[-1\]=9"),
        ([-1, 3, 10], r"offsets must start at 0, got offsets\[0\]=-1"),
        ([2, 3, 10], r"offsets must start at 0, got offsets\[0\]=2"),
    ],
)
def test_offsets_that_do_not_cover_the_values_rows_in_order_are_refused_with_the_reason(offsets, message):
    with pytest.raises(ValueError, match=message):
        pooling.partitioned_mean(torch.randn(10, 4), torch.tensor(offsets))
    with pytest.raises(ValueError, match=message):
        pooling.grouped_partitioned_mean([torch.randn(10, 4)], [torch.tensor(offsets)])


def test_offsets_of_a_floating_dtype_are_refused():
    with pytest.raises(RuntimeError, match="offsets must be an integer tensor, got torch.float32"):
        pooling.partitioned_mean(torch.randn(10, 4), torch.tensor([0.0, 3.0, 10.0]))


def test_offsets_that_are_not_1d_are_refused():
    with pytest.raises(RuntimeError, match=r"offsets must be 1-D \[B\+1\] with B >= 0, got shape \(2, 2\)"):
        pooling.partitioned_mean(torch.randn(10, 4), torch.tensor([[0, 3], [3, 10]]))


def test_the_op_the_pass_calls_keeps_rows_outside_the_offsets_but_refuses_reads_past_the_values():
    values = torch.randn(10, 4)
    out = pooling.partitioned_mean_op(values, torch.tensor([2, 5, 7]))  # a loop over slices may skip rows
    torch.testing.assert_close(out, torch.stack([values[2:5].mean(0), values[5:7].mean(0)]))
    with pytest.raises(ValueError, match=r"offsets must lie within \[0, N=10\]"):
        pooling.partitioned_mean_op(values, torch.tensor([0, 3, 11]))


@pytest.mark.parametrize(("rows", "offsets"), [(0, [0]), (0, [0, 0, 0]), (0, [0, 0])])
def test_an_empty_batch_gives_zeros_that_still_carry_a_grad_fn(rows, offsets):
    values = torch.randn(rows, 6, requires_grad=True)
    out = pooling.partitioned_mean(values, torch.tensor(offsets))
    assert out.shape == (len(offsets) - 1, 6) and out.abs().sum() == 0
    assert out.grad_fn is not None
    out.sum().backward()
    assert values.grad.shape == (rows, 6)
    assert pooling.partitioned_mean(values.detach(), torch.tensor(offsets)).grad_fn is None


def test_fp16_values_run_and_come_back_in_fp16():
    offsets = _offsets([3, 0, 2])
    values = torch.randn(5, 4, dtype=torch.float16)
    out = pooling.partitioned_mean(values, offsets)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, pooling.partitioned_mean_reference(values.float(), offsets).half())


def test_empty_partitions_give_zeros_not_nan():
    offsets = _offsets([0, 4, 0])
    out = pooling.partitioned_mean(torch.randn(4, 3), offsets)
    assert not out.isnan().any()
    assert out[0].abs().sum() == 0 and out[2].abs().sum() == 0 and out[1].abs().sum() > 0


def test_rows_outside_the_partitions_get_zero_gradient():
    offsets = torch.tensor([2, 5, 7])  # rows 0-1 and 7-9 belong to no partition
    values = torch.randn(10, 4, requires_grad=True)
    pooling.partitioned_mean_op(values, offsets).sum().backward()  # the op the pass calls
    assert values.grad[:2].abs().sum() == 0 and values.grad[7:].abs().sum() == 0
    torch.testing.assert_close(values.grad[2:5], torch.full((3, 4), 1 / 3))


def test_grouped_form_pools_features_of_different_widths_in_one_call():
    values = [torch.randn(10, 4, requires_grad=True), torch.randn(40, 3, requires_grad=True), torch.randn(5, 8)]
    offsets = [_offsets([4, 0, 6]), _offsets([1, 38, 1]), _offsets([5])]
    outs = pooling.grouped_partitioned_mean(values, offsets)
    for v, o, out in zip(values, offsets, outs, strict=False):
        torch.testing.assert_close(out.double(), pooling.partitioned_mean_reference(v.detach().double(), o))
    (outs[0].sum() + 2 * outs[1].sum()).backward()
    torch.testing.assert_close(values[1].grad.double(), 2 * _reference_grad(torch.ones(3, 3), offsets[1], 40))
    torch.testing.assert_close(values[0].grad[:4], torch.full((4, 4), 0.25))


def test_custom_op_passes_torch_library_opcheck():
    offsets = _offsets([2, 0, 3])
    values = torch.randn(5, 4, requires_grad=True)
    torch.library.opcheck(pooling.partitioned_mean_op, (values, offsets), test_utils=("test_schema", "test_faketensor"))


@pytest.mark.parametrize(
    ("rows_per_program", "unroll", "dtype"),
    [(4, 1, torch.float32), (8, 1, torch.float32), (64, 1, torch.float32), (8, 2, torch.float32)]
    + [(64, 3, torch.float32), (8, 1, torch.bfloat16), (64, 2, torch.bfloat16)],
)
def test_every_split_of_long_partitions_gives_the_same_mean_and_leaves_counters_zero(rows_per_program, unroll, dtype):
    generator = torch.Generator().manual_seed(rows_per_program)
    lengths = torch.randint(0, 12, (40,), generator=generator)
    lengths[7], lengths[31] = 97, 45  # long partitions spread over many programs
    offsets = _offsets(lengths.tolist()) + 3  # rows 0-2 belong to no partition
    values = torch.randn(int(offsets[-1]) + 5, 8, generator=generator).to(dtype)
    pairs = dtype == torch.bfloat16  # bf16 rows read as 32-bit words
    config = {"R": rows_per_program, "BLOCK_N": 4, "BLOCK_D": 8, "UNROLL": unroll, "LOOP_STAGES": 2, "PAIRS": pairs}
    counters = torch.zeros(len(lengths), dtype=torch.int32)
    for _ in range(2):  # the second launch relies on the first leaving the counters zero
        out = pooling.partitioned_mean_forward(values, offsets, config, counters=counters)
        expected_out = pooling.partitioned_mean_reference(values.double(), offsets)
        torch.testing.assert_close(out, expected_out.to(dtype))
        assert counters.abs().sum() == 0
    grad = torch.randn(len(lengths), 8, generator=generator).to(dtype)
    grad_values = pooling.partitioned_mean_backward(grad, offsets, values.shape[0], config)
    expected = torch.zeros(values.shape[0], 8, dtype=torch.float64)
    expected[3 : int(offsets[-1])] = _reference_grad(grad.double(), offsets - 3, int(offsets[-1]) - 3)
    torch.testing.assert_close(grad_values, expected.to(dtype))


def test_pair_reads_asked_for_values_that_do_not_pair_up_read_them_as_they_are():
    # 32-bit words need an even width and a 4-byte aligned start; anything else falls back to bf16 row tiles
    offsets = _offsets([5, 0, 9])
    odd_width = torch.randn(14, 7).to(torch.bfloat16)
    out = pooling.partitioned_mean_forward(odd_width, offsets, {"R": 8, "BLOCK_N": 4, "BLOCK_D": 8, "PAIRS": True})
    torch.testing.assert_close(out, pooling.partitioned_mean_reference(odd_width.double(), offsets).to(torch.bfloat16))
    shifted = torch.randn(14 * 8 + 1).to(torch.bfloat16)[1:].view(14, 8)
    assert not pooling._readable_in_pairs(shifted)
    assert pooling._readable_in_pairs(torch.randn(14 * 8 + 2).to(torch.bfloat16)[2:].view(14, 8))
    assert not pooling._readable_in_pairs(torch.randn(14, 8))


def test_bf16_output_is_written_in_bf16_with_fp32_accumulation():
    offsets = _offsets([300, 2])
    values = torch.full((302, 4), 1.0 + 2**-7, dtype=torch.bfloat16)  # a bf16 sum would drift from the mean
    values[300:] = 3.0
    out = pooling.partitioned_mean_forward(values, offsets, {"R": 64, "BLOCK_N": 4, "BLOCK_D": 4})
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), torch.tensor([[1.0 + 2**-7] * 4, [3.0] * 4]))


@pytest.mark.parametrize("pairs", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("backward", [False, True])
def test_cuda_launch_config_names_every_kernel_argument(dtype, backward, pairs):
    # inside torch.compile the launch goes through wrap_triton, which applies no constexpr defaults: a missing
    # one fails only on a GPU, so the names are checked here
    from pipelines.fuse.runtime import pooling_kernels

    kernel = pooling_kernels.partitioned_mean_bwd_kernel if backward else pooling_kernels.partitioned_mean_fwd_kernel
    positional = 7 if backward else 8  # tensors, sizes and R, passed in order by partitioned_mean_*
    config = pooling.launch_config(205_829, 256, torch.device("cuda"), dtype, backward=backward, pairs=pairs)
    named = {"LOG_B"} | (set(config) - {"R", "num_warps", "num_stages"})
    assert set(kernel.arg_names[positional:]) == named


def test_cuda_bf16_reads_words_only_where_the_values_allow_it():
    cuda = torch.device("cuda")
    assert pooling.launch_config(205_829, 256, cuda, torch.bfloat16, pairs=True)["PAIRS"]
    assert not pooling.launch_config(205_829, 256, cuda, torch.bfloat16, pairs=False)["PAIRS"]
    assert not pooling.launch_config(205_829, 256, cuda, torch.float32, pairs=True)["PAIRS"]


@pytest.mark.slow
def test_interpreter_is_not_reported_on_when_it_was_switched_on_after_triton_was_imported():
    # triton.language's own jit functions are made at import: a late TRITON_INTERPRET=1 would send CPU tensors to
    # kernels built for the GPU, so the registry must see the Triton kernels as unavailable instead
    probe = (
        "import os, triton.language\n"
        "os.environ['TRITON_INTERPRET'] = '1'\n"
        "from pipelines.fuse.runtime import pooling\n"
        "print(pooling.interpreter_active())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    late = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    early = subprocess.run(
        [sys.executable, "-c", probe], env={**env, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, check=True
    )
    assert (late.stdout.strip(), early.stdout.strip()) == ("False", "True")
