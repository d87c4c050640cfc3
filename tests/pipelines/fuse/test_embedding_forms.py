"""embedding -> partitioned mean in the pass, and the pooling ops opaque to every trace (issue 13)."""

import pytest
import torch
import torch.nn.functional as F
from functorch.compile import aot_function
from functorch.compile import make_boxed_func

from pipelines.fuse import recsys
from pipelines.fuse.runtime import compile as fuse_compile
from pipelines.fuse.runtime import embedding_forms
from pipelines.fuse.runtime import embedding_pool
from pipelines.fuse.runtime import pooling

FUSED = "embedding_partitioned_mean"
OFFSETS = torch.tensor([0, 3, 4, 4, 10])
LENGTHS = OFFSETS[1:] - OFFSETS[:-1]


def _op_targets(graphs) -> set[str]:
    return {str(n.target) for gm in graphs for n in gm.graph.nodes if n.op == "call_function"}


@pytest.mark.parametrize(
    ("call", "op", "backward_op"),
    [
        (lambda t, ids, o: pooling.partitioned_mean_op(t, o), "partitioned_mean", "partitioned_mean_backward"),
        (
            embedding_pool.embedding_partitioned_mean_op,
            "embedding_partitioned_mean",
            "embedding_partitioned_mean_backward",
        ),
    ],
)
def test_a_trace_with_dynamic_shapes_keeps_the_op_whole_and_reads_no_offsets(call, op, backward_op):
    # AOTAutograd's functionalised trace ran the old triton_op's body, whose offsets checks read values: on the H200
    # that raised on aten._local_scalar_dense and split the compiled graph (GuardOnDataDependentSymNode here)
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm)

    table = torch.randn(10, 4, requires_grad=True)
    ids = torch.randint(0, 10, (10,))
    out = aot_function(call, fw_compiler=keep, bw_compiler=keep, dynamic=True)(table, ids, OFFSETS)
    out.sum().backward()
    targets = _op_targets(graphs)
    assert f"liger_fuse.{op}.default" in targets and f"liger_fuse.{backward_op}.default" in targets
    assert not any("local_scalar_dense" in t or "triton_kernel_wrapper" in t for t in targets)


def test_the_recsys_encoder_compiles_to_one_graph_that_gathers_inside_the_pool():
    size = recsys.DemoSize(items=50, dim=8, histories=4, max_history=5, hidden=8)
    batch = recsys.batches(size, 1, "cpu")[0]
    torch.manual_seed(0)
    eager = recsys.NaiveEncoder(size)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = recsys.NaiveEncoder(size)
    model.load_state_dict(eager.state_dict())
    fused = fuse_compile(model, inner="aot_eager")
    loss, grads = recsys.first_step_grads(fused, batch)
    eager_loss, eager_grads = recsys.first_step_grads(eager, batch)
    stats = fused.liger_fuse_stats
    assert stats.graphs_compiled == 1 and not torch._dynamo.utils.counters["graph_break"]
    assert stats.replaced_by == {
        "loop_slice_mean_stack -> triton_partitioned_mean": 1,
        f"{FUSED} -> triton_embedding_partitioned_mean": 1,
    }
    torch.testing.assert_close(loss, eager_loss)
    for name, grad in eager_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-6)


def _compiled(fn):
    torch._dynamo.reset()
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return fuse_compile(fn, inner=keep), graphs


def segment_reduce_form(ids, table, lengths):
    return torch.segment_reduce(F.embedding(ids, table), "mean", lengths=lengths)


def index_add_form(ids, table, lengths):
    values = F.embedding(ids, table)
    segments = torch.repeat_interleave(torch.arange(lengths.shape[0]), lengths, output_size=values.shape[0])
    sums = torch.zeros(lengths.shape[0], values.shape[1]).index_add_(0, segments, values)
    return sums / lengths.clamp(min=1).unsqueeze(1)


def unrolled_loop_form(ids, table, bounds):
    values = F.embedding(ids, table)  # a plain function: Dynamo unrolls the loop (no module capture)
    return torch.stack([values[bounds[i] : bounds[i + 1]].mean(0) for i in range(len(bounds) - 1)])


def op_form(ids, table, offsets):
    return pooling.partitioned_mean_op(F.embedding(ids, table), offsets)


@pytest.mark.parametrize(
    ("form", "partitions", "pooled_by"),
    [
        (segment_reduce_form, LENGTHS, "segment_reduce_mean"),
        (index_add_form, LENGTHS, "index_add_div"),
        (unrolled_loop_form, [1, 3, 4, 4, 9], "loop_slice_mean_stack"),  # rows 0 and 9 belong to no partition
        (op_form, OFFSETS, None),
    ],
)
def test_an_embedding_feeding_a_pooled_form_is_gathered_inside_the_kernel_with_the_eager_gradient(
    form, partitions, pooled_by
):
    ids = torch.tensor([3, 1, 3, 0, 7, 7, 2, 3, 5, 1])  # repeated ids: their gradients accumulate
    table = torch.randn(8, 6, requires_grad=True)
    compiled, graphs = _compiled(form)
    out = compiled(ids, table, partitions)
    (out * torch.arange(out.numel()).view_as(out)).sum().backward()
    fused_grad, table.grad = table.grad, None
    reference = form(ids, table, partitions)  # eager: the pass is not involved
    (reference * torch.arange(reference.numel()).view_as(reference)).sum().backward()
    torch.testing.assert_close(out, torch.nan_to_num(reference))
    torch.testing.assert_close(fused_grad, table.grad)
    stats = compiled.liger_fuse_stats
    assert stats.replaced.get(FUSED) == 1
    assert pooled_by is None or stats.replaced.get(pooled_by) == 1
    targets = [getattr(n.target, "__name__", str(n.target)) for gm in graphs for n in gm.graph.nodes]
    assert "embedding" not in targets and any(t.startswith("embedding_gather_") for t in targets)


def rows_used_twice(ids, table, lengths):
    values = F.embedding(ids, table)
    return torch.segment_reduce(values, "mean", lengths=lengths), values.sum()


def padded_embedding(ids, table, lengths):
    return torch.segment_reduce(F.embedding(ids, table, padding_idx=0), "mean", lengths=lengths)


@pytest.mark.parametrize(
    ("form", "reason"),
    [
        (rows_used_twice, embedding_forms.OTHER_USER_REASON),
        (padded_embedding, "padding_idx is set (its row's gradient must stay zero): the kernel does not skip it"),
    ],
)
def test_an_embedding_the_kernel_cannot_take_over_keeps_the_plain_pool_with_the_reason_counted(form, reason):
    ids = torch.tensor([3, 1, 3, 0, 7, 7, 2, 3, 5, 1])
    table = torch.randn(8, 6, requires_grad=True)
    compiled, _ = _compiled(form)
    out = compiled(ids, table, LENGTHS)
    pooled = out[0] if isinstance(out, tuple) else out
    pooled.sum().backward()
    fused_grad, table.grad = table.grad, None
    reference = form(ids, table, LENGTHS)
    (reference[0] if isinstance(reference, tuple) else reference).nan_to_num().sum().backward()
    stats = compiled.liger_fuse_stats
    assert stats.replaced == {"segment_reduce_mean": 1}
    assert stats.declined_reasons == {f"{FUSED}: {reason}": 1}
    torch.testing.assert_close(fused_grad, table.grad)


def test_the_fused_op_keeps_rows_outside_the_offsets_out_in_both_backward_modes():
    table = torch.randn(8, 4, requires_grad=True)
    ids = torch.tensor([3, 1, 3, 0, 7, 7, 2, 3, 5, 1])
    offsets = torch.tensor([2, 5, 5, 8])  # rows 0-1 and 8-9 belong to no partition, as in a loop over slices
    reference = embedding_pool.embedding_partitioned_mean(table, ids[2:8], offsets - 2)
    weights = torch.randn_like(reference)
    (expected,) = torch.autograd.grad((reference * weights).sum(), table)
    for deterministic in (False, True):
        before = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(deterministic)
        try:
            out = embedding_pool.embedding_partitioned_mean_op(table, ids, offsets)
            (grad,) = torch.autograd.grad((out * weights).sum(), table)
        finally:
            torch.use_deterministic_algorithms(before)
        torch.testing.assert_close(out, reference)
        torch.testing.assert_close(grad, expected)
    with pytest.raises(ValueError, match=r"offsets must lie within \[0, N=10\]"):
        embedding_pool.embedding_partitioned_mean_op(table, ids, torch.tensor([0, 3, 11]))


def test_the_fused_op_passes_torch_library_opcheck():
    table = torch.randn(8, 4, requires_grad=True)
    args = (table, torch.tensor([3, 1, 3, 0, 7]), torch.tensor([0, 2, 2, 5]))
    torch.library.opcheck(
        embedding_pool.embedding_partitioned_mean_op, args, test_utils=("test_schema", "test_faketensor")
    )
