"""The grouped fused gather + mean pool (issue 13): K features (own table, ids, offsets) in one launch each way, eager
against float64 nn.EmbeddingBag, and an EmbeddingBagCollection-like encoder grouped by the pass (interpreter)."""

import re
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pipelines.fuse.runtime import compile as fuse_compile
from pipelines.fuse.runtime import embedding_forms
from pipelines.fuse.runtime import embedding_pool_kernels
from pipelines.fuse.runtime import grouped_embedding_forms
from pipelines.fuse.runtime import grouped_embedding_partitioned_mean
from pipelines.fuse.runtime import grouped_embedding_pool
from pipelines.fuse.runtime import grouped_embedding_pool_kernels

GROUPED = "grouped_embedding_partitioned_mean"
SINGLE = "triton_embedding_partitioned_mean"
# (V, D, lengths): different vocabularies and widths (20: two 16-column blocks), empty partitions, B = 7
FEATURES = [(30, 8, [2, 0, 3, 1, 0, 4, 1]), (7, 16, [5, 1, 0, 2, 9, 1, 3]), (50, 20, [1, 1, 1, 0, 2, 1, 1])]
SPAN = {"kernel": "span", "PARTS": 4, "BLOCK_N": 8, "BLOCK_D": 16}  # two programs over B, several row steps
LOOP = {"kernel": "loop", "BLOCK_N": 4, "BLOCK_D": 16}


def _feature(vocab, width, lengths, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    table = torch.randn(vocab, width, generator=generator).to(dtype).requires_grad_()
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.tensor(lengths).cumsum(0)])
    ids = torch.randint(0, vocab, (int(offsets[-1]),), generator=generator)
    return table, ids, offsets


def _features(dtype=torch.float32):
    return [_feature(v, d, lengths, dtype, seed) for seed, (v, d, lengths) in enumerate(FEATURES)]


def _reference(features, grad):
    """EmbeddingBag per feature in float64, concatenated, and each table's gradient under `grad`."""
    exact = [table.detach().double().requires_grad_() for table, _, _ in features]
    out = torch.cat(
        [F.embedding_bag(i, t, o[:-1], mode="mean") for t, (_, i, o) in zip(exact, features, strict=True)], dim=1
    )
    out.backward(grad.double())
    return out.detach(), [t.grad for t in exact]


def _columns(features):
    """(tables, ids, offsets), each a list over the features."""
    return [list(part) for part in zip(*features, strict=True)]


@pytest.mark.parametrize("config", [None, SPAN, LOOP], ids=["bucket", "span", "loop"])
def test_one_launch_pools_every_feature_as_embedding_bag_forward_and_backward(config):
    features = _features()
    tables, ids, offsets = _columns(features)
    out = grouped_embedding_pool.GroupedEmbeddingPartitionedMean.apply(config, 3, *tables, *ids, *offsets)
    assert out.shape == (7, 8 + 16 + 20)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(5))
    out.backward(grad)
    expected, expected_grads = _reference(features, grad)
    torch.testing.assert_close(out.double(), expected, rtol=1e-6, atol=1e-6)
    for table, expected_grad in zip(tables, expected_grads, strict=True):
        torch.testing.assert_close(table.grad.double(), expected_grad, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_entry_point_takes_16_bit_tables_int32_ids_and_gives_blocks_on_request(dtype):
    features = [(t, i.to(torch.int32), o.to(torch.int32)) for t, i, o in _features(dtype)]
    tables, ids, offsets = _columns(features)
    blocks = grouped_embedding_partitioned_mean(tables, ids, offsets, concat=False)
    assert [b.shape for b in blocks] == [(7, 8), (7, 16), (7, 20)] and blocks[0].dtype == dtype
    grad = torch.randn(7, 44)
    torch.cat(blocks, dim=1).backward(grad.to(dtype))
    expected, expected_grads = _reference(features, grad.to(dtype).float())
    torch.testing.assert_close(torch.cat(blocks, dim=1).double(), expected, rtol=2e-2, atol=2e-2)
    for table, expected_grad in zip(tables, expected_grads, strict=True):
        assert table.grad.dtype == dtype
        torch.testing.assert_close(table.grad.double(), expected_grad, rtol=2e-2, atol=2e-2)


def test_deterministic_mode_gives_the_same_gradients_bit_for_bit():
    features = _features()
    tables, ids, offsets = _columns(features)
    grad = torch.randn(7, 44)
    vocabularies, widths = [t.shape[0] for t in tables], [t.shape[1] for t in tables]
    atomic = grouped_embedding_pool.grouped_backward(grad, ids, offsets, vocabularies, widths, torch.float32)
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        runs = [
            grouped_embedding_pool.grouped_backward(grad, ids, offsets, vocabularies, widths, torch.float32)
            for _ in range(2)
        ]
    finally:
        torch.use_deterministic_algorithms(before)
    assert torch.equal(runs[0], runs[1])
    torch.testing.assert_close(runs[0], atomic, rtol=1e-6, atol=1e-6)


def _bad(index, **change):
    features = _features()
    tables, ids, offsets = _columns(features)
    columns = {"tables": tables, "ids": ids, "offsets": offsets}
    for name, value in change.items():
        columns[name][index] = value
    return columns["tables"], columns["ids"], columns["offsets"]


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (lambda: _bad(1, tables=torch.randn(7, 16).to(torch.bfloat16)), TypeError, "feature 1 torch.bfloat16"),
        (lambda: _bad(2, offsets=torch.tensor([0, 1, 2, 7])), ValueError, "feature 0 has B=7, feature 2 B=3"),
        (lambda: _bad(2, ids=torch.zeros(7)), TypeError, "feature 2: ids must be int32 or int64"),
        (lambda: _bad(1, offsets=torch.tensor([0, 5, 6, 6, 8, 17, 18, 20])), ValueError, "feature 1's number"),
        (lambda: _bad(0, offsets=torch.tensor([0, 2, 1, 5, 6, 6, 10, 11])), ValueError, "must not decrease"),
        (lambda: _bad(0, tables=torch.randn(30, 8, 1)), ValueError, r"feature 0: table must be \[V, D\]"),
    ],
)
def test_bad_features_are_refused_with_the_feature_named(args, error, message):
    with pytest.raises(error, match=message):
        grouped_embedding_partitioned_mean(*args())


def test_a_missing_ids_tensor_and_out_of_range_ids_are_refused():
    tables, ids, offsets = _columns(_features())
    with pytest.raises(ValueError, match="one ids and one offsets tensor per table"):
        grouped_embedding_partitioned_mean(tables, ids[:2], offsets)
    ids[1] = ids[1].clone()
    ids[1][3] = 7
    with pytest.raises(ValueError, match=r"feature 1: ids must lie in \[0, V=7\)"):
        grouped_embedding_partitioned_mean(tables, ids, offsets, check_ids=True)


@pytest.mark.parametrize("config", [SPAN, LOOP], ids=["span", "loop"])
def test_the_kernel_flags_offsets_that_fall_or_leave_the_ids_without_reading_outside_them(config):
    # the op's host check is skipped here: this is what a CUDA run relies on (the flag, asserted on the device)
    tables, ids, offsets = _columns(_features())
    good = grouped_embedding_pool.grouped_forward(tables, ids, offsets, config)
    torch.testing.assert_close(good, _reference(_features(), torch.zeros(7, 44))[0].float())
    for bad in (torch.tensor([0, 2, 1, 5, 6, 6, 10, 12]), torch.tensor([0, 2, 2, 5, 6, 6, 10, 99])):
        with pytest.raises(ValueError, match=re.escape(grouped_embedding_pool.FLAG_MESSAGE)):
            grouped_embedding_pool.grouped_forward(tables, ids, [offsets[0], offsets[1], bad], config)


def test_the_op_passes_torch_library_opcheck():
    tables, ids, offsets = _columns(_features()[:2])
    torch.library.opcheck(
        grouped_embedding_pool.grouped_embedding_partitioned_mean_op,
        (tables, ids, offsets),
        test_utils=("test_schema", "test_faketensor"),
    )


# --- the pass: an EmbeddingBagCollection-like encoder ------------------------------------------------------------


class Collection(nn.Module):
    """Three nn.EmbeddingBag(mode="mean") features and one nn.Embedding + segment_reduce mean (D 12 among 8s),
    concatenated along dim 1 as TorchRec's EmbeddingBagCollection does, then a linear head."""

    def __init__(self, vocabularies=(30, 7, 50, 11), widths=(8, 8, 8, 12), dtype=torch.float32, bag_kwargs=None):
        super().__init__()
        bag_kwargs = bag_kwargs or {}
        self.bags = nn.ModuleList(
            nn.EmbeddingBag(v, d, mode="mean", dtype=dtype, **bag_kwargs.get(f, {}))
            for f, (v, d) in enumerate(zip(vocabularies[:3], widths[:3], strict=True))
        )
        self.embedding = nn.Embedding(vocabularies[3], widths[3], dtype=dtype)
        self.head = nn.Linear(sum(widths), 1, dtype=dtype)
        self.reuse_first = False

    def forward(self, ids, offsets, lengths):
        pooled = [bag(i, o) for bag, i, o in zip(self.bags, ids, offsets, strict=False)]
        pooled.append(torch.segment_reduce(self.embedding(ids[3]), "mean", lengths=lengths))
        users = torch.cat(pooled, dim=1)
        out = self.head(users).squeeze(-1)
        return out + pooled[0].sum() if self.reuse_first else out


def _batch(seed, vocabularies=(30, 7, 50, 11), batch=6):
    generator = torch.Generator().manual_seed(seed)
    ids, offsets = [], []
    for f, vocab in enumerate(vocabularies):  # the last feature's segment_reduce gives NaN for an empty one in eager
        lengths = torch.randint(int(f == len(vocabularies) - 1), 5, (batch,), generator=generator)
        offsets.append(torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]))
        ids.append(torch.randint(0, vocab, (int(offsets[-1][-1]),), generator=generator))
    last = offsets.pop()
    return ids, [o[:-1] for o in offsets], last[1:] - last[:-1]


def _grads(model, batch):
    model.zero_grad(set_to_none=True)
    out = model(*batch)
    (out * torch.arange(out.shape[0], dtype=out.dtype)).sum().backward()
    grads = {name.removeprefix("_orig_mod."): p.grad for name, p in model.named_parameters()}
    return out.detach(), {name: g.to_dense() if g.is_sparse else g.clone() for name, g in grads.items()}


class _Counted:
    """A kernel whose launches (`kernel[grid](...)`) are counted."""

    def __init__(self, kernel, counts, name):
        self.kernel, self.counts, self.name = kernel, counts, name

    def __getitem__(self, grid):
        self.counts[self.name] += 1
        return self.kernel[grid]


@pytest.fixture
def launches(monkeypatch):
    counts = Counter()
    for module in (grouped_embedding_pool_kernels, embedding_pool_kernels):
        for name in dir(module):
            if name.endswith("_kernel"):
                monkeypatch.setattr(module, name, _Counted(getattr(module, name), counts, name))
    return counts


def _compiled(model):
    torch._dynamo.reset()
    return fuse_compile(model, inner="aot_eager")


def test_an_embedding_bag_collection_compiles_to_one_grouped_launch_each_way_with_embedding_bags_gradients(launches):
    torch.manual_seed(0)
    eager = Collection()
    model = Collection()
    model.load_state_dict(eager.state_dict())
    compiled = _compiled(model)
    for step, seed in enumerate((1, 2)):  # lengths change: the second batch recompiles with dynamic sizes
        launches.clear()
        out, grads = _grads(compiled, _batch(seed))
        assert sum(launches.values()) == 2, launches  # one forward, one backward, no single-feature launch
        assert all(name.startswith("grouped_") for name in launches), launches
        expected, expected_grads = _grads(eager, _batch(seed))
        torch.testing.assert_close(out, expected)
        for name, grad in expected_grads.items():
            torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-6, msg=f"step {step}: {name}")
    stats = compiled.liger_fuse_stats
    assert stats.replaced_by[f"{GROUPED} -> triton_{GROUPED}"] == stats.graphs_compiled == 2
    assert stats.replaced[embedding_forms.BAG_NAME] == 6 and stats.replaced["embedding_partitioned_mean"] == 2
    assert not stats.declined and not stats.fallbacks


def _left_alone(model, grouped):
    """Compile `model` through the pass: one batch's forward and gradients equal eager's, `grouped` cats grouped."""
    torch.manual_seed(0)
    eager = model()
    fused = model()
    fused.load_state_dict(eager.state_dict())
    compiled = _compiled(fused)
    out, grads = _grads(compiled, _batch(1))
    expected, expected_grads = _grads(eager, _batch(1))
    torch.testing.assert_close(out, expected, rtol=2e-2, atol=2e-2)
    for name, grad in expected_grads.items():
        torch.testing.assert_close(grads[name].float(), grad.float(), rtol=2e-2, atol=2e-2)
    stats = compiled.liger_fuse_stats
    assert stats.replaced.get(GROUPED, 0) == grouped
    return stats


def test_a_pool_with_another_user_leaves_every_feature_its_single_op():
    def reusing():
        model = Collection()
        model.reuse_first = True
        return model

    stats = _left_alone(reusing, grouped=0)
    assert stats.declined_reasons == {f"{GROUPED}: {grouped_embedding_forms.OTHER_USER_REASON}": 1}
    assert stats.replaced_by[f"{embedding_forms.BAG_NAME} -> {SINGLE}"] == 3


def test_a_pool_reaching_the_cat_through_a_cast_keeps_its_place_beside_the_group():
    class Mixed(Collection):
        def __init__(self):
            super().__init__()
            self.bags[1] = nn.EmbeddingBag(7, 8, mode="mean", dtype=torch.bfloat16)

        def forward(self, ids, offsets, lengths):
            pooled = [bag(i, o) for bag, i, o in zip(self.bags, ids, offsets, strict=False)]
            pooled[1] = pooled[1].float()  # the bf16 pool reaches the cat through a cast
            pooled.append(torch.segment_reduce(self.embedding(ids[3]), "mean", lengths=lengths))
            return self.head(torch.cat(pooled, dim=1)).squeeze(-1)

    stats = _left_alone(Mixed, grouped=1)  # the other 3 group, the cast bf16 pool keeps its place in the cat
    assert not stats.declined_reasons and stats.replaced[embedding_forms.BAG_NAME] == 3


def test_a_sparse_bag_stays_beside_the_group_in_the_cat_with_its_reason():
    stats = _left_alone(lambda: Collection(bag_kwargs={1: {"sparse": True}}), grouped=1)
    assert stats.declined_reasons == {f"{embedding_forms.BAG_NAME}: {embedding_forms.SPARSE_REASON}": 1}


def test_mixed_dtypes_meeting_in_one_cat_are_declined_with_the_reason():
    def mixed(ids, offsets, table_a, table_b):
        a = F.embedding_bag(ids, table_a, offsets, mode="mean")
        b = F.embedding_bag(ids, table_b, offsets, mode="mean")
        return torch.cat([a, b], dim=1)

    torch._dynamo.reset()
    compiled = fuse_compile(mixed, inner="aot_eager")
    ids, offsets = torch.tensor([1, 2, 3, 0]), torch.tensor([0, 1, 1])
    tables = (torch.randn(4, 8), torch.randn(4, 8).to(torch.bfloat16))
    torch.testing.assert_close(compiled(ids, offsets, *tables), mixed(ids, offsets, *tables), rtol=1e-2, atol=1e-2)
    reason = grouped_embedding_forms.MIXED_DTYPE_REASON.format("torch.bfloat16, torch.float32")
    assert compiled.liger_fuse_stats.declined_reasons == {f"{GROUPED}: {reason}": 1}
    assert compiled.liger_fuse_stats.replaced == {embedding_forms.BAG_NAME: 2}


def test_dynamos_restart_of_its_analysis_is_not_taken_for_a_failed_rewrite():
    # with dynamic=True the grouped encoder's first trace ends in TensorifyScalarRestartAnalysis (a float input to
    # specialise): the backend once caught it as a failure and compiled the graph without the pass
    calls = []

    def restarts_once(gm, example_inputs):
        calls.append(len(calls))
        if len(calls) == 1:
            raise torch._dynamo.exc.TensorifyScalarRestartAnalysis
        return gm.forward

    torch._dynamo.reset()
    compiled = fuse_compile(Collection(), inner=restarts_once)
    compiled(*_batch(1))
    stats = compiled.liger_fuse_stats
    assert len(calls) == 2 and not stats.fallbacks and stats.replaced[GROUPED] == 2
