"""Masked means over padded rows: the padded kernel (interpreter) against float64, its eager entry's checks, its
launch rule, and the pass replacing both padded forms in compiled encoders with the eager forward and gradients."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from pipelines.fuse.runtime import compile as fuse_compile
from pipelines.fuse.runtime import padded
from pipelines.fuse.runtime import padded_masked_mean
from pipelines.fuse.runtime.padding import pad_partitions

# a zero length, one past L (the mask keeps every row), a negative one (keeps none), L itself
LENGTHS = torch.tensor([3, 0, 7, 1, 9, -2, 4])
SPLIT = {"PARTS": 2, "BLOCK_D": 4, "UNROLL": 2, "SPLIT": 3, "CHUNK": 3}  # D = 5: two column blocks, 3 L chunks


def _reference(x, lengths, mode, grad):
    """The user's mask / product / sum / division in float64, and x's gradient through it."""
    exact = x.detach().double().requires_grad_()
    out = padded.padded_masked_mean_reference(exact, lengths, mode)
    out.backward(grad.double())
    return out.detach(), exact.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_padded_kernels_match_the_users_masked_mean_in_every_mode(dtype):
    generator = torch.Generator().manual_seed(5)
    # non-contiguous batch rows (a slice of a wider pad): the kernel reads x's strides
    x = torch.randn(7, 9, 5, generator=generator).to(dtype)[:, :7]
    grad = torch.randn(7, 5, generator=generator).to(dtype)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for mode in padded.MODES.values():
        expected, expected_grad = _reference(x, LENGTHS, mode, grad)
        for config in (None, SPLIT):  # the rule's launch, then the L axis split over programs
            out = padded.padded_masked_mean_forward(x, LENGTHS, mode, config=config)
            assert out.dtype == dtype
            torch.testing.assert_close(out.double(), expected, rtol=tol, atol=tol, equal_nan=True)
        grad_x = padded.padded_masked_mean_backward(grad, LENGTHS, mode, 7, dtype, config={"ROWS": 4, "BLOCK_D": 4})
        assert grad_x.dtype == dtype and grad_x.shape == x.shape
        torch.testing.assert_close(grad_x.double(), expected_grad, rtol=tol, atol=tol, equal_nan=True)
        assert grad_x[0, 3:].abs().sum() == 0 and grad_x[5].abs().sum() == 0  # rows past a length: zeros
    # raw counts: 0 / 0 is NaN in the output, and NaN on every row of x's gradient there (grad / 0 * mask)
    raw = padded.padded_masked_mean_forward(x, LENGTHS, padded.MODES["raw"])
    assert raw[1].isnan().all() and not raw[[0, 2, 3, 4, 6]].isnan().any()


def test_the_output_takes_the_dtype_of_the_users_product():
    x = torch.randn(3, 4, 2).to(torch.bfloat16)
    lengths = torch.tensor([4, 1, 2])
    out = padded.padded_masked_mean_forward(x, lengths, padded.MODES["clamp"], torch.float32)
    mask = (torch.arange(4)[None, :] < lengths[:, None]).float()  # a float32 mask: the product is float32
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, (x * mask[..., None]).sum(1) / lengths.clamp(min=1)[:, None])


def test_the_eager_entry_pools_with_autograd_and_refuses_bad_inputs_with_the_reason():
    x = torch.randn(3, 4, 2, requires_grad=True)
    lengths = torch.tensor([4, 0, 2])
    out = padded_masked_mean(x, lengths)
    out.backward(torch.ones_like(out))
    torch.testing.assert_close(out[1], torch.zeros(2))  # an empty row: zeros, as the partitioned mean
    torch.testing.assert_close(out[2], x[2, :2].mean(0))
    torch.testing.assert_close(x.grad[2], torch.tensor([[0.5, 0.5], [0.5, 0.5], [0, 0], [0, 0]]))
    cases = [
        (x, torch.tensor([4, 5, 1]), r"lengths must lie within \[0, L=4\].*lengths\[1\]=5"),
        (x, torch.tensor([-1, 0, 1]), r"lengths\[0\]=-1"),
        (x, torch.tensor([1.0, 2.0, 3.0]), "lengths must be an integer tensor, got torch.float32"),
        (x, torch.tensor([1, 2]), r"lengths must be 1-D \[B\] with B=3"),
        (x[0], lengths, r"x must be a padded \[B, L, D\] tensor"),
        (x.detach().double(), lengths, "x dtype torch.float64 is not fp32/bf16/fp16"),
    ]
    for values, bad, message in cases:
        with pytest.raises((ValueError, RuntimeError), match=message):
            padded_masked_mean(values, bad)
    empty = padded_masked_mean(torch.randn(0, 4, 2, requires_grad=True), torch.zeros(0, dtype=torch.int64))
    assert empty.shape == (0, 2) and empty.grad_fn is not None


@pytest.mark.parametrize(
    ("batch", "length", "width", "split"),
    [(64, 2000, 128, True), (1, 400, 16, True), (16384, 200, 128, False), (262144, 4, 32, False), (8, 100, 64, False)],
)
def test_the_launch_follows_the_shape(batch, length, width, split):
    cuda = torch.device("cuda")  # only its type is read: the rule runs on any host
    config = padded.padded_config(batch, length, width, torch.bfloat16, cuda)
    programs = -(-batch // config["PARTS"]) * -(-width // config["BLOCK_D"]) * config["SPLIT"]
    assert (config["SPLIT"] > 1) == split
    assert config["SPLIT"] * config["CHUNK"] >= length and config["CHUNK"] >= min(length, padded.SPLIT_MIN_ROWS)
    assert config["PARTS"] * config["BLOCK_D"] * config["UNROLL"] * 2 <= padded.STEP_BYTES
    if batch >= 16384:  # enough batch rows fill the GPU without a split
        assert programs >= padded.MIN_PROGRAMS
    if length <= 4:  # short rows: several batch rows a program
        assert config["PARTS"] > 1
    assert config["UNROLL"] <= min(length, padded.MAX_UNROLL) or length < 2


# --- the pass -----------------------------------------------------------------------------------------------


class PaddedEncoder(torch.nn.Module):
    """Histories padded to [B, L] ids, embedded, masked mean, a projection."""

    def __init__(self, counts="clamp"):
        super().__init__()
        self.embedding = torch.nn.Embedding(20, 6)
        self.project = torch.nn.Linear(6, 3)
        self.counts = counts

    def forward(self, ids, lengths):
        rows = self.embedding(ids)  # [B, L, D]
        mask = torch.arange(ids.shape[1])[None, :] < lengths[:, None]
        pooled = (rows * mask.unsqueeze(-1)).sum(dim=1)
        if self.counts == "clamp":
            pooled = pooled / lengths.clamp(min=1).unsqueeze(1)
        elif self.counts == "mask_sum":  # counts of its own: divided after the op
            pooled = pooled / mask.sum(1, keepdim=True).clamp(min=1)
        return self.project(pooled)


class SplitEncoder(torch.nn.Module):
    """Flat history ids [N], embedded, split by lengths, pad_sequence, masked mean, a projection."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(20, 6)
        self.project = torch.nn.Linear(6, 3)

    def forward(self, ids, lengths):
        sizes = lengths.tolist()  # the graph breaks here: the embedding is traced with the pool after it
        rows = torch.split(self.embedding(ids), sizes)
        batch = pad_sequence(rows, batch_first=True)
        mask = (torch.arange(batch.shape[1])[None, :] < lengths[:, None]).to(batch.dtype)
        return self.project((batch * mask[..., None]).sum(1) / lengths.clamp(min=1)[:, None])


def _step(model, parameters, *inputs):
    out = model(*inputs)
    (out * torch.arange(out.numel()).view_as(out)).sum().backward()
    grads = {name: p.grad.clone() for name, p in parameters.named_parameters()}
    parameters.zero_grad()
    return out.detach(), grads


def _check_against_eager(encoder, batches):
    torch._dynamo.reset()
    eager = encoder()
    model = encoder()
    model.load_state_dict(eager.state_dict())
    compiled = fuse_compile(model, inner="aot_eager")
    for inputs in batches:
        out, grads = _step(compiled, model, *inputs)
        expected, expected_grads = _step(eager, eager, *inputs)
        torch.testing.assert_close(out, expected)
        for name, grad in expected_grads.items():
            torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-6)
    assert compiled.liger_fuse_stats.fallbacks == [] and compiled.liger_fuse_stats.declined == {}
    return compiled.liger_fuse_stats


@pytest.mark.parametrize("counts", ["clamp", "mask_sum"])
def test_a_padded_encoder_is_pooled_by_the_padded_kernel_with_the_eager_gradients(counts):
    generator = torch.Generator().manual_seed(7)
    batches = [
        (torch.randint(0, 20, (4, 5), generator=generator), torch.tensor([5, 0, 2, 1])),
        (torch.randint(0, 20, (3, 7), generator=generator), torch.tensor([7, 3, 0])),  # a new B and L
    ]
    stats = _check_against_eager(lambda: PaddedEncoder(counts), batches)
    assert stats.replaced_by == {"padded_masked_mean -> triton_padded_masked_mean": stats.graphs_compiled}


def test_a_split_encoder_is_pooled_by_the_partitioned_mean_on_the_unpadded_rows():
    generator = torch.Generator().manual_seed(8)
    batches = []
    for lengths in ([3, 1, 6], [2, 0, 5], [4, 4, 1, 2]):  # an empty history; a new B
        batches.append((torch.randint(0, 20, (sum(lengths),), generator=generator), torch.tensor(lengths)))
    stats = _check_against_eager(SplitEncoder, batches)
    assert stats.replaced["padded_split_masked_mean"] == stats.graphs_compiled >= 2
    assert stats.replaced_by["padded_split_masked_mean -> triton_partitioned_mean"] == stats.graphs_compiled
    # the embedding's gather is fused into the pool too (embedding_forms.py takes the replacement over)
    assert stats.replaced["embedding_partitioned_mean"] == stats.graphs_compiled


def _compiled(fn):
    torch._dynamo.reset()
    return fuse_compile(fn, inner="aot_eager")


def split_pad(x, sizes, lengths, **pad):
    rows = pad_sequence(torch.split(x, sizes), batch_first=True, **pad)
    mask = torch.arange(rows.shape[1])[None, :] < lengths[:, None]
    return (rows * mask[..., None]).sum(1) / lengths[:, None]  # unclamped: an empty history is 0 / 0 = NaN


def test_the_split_form_computes_the_users_result_when_the_mask_disagrees_with_the_split_sizes():
    x = torch.randn(10, 4, requires_grad=True)
    compiled = _compiled(split_pad)
    # the mask keeps fewer rows than a chunk holds (2 of 3), more (5 of 1: the chunk's), none (0 / 0 = NaN)
    sizes, lengths = [3, 1, 6, 0], torch.tensor([2, 5, 6, 0])
    out = compiled(x, sizes, lengths)
    grad_x = torch.autograd.grad(out.nan_to_num().sum(), x)[0]
    expected = split_pad(x, sizes, lengths)
    torch.testing.assert_close(out, expected, equal_nan=True)
    assert out[3].isnan().all()
    torch.testing.assert_close(grad_x, torch.autograd.grad(expected.nan_to_num().sum(), x)[0])
    assert compiled.liger_fuse_stats.replaced == {"padded_split_masked_mean": 1}


def mask_past_the_length(x, lengths):
    mask = torch.arange(x.shape[1])[None, :] > lengths[:, None]  # the pad rows, not the kept ones
    return (x * mask[..., None]).sum(1) / lengths.clamp(min=1)[:, None]


def float_lengths(x, lengths):
    mask = torch.arange(x.shape[1])[None, :] < lengths.half()[:, None]  # fp16 lengths: not exact past 2048
    return (x * mask[..., None]).sum(1) / lengths.clamp(min=1)[:, None]


def transposed_mask(x, lengths):
    mask = torch.arange(x.shape[1])[:, None] < lengths[None, :]  # [L, B]: B == L here, the orientation is wrong
    return (x * mask[..., None]).sum(1) / lengths.clamp(min=1)[:, None]


@pytest.mark.parametrize(
    ("form", "name", "reason"),
    [
        (mask_past_the_length, "padded_masked_mean", "the mask compares the lengths below the arange"),
        (float_lengths, "padded_masked_mean", "the mask's lengths must be an integer tensor, got torch.float16"),
        (transposed_mask, "padded_masked_mean", "the mask's arange is not arange(L) along the padded rows"),
        (
            lambda x, lengths: split_pad(x.flatten(0, 1), [4] * 4, lengths, padding_side="left"),
            "padded_split_masked_mean",
            "left padding",
        ),
    ],
    ids=["past_length", "fp16_lengths", "transposed", "left_padding"],
)
def test_a_mask_the_pass_cannot_prove_is_left_alone_with_the_reason_counted(form, name, reason):
    x = torch.randn(4, 4, 3, requires_grad=True)
    lengths = torch.tensor([4, 0, 2, 1])
    compiled = _compiled(form)
    torch.testing.assert_close(compiled(x, lengths), form(x, lengths), equal_nan=True)
    stats = compiled.liger_fuse_stats
    assert stats.replaced == {} and stats.declined == {name: 1}
    assert reason in next(iter(stats.declined_reasons)), stats.declined_reasons


def test_the_padded_form_s_unclamped_zero_count_is_nan_and_uses_the_fused_division():
    def raw(x, lengths):
        mask = torch.arange(x.shape[1])[None, :] < lengths[:, None]
        return (x * mask[..., None]).sum(1) / lengths[:, None]

    x = torch.randn(3, 4, 2)
    lengths = torch.tensor([4, 0, 9])  # past L: the mask keeps all 4 rows, the division is by 9
    compiled = _compiled(raw)
    out = compiled(x, lengths)
    torch.testing.assert_close(out, raw(x, lengths), equal_nan=True)
    assert out[1].isnan().all()
    assert compiled.liger_fuse_stats.replaced == {"padded_masked_mean": 1}


def test_the_split_forms_embedding_gather_keeps_its_padding_idx_reason():
    def split_embedding(ids, table, lengths):
        sizes = lengths.tolist()
        rows = pad_sequence(torch.split(F.embedding(ids, table, padding_idx=0), sizes), batch_first=True)
        mask = torch.arange(rows.shape[1])[None, :] < lengths[:, None]
        return (rows * mask[..., None]).sum(1) / lengths.clamp(min=1)[:, None]

    ids, table, lengths = torch.tensor([1, 0, 3, 2, 2]), torch.randn(4, 3), torch.tensor([2, 3])
    compiled = _compiled(split_embedding)
    torch.testing.assert_close(compiled(ids, table, lengths), split_embedding(ids, table, lengths))
    assert compiled.liger_fuse_stats.replaced == {"padded_split_masked_mean": 1}
    assert compiled.liger_fuse_stats.declined == {"embedding_partitioned_mean": 1}


def test_the_gpu_scripts_padded_section_runs_on_the_interpreter(monkeypatch):
    # what the H200 call runs: the correctness rows, then one cell with its timing stubbed (every variant it times
    # computes the same masked mean)
    from benchmarks import pooling_grid_gpu as grid

    monkeypatch.setattr(grid, "DEVICE", "cpu")
    monkeypatch.setattr(grid, "PADDED_CORRECTNESS_CELLS", [(5, 6, 12, "uniform")])
    monkeypatch.setattr(grid, "ALL_DTYPES", {"bf16": torch.bfloat16})
    rows = grid.padded_correctness(grid.Clock(60))
    assert [r["dtype"] for r in rows] == ["bf16"] and all(r["ok"] for r in rows), rows
    timed = []
    monkeypatch.setattr(
        grid, "timed_both", lambda call, leaf, label: timed.append(call()) or {"forward_ms": 1.0, "full_ms": 2.0}
    )
    row = grid.padded_row(6, 5, 12, "bf16", "uniform", "cell", compiled=grid.masked_mean_eager)
    assert len(timed) == 6 and all(out.shape == (6, 12) for out in timed)
    for out in timed[1:3]:  # eager and "compiled" over the same padded x; the split ones over their own values
        torch.testing.assert_close(out.float(), timed[0].float(), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(timed[4].float(), timed[3].float(), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(timed[5].float(), timed[3].float(), rtol=2e-2, atol=2e-2)
    text = grid.markdown({"device": "cpu", "torch": "", "triton": "", "padded": [row], "padded_correctness": rows})
    assert "| 6 | 5 | 12 | bf16 | uniform |" in text and "| 1.00x | 1.00x |" in text


def partitions_pad(values, lengths, mask_lengths):
    rows = pad_partitions(values, lengths.to(torch.int64))  # what the loop capture writes for the split
    mask = torch.arange(rows.shape[1])[None, :] < mask_lengths[:, None]
    return (rows * mask[..., None]).sum(1) / mask_lengths.clamp(min=1)[:, None]


@pytest.mark.parametrize("same", [True, False], ids=["mask_of_the_sizes", "other_mask"])
def test_the_capture_s_pad_of_a_split_is_pooled_on_the_unpadded_rows(same):
    lengths = torch.tensor([3, 0, 6, 1])
    mask_lengths = lengths if same else torch.tensor([2, 0, 9, 1])  # fewer rows than a chunk, more
    fn = (lambda v, n: partitions_pad(v, n, n)) if same else (lambda v, n: partitions_pad(v, n, mask_lengths))
    values = torch.randn(10, 4, requires_grad=True)
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        compiled = _compiled(fn)
        out = compiled(values, lengths)
    grad = torch.autograd.grad((out * torch.arange(out.numel()).view_as(out)).sum(), values)[0]
    expected = fn(values, lengths)
    torch.testing.assert_close(out, expected)
    expected_grad = torch.autograd.grad((expected * torch.arange(out.numel()).view_as(out)).sum(), values)[0]
    torch.testing.assert_close(grad, expected_grad)
    stats = compiled.liger_fuse_stats
    assert stats.replaced == {"padded_split_masked_mean": 1} and stats.fallbacks == []
