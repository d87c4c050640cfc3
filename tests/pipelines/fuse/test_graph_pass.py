"""The pass replaces every registered form in a Dynamo graph and leaves the graph alone where it must."""

import pytest
import torch
import torch.nn.functional as F

from pipelines.fuse.runtime import compile as fuse_compile
from pipelines.fuse.runtime import pooling
from pipelines.fuse.runtime.families import default_registry

LENGTHS = torch.tensor([3, 1, 6])
OFFSETS = torch.tensor([0, 3, 4, 10])


def _segments(values, lengths):
    return torch.repeat_interleave(torch.arange(lengths.shape[0]), lengths, output_size=values.shape[0])


def loop_form(v, offs):
    return torch.stack([v[offs[i] : offs[i + 1]].mean(0) for i in range(len(offs) - 1)])


def split_form(v, sizes):
    return torch.stack([chunk.mean(0) for chunk in torch.split(v, sizes)])


def index_add_form(v, lengths):
    sums = torch.zeros(lengths.shape[0], v.shape[1], dtype=v.dtype).index_add_(0, _segments(v, lengths), v)
    return sums / lengths.clamp(min=1).unsqueeze(1)


def scatter_add_form(v, lengths):
    index = _segments(v, lengths).unsqueeze(1).expand(-1, v.shape[1])
    return torch.zeros(lengths.shape[0], v.shape[1]).scatter_add(0, index, v) / lengths.clamp(min=1).unsqueeze(1)


def scatter_reduce_form(v, lengths, include_self=False):
    index = _segments(v, lengths).unsqueeze(1).expand(-1, v.shape[1])
    zeros = torch.zeros(lengths.shape[0], v.shape[1], dtype=v.dtype)
    return zeros.scatter_reduce(0, index, v, reduce="mean", include_self=include_self)


def segment_reduce_form(v, lengths):
    return torch.segment_reduce(v, "mean", lengths=lengths)


def index_add_on_device_form(v, lengths):
    # what GPU code writes: arange on the values' device (dtype=torch.long is arange's default for an int stop)
    ids = torch.arange(lengths.shape[0], device=v.device, dtype=torch.long)
    segments = torch.repeat_interleave(ids, lengths, output_size=v.shape[0])
    sums = torch.zeros(lengths.shape[0], v.shape[1], device=v.device, dtype=v.dtype).index_add_(0, segments, v)
    return sums / lengths.clamp(min=1).unsqueeze(1).to(v.dtype)


def segment_reduce_keywords_form(v, lengths):
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    return torch.segment_reduce(v, offsets=offsets, axis=0, reduce="mean")  # keywords in any order


def scatter_reduce_none_index_form(v, lengths):
    # segment ids broadcast with [:, None] (the patterns trace unsqueeze(1)), "mean" positional, numel() as the count
    index = torch.repeat_interleave(torch.arange(lengths.numel()), lengths, output_size=v.shape[0])[:, None].expand(
        -1, v.shape[1]
    )
    return torch.zeros(lengths.shape[0], v.shape[1], dtype=v.dtype).scatter_reduce(
        0, index, v, "mean", include_self=False
    )


def scatter_add_none_index_form(v, lengths):
    index = _segments(v, lengths)[:, None].expand_as(v)
    return torch.zeros(lengths.shape[0], v.shape[1]).scatter_add(0, index, v) / lengths.clamp(min=1)[:, None]


def embedding_bag_form(v, offsets):
    return F.embedding_bag(torch.arange(v.shape[0]), v, offsets[:-1], mode="mean")


FORMS = [
    (loop_form, [0, 3, 4, 10], "loop_slice_mean_stack"),
    (split_form, [3, 1, 6], "split_mean_stack"),
    (index_add_form, LENGTHS, "index_add_div"),
    (scatter_add_form, LENGTHS, "scatter_add_div"),
    (scatter_reduce_form, LENGTHS, "scatter_reduce_mean"),
    (segment_reduce_form, LENGTHS, "segment_reduce_mean"),
    (index_add_on_device_form, LENGTHS, "index_add_div"),
    (segment_reduce_keywords_form, LENGTHS, "segment_reduce_mean"),
    (embedding_bag_form, OFFSETS, "embedding_bag_mean"),
    (scatter_reduce_none_index_form, LENGTHS, "scatter_reduce_mean"),
    (scatter_add_none_index_form, LENGTHS, "scatter_add_div"),
]


def _compiled(fn):
    torch._dynamo.reset()
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return fuse_compile(fn, inner=keep), graphs


def _targets(graphs):
    return [getattr(n.target, "__name__", str(n.target)) for gm in graphs for n in gm.graph.nodes]


def test_every_form_is_replaced_by_the_kernel_with_the_same_result():
    values = torch.randn(10, 4, requires_grad=True)
    expected = pooling.partitioned_mean_reference(values.detach(), OFFSETS)
    for form, arg, name in FORMS:
        compiled, graphs = _compiled(form)
        out = compiled(values, arg)
        assert compiled.liger_fuse_stats.replaced == {name: 1}, form.__name__
        assert any("triton_partitioned_mean" in t for t in _targets(graphs)), form.__name__
        torch.testing.assert_close(out, expected, msg=form.__name__)
        out.sum().backward()
        torch.testing.assert_close(
            values.grad, torch.repeat_interleave(1 / LENGTHS.float(), LENGTHS)[:, None].expand(10, 4)
        )
        values.grad = None


def test_offsets_variant_of_segment_reduce_is_replaced():
    compiled, _ = _compiled(lambda v, o: torch.segment_reduce(v, "mean", offsets=o))
    torch.testing.assert_close(compiled(torch.ones(10, 2), OFFSETS), torch.ones(3, 2))
    assert compiled.liger_fuse_stats.replaced == {"segment_reduce_mean": 1}


def test_a_failing_dtype_condition_leaves_the_original_ops():
    compiled, graphs = _compiled(segment_reduce_form)
    out = compiled(torch.randn(10, 4, dtype=torch.float64), LENGTHS)
    assert compiled.liger_fuse_stats.replaced == {}
    assert compiled.liger_fuse_stats.declined == {"segment_reduce_mean": 1}
    assert "segment_reduce" in _targets(graphs) and out.dtype == torch.float64


def test_fp16_values_are_pooled_by_the_kernel():
    values = torch.randn(10, 4, dtype=torch.float16)
    compiled, graphs = _compiled(segment_reduce_form)
    out = compiled(values, LENGTHS)
    assert compiled.liger_fuse_stats.replaced == {"segment_reduce_mean": 1} and out.dtype == torch.float16
    torch.testing.assert_close(out, pooling.partitioned_mean_reference(values, OFFSETS))


def _refusing_rewritten_graphs(gm, example_inputs):
    """An inner compiler that cannot compile a graph holding our kernel (as Dynamo's fake run of a replacement can
    fail: the TorchRuntimeError the split form raised on torch 2.11) and compiles anything else."""
    if any("triton_partitioned_mean" in t for t in _targets([gm])):
        raise torch._dynamo.exc.TorchRuntimeError("the replacement does not trace")
    return gm.forward


@pytest.mark.parametrize(("form", "arg"), [(segment_reduce_form, LENGTHS), (split_form, [3, 1, 6])])
def test_a_rewritten_graph_that_does_not_compile_falls_back_to_the_graph_as_it_came(form, arg):
    torch._dynamo.reset()
    values = torch.randn(10, 4)
    compiled = fuse_compile(form, inner=_refusing_rewritten_graphs)
    torch.testing.assert_close(compiled(values, arg), form(values, arg))
    assert compiled.liger_fuse_stats.fallbacks == ["TorchRuntimeError: the replacement does not trace"]


def test_a_graph_the_pass_left_alone_fails_as_plain_torch_compile_would():
    torch._dynamo.reset()

    def refuse_all(gm, example_inputs):
        raise RuntimeError("the inner compiler refuses")

    compiled = fuse_compile(lambda v: v * 2, inner=refuse_all)
    try:
        compiled(torch.randn(3))
    except Exception as exc:  # Dynamo wraps the backend's error
        assert "the inner compiler refuses" in str(exc)
    else:
        raise AssertionError("a failure that is not the pass's own was hidden")
    assert compiled.liger_fuse_stats.fallbacks == []


def test_include_self_scatter_reduce_is_not_a_partitioned_mean():
    compiled, graphs = _compiled(lambda v, lengths: scatter_reduce_form(v, lengths, include_self=True))
    values = torch.randn(10, 4)
    torch.testing.assert_close(compiled(values, LENGTHS), scatter_reduce_form(values, LENGTHS, include_self=True))
    assert compiled.liger_fuse_stats.declined == {"scatter_reduce_mean": 1}
    assert compiled.liger_fuse_stats.declined_reasons == {
        "scatter_reduce_mean: include_self=True averages the initial zeros in too": 1
    }
    assert "scatter_reduce" in _targets(graphs)


def test_unsorted_segment_ids_are_not_matched():
    def arbitrary_ids(v, ids):
        return torch.zeros(3, v.shape[1]).index_add_(0, ids, v) / 2.0

    compiled, graphs = _compiled(arbitrary_ids)
    compiled(torch.randn(4, 2), torch.tensor([2, 0, 2, 1]))
    assert compiled.liger_fuse_stats.replaced == {} and "index_add_" in _targets(graphs)


def test_triton_off_on_cpu_declines_and_keeps_the_loop(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    compiled, graphs = _compiled(segment_reduce_form)
    compiled(torch.randn(10, 4), LENGTHS)
    assert compiled.liger_fuse_stats.replaced == {} and "segment_reduce" in _targets(graphs)


def test_liger_families_are_registered_and_cuda_only():
    registry = default_registry()
    assert {"partitioned_mean", "rms_norm", "swiglu"} <= set(registry.kernels)

    def hf_rms_norm_and_swiglu(x, weight, up):
        xf = x.to(torch.float32)
        normed = weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
        return F.silu(normed) * up

    compiled, graphs = _compiled(hf_rms_norm_and_swiglu)
    compiled(torch.randn(2, 8), torch.randn(8), torch.randn(2, 8))
    assert compiled.liger_fuse_stats.declined == {"rms_norm": 1, "swiglu": 1}  # matched, device=cuda fails
    assert "rsqrt" in _targets(graphs) and "silu" in _targets(graphs)


def test_a_speed_claim_on_a_gpu_needs_a_gain_beyond_the_spread_of_the_rounds():
    from pipelines.fuse.verify import step_time_gate

    def figures(with_ms, without_ms):
        return {
            "step_ms_with": sorted(with_ms)[2],
            "step_ms_without": sorted(without_ms)[2],
            "step_ms_rounds": {"with": with_ms, "without": without_ms},
        }

    steady = figures([9.0, 9.1, 9.0, 9.1, 9.0], [10.0, 10.1, 10.0, 10.1, 10.0])
    assert step_time_gate(steady, "cuda").status.value == "PASS"
    noisy = figures([9.0, 9.1, 9.0, 9.1, 9.0], [10.0, 12.5, 9.5, 10.1, 10.0])  # spread 3 ms > gain 1 ms
    assert step_time_gate(noisy, "cuda").status.value == "FAIL"
    assert step_time_gate(figures([9.9] * 5, [10.0] * 5), "cuda").status.value == "FAIL"  # 1%: under the threshold
    assert step_time_gate(steady, "cpu").status.value == "SKIP"


def test_a_loop_whose_bounds_skip_leading_rows_pools_the_rows_it_names():
    def skips_rows(v):
        return torch.stack([v[2:5].mean(0), v[5:6].mean(0), v[6:9].mean(0)])

    values = torch.randn(10, 4, requires_grad=True)
    compiled, graphs = _compiled(skips_rows)
    out = compiled(values)
    assert compiled.liger_fuse_stats.replaced == {"loop_slice_mean_stack": 1}
    torch.testing.assert_close(out, skips_rows(values))
    out.sum().backward()
    assert values.grad[:2].abs().sum() == 0 and values.grad[9:].abs().sum() == 0


def test_a_loop_slicing_past_the_rows_is_left_alone_with_the_reason_counted():
    def past_the_end(v):
        return torch.stack([v[0:3].mean(0), v[3:15].mean(0)])  # Python's slicing stops at row 10

    values = torch.randn(10, 4)
    compiled, graphs = _compiled(past_the_end)
    torch.testing.assert_close(compiled(values), past_the_end(values))
    stats = compiled.liger_fuse_stats
    assert stats.replaced == {} and stats.declined == {"loop_slice_mean_stack": 1}
    assert stats.declined_reasons == {
        "loop_slice_mean_stack: the last bound 15 is not provably within the values' rows": 1
    }


def test_lengths_that_are_not_a_1d_integer_tensor_fail_the_trace_time_guard():
    from torch import fx

    from pipelines.fuse.runtime.patterns import index_reason

    graph = fx.Graph()
    node = graph.placeholder("lengths")
    for value, reason in (
        (torch.tensor([1, 2]), ""),
        (torch.tensor([1.0, 2.0]), "lengths / offsets must be an integer tensor, got torch.float32"),
        (torch.tensor([[1, 2]]), "lengths / offsets must be 1-D, got rank 2"),
    ):
        node.meta["example_value"] = value
        assert index_reason(node) == reason


def test_split_by_lengths_tolist_runs_and_is_pooled_by_the_kernel_batch_after_batch():
    def split_tolist(x, lengths):
        return torch.stack([t.mean(0) for t in torch.split(x, lengths.tolist())])

    torch._dynamo.reset()
    compiled = fuse_compile(split_tolist, inner="aot_eager")
    for lengths in ([3, 1, 6], [2, 2, 5, 1]):
        x = torch.randn(sum(lengths), 4, requires_grad=True)
        torch.testing.assert_close(compiled(x, torch.tensor(lengths)), split_tolist(x, torch.tensor(lengths)))
    assert compiled.liger_fuse_stats.replaced == {"split_mean_stack": 2}
    assert compiled.liger_fuse_stats.fallbacks == []


def test_a_device_set_aside_for_matching_is_put_back_where_nothing_was_replaced():
    def ids_times_two(v):
        return torch.arange(v.shape[0], device=v.device) * 2

    compiled, graphs = _compiled(ids_times_two)
    torch.testing.assert_close(compiled(torch.randn(4, 2)), torch.arange(4) * 2)
    aranges = [n for gm in graphs for n in gm.graph.nodes if n.target is torch.arange]
    assert aranges and all("device" in n.kwargs for n in aranges)
    assert "device" in graphs[0].code
