"""The pairs are real patterns: each spelling matches its own traced graph through torch.fx's subgraph matcher,
a near miss (another reduction, another dim) is left alone uncounted, and a pair that fails never fails the
compile of a model plain torch.compile runs."""

import operator

import pytest
import torch
import torch.nn.functional as F
from torch.fx.passes.utils.matcher_utils import SubgraphMatcher

from pipelines.fuse.runtime import compile as fuse_compile
from pipelines.fuse.runtime.families import PATTERNS
from pipelines.fuse.runtime.families import default_registry
from pipelines.fuse.runtime.pairs import Pair
from pipelines.fuse.runtime.pairs import pattern_graphs
from pipelines.fuse.runtime.patterns import HandForm
from pipelines.fuse.runtime.registry import Condition
from pipelines.fuse.runtime.registry import Kernel

LENGTHS = torch.tensor([3, 1, 6])
OFFSETS = torch.tensor([0, 3, 4, 10])
PAIRS = [entry for entry in PATTERNS if isinstance(entry, Pair)]


def _segments(v, lengths):
    return torch.repeat_interleave(torch.arange(lengths.shape[0]), lengths, output_size=v.shape[0])


def test_every_registered_form_is_a_pair_except_the_unrolled_ones_the_padded_ones_and_the_gather():
    hand = {entry.name for entry in PATTERNS if isinstance(entry, HandForm)}
    unrolled = {"loop_slice_mean_stack", "split_mean_stack"}
    padded = {"padded_split_masked_mean", "padded_masked_mean"}
    embedding = {
        "embedding_partitioned_mean",
        "embedding_bag_partitioned_mean",  # nn.EmbeddingBag over real ids
        "grouped_embedding_partitioned_mean",  # K fused gathers meeting in one cat
    }
    assert hand == {*unrolled, *padded, *embedding}
    assert {p.name for p in PAIRS} >= {"index_add_div", "scatter_reduce_mean", "segment_reduce_mean", "swiglu"}


def test_a_division_written_once_matches_every_spelling_of_it():
    spelled = {(n.op, n.target) for g in pattern_graphs(PAIRS[0].patterns) for n in g.nodes if n.op != "placeholder"}
    assert {("call_function", operator.truediv), ("call_function", torch.div), ("call_method", "div")} <= spelled


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p.name)
def test_each_spelling_of_a_pair_matches_its_own_pattern(pair):
    graphs = pattern_graphs(pair.patterns)  # the written patterns, each expanded into its equivalent spellings
    assert len(graphs) >= len(pair.patterns) >= 1
    for graph in graphs:
        matches = SubgraphMatcher(graph, match_output=False, match_placeholder=False).match(graph)
        assert len(matches) == 1, graph


def _declined_and_replaced(fn, *args):
    torch._dynamo.reset()
    compiled = fuse_compile(fn, inner="aot_eager")
    torch.testing.assert_close(compiled(*args), fn(*args))
    return compiled.liger_fuse_stats.replaced, compiled.liger_fuse_stats.declined


def scatter_reduce_sum(v, lengths):
    index = _segments(v, lengths).unsqueeze(1).expand(-1, v.shape[1])
    return torch.zeros(3, v.shape[1]).scatter_reduce(0, index, v, reduce="sum", include_self=False)


def segment_reduce_max(v, lengths):
    return torch.segment_reduce(v, "max", lengths=lengths)


def index_add_div_by_other_counts(v, lengths):
    sums = torch.zeros(3, v.shape[1]).index_add_(0, _segments(v, lengths), v)
    return sums / (lengths + 1).unsqueeze(1)  # not the lengths: not a mean


def scatter_add_over_some_columns(v, lengths):
    index = _segments(v, lengths).unsqueeze(1).expand(-1, 2)  # 2 of the 4 columns
    return torch.zeros(3, v.shape[1]).scatter_add(0, index, v) / lengths.clamp(min=1).unsqueeze(1)


def embedding_bag_sum(v, offsets):
    return F.embedding_bag(torch.arange(v.shape[0]), v, offsets[:-1], mode="sum")


def embedding_bag_max(v, offsets):
    return F.embedding_bag(torch.arange(v.shape[0]).flip(0), v, offsets[:-1], mode="max")


def rms_norm_over_dim_0(x, weight):
    xf = x.to(torch.float32)
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(0, keepdim=True) + 1e-6)).to(x.dtype)


def gelu_mul(gate, up):
    return F.gelu(gate) * up


NEAR_MISSES = [
    (scatter_reduce_sum, (torch.randn(10, 4), LENGTHS)),
    (segment_reduce_max, (torch.randn(10, 4), LENGTHS)),
    (index_add_div_by_other_counts, (torch.randn(10, 4), LENGTHS)),
    (scatter_add_over_some_columns, (torch.randn(10, 4), LENGTHS)),
    (embedding_bag_sum, (torch.randn(10, 4), OFFSETS)),
    (embedding_bag_max, (torch.randn(10, 4), OFFSETS)),
    (rms_norm_over_dim_0, (torch.randn(2, 8), torch.randn(8))),
    (gelu_mul, (torch.randn(2, 8), torch.randn(2, 8))),
]


@pytest.mark.parametrize(("form", "args"), NEAR_MISSES, ids=lambda f: getattr(f, "__name__", ""))
def test_a_near_miss_is_left_alone_and_not_counted(form, args):
    assert _declined_and_replaced(form, *args) == ({}, {})


def test_an_embedding_bag_over_shuffled_rows_is_a_gather_the_fused_kernel_takes():
    # once a near miss of embedding_bag_mean (identity ids only); real ids are the fused gather's form now
    def embedding_bag_shuffled_rows(v, offsets):
        return F.embedding_bag(torch.arange(v.shape[0]).flip(0), v, offsets[:-1], mode="mean")

    replaced, declined = _declined_and_replaced(embedding_bag_shuffled_rows, torch.randn(10, 4), OFFSETS)
    assert (replaced, declined) == ({"embedding_bag_partitioned_mean": 1}, {})


def test_other_spellings_of_a_form_are_replaced():
    def divided_by_function(v, lengths):
        sums = torch.index_add(torch.zeros(3, v.shape[1]), 0, _segments(v, lengths), v)
        return torch.div(sums, lengths.clamp(min=1).unsqueeze(1))

    def reduce_given_by_keyword(v, o):
        return torch.segment_reduce(v, reduce="mean", offsets=o)

    def bag_by_default_mode_with_last_offset(v, offsets):
        return F.embedding_bag(torch.arange(v.shape[0]), v, offsets, include_last_offset=True)

    v = torch.randn(10, 4)
    assert _declined_and_replaced(divided_by_function, v, LENGTHS) == ({"index_add_div": 1}, {})
    assert _declined_and_replaced(reduce_given_by_keyword, v, OFFSETS) == ({"segment_reduce_mean": 1}, {})
    assert _declined_and_replaced(bag_by_default_mode_with_last_offset, v, OFFSETS) == ({"embedding_bag_mean": 1}, {})


def doubled_tanh_pattern(x):
    return torch.tanh(x) * 2.0


def doubled_tanh_replacement(x, *, pool):
    return pool(x)


def _registry_with(pair: Pair):
    registry = default_registry()
    registry.register_kernel(Kernel("tanh_twice", pair.family, Condition(("cpu",), (torch.float32,)), function=_twice))
    registry.register_pattern(pair)
    return registry


def _twice(x):
    return torch.tanh(x) * 2.0


def _compile_with(pair: Pair, fn):
    torch._dynamo.reset()
    return fuse_compile(fn, registry=_registry_with(pair), inner="aot_eager")


def test_a_match_filter_that_fails_declines_with_the_reason_and_the_model_runs():
    def broken_check(bindings):
        raise KeyError("a binding the filter expected")

    pair = Pair("doubled_tanh", "doubled_tanh", (doubled_tanh_pattern,), doubled_tanh_replacement, broken_check, "x")
    compiled = _compile_with(pair, lambda x: torch.tanh(x) * 2.0 + 1)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), torch.tanh(x) * 2.0 + 1)
    stats = compiled.liger_fuse_stats
    assert stats.replaced == {} and stats.fallbacks == []
    assert stats.declined_reasons == {
        "doubled_tanh: match filter failed (KeyError: 'a binding the filter expected')": 1
    }


def test_a_pair_whose_replacement_cannot_be_built_falls_back_to_the_graph_as_it_came():
    def needs_an_unbound_argument(x, scale, *, pool):
        return pool(x) * scale

    pair = Pair("doubled_tanh", "doubled_tanh", (doubled_tanh_pattern,), needs_an_unbound_argument, operand="x")
    compiled = _compile_with(pair, lambda x: torch.tanh(x) * 2.0 + 1)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), torch.tanh(x) * 2.0 + 1)
    assert compiled.liger_fuse_stats.fallbacks == [
        "TypeError: needs_an_unbound_argument: 'scale' is no pattern parameter and has no default"
    ]


def test_a_pair_with_a_kernel_replaces_its_pattern():
    pair = Pair("doubled_tanh", "doubled_tanh", (doubled_tanh_pattern,), doubled_tanh_replacement, operand="x")
    compiled = _compile_with(pair, lambda x: torch.tanh(x) * 2.0 + 1)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), torch.tanh(x) * 2.0 + 1)
    assert compiled.liger_fuse_stats.replaced == {"doubled_tanh": 1}
    other = _compile_with(pair, lambda x: torch.tanh(x) * 3.0)
    other(x)
    assert other.liger_fuse_stats.replaced == {}  # the literal differs: not the pattern
