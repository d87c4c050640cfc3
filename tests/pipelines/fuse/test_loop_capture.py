"""The naive Python loop over offsets becomes one op at the module level, and new lengths do not recompile."""

import torch
from torch import nn

from pipelines.fuse import recsys
from pipelines.fuse.runtime import compile as fuse_compile
from pipelines.fuse.runtime import pooling


class AppendLoop(nn.Module):
    def forward(self, values, offsets):
        bounds = offsets.tolist()
        pooled = []
        for start, end in zip(bounds[:-1], bounds[1:], strict=False):
            pooled.append(values[start:end].mean(dim=0))
        out = torch.stack(pooled)
        return out * 2


class Comprehension(nn.Module):
    def forward(self, values, offsets):
        return torch.stack([torch.mean(values[offsets[i] : offsets[i + 1]], 0) for i in range(len(offsets) - 1)])


class SplitComprehension(nn.Module):
    def forward(self, values, offsets):
        lengths = offsets[1:] - offsets[:-1]
        return torch.stack([t.mean(0) for t in torch.split(values, lengths.tolist())])


class SplitAppendLoop(nn.Module):
    def forward(self, values, offsets):
        sizes = (offsets[1:] - offsets[:-1]).tolist()
        pooled = []
        for chunk in values.split(sizes, dim=0):
            pooled.append(chunk.mean(dim=0))
        return torch.stack(pooled)


def _batch(lengths, width=5):
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.tensor(lengths).cumsum(0)])
    return torch.randn(int(offsets[-1]), width), offsets


def test_both_loop_forms_are_captured_and_match_the_definition():
    values, offsets = _batch([2, 5, 1])
    expected = pooling.partitioned_mean_reference(values, offsets)
    for module, scale in ((AppendLoop(), 2), (Comprehension(), 1)):
        torch._dynamo.reset()
        compiled = fuse_compile(module, inner="aot_eager")
        torch.testing.assert_close(compiled(values, offsets), scale * expected)
        assert compiled.liger_fuse_stats.loops_captured == 1
        assert compiled.liger_fuse_stats.replaced == {"loop_slice_mean_stack": 1}


def test_varying_lengths_compile_a_bounded_number_of_times():
    size = recsys.DemoSize(items=50, dim=4, histories=3, max_history=6, hidden=8)
    torch._dynamo.reset()
    compiled = fuse_compile(recsys.NaiveEncoder(size), inner="aot_eager")
    optimizer = torch.optim.SGD(compiled.parameters(), lr=0.1)
    for batch in recsys.batches(size, 12, "cpu"):
        recsys.train_step(compiled, optimizer, batch)
    # one static graph, then one dynamic graph on the first new N; nothing after that
    assert compiled.liger_fuse_stats.graphs_compiled <= 2


def test_the_fallback_branch_keeps_the_loop_where_the_kernel_does_not_apply():
    values, offsets = _batch([2, 3])
    torch._dynamo.reset()
    compiled = fuse_compile(AppendLoop(), inner="aot_eager")
    half = values.half()
    torch.testing.assert_close(compiled(half, offsets), AppendLoop()(half, offsets))


def test_the_split_forms_are_captured_and_new_lengths_do_not_recompile():
    # after Dynamo, split by lengths.tolist() is B constant sizes: a new graph for every batch (and eager after
    # Dynamo's recompile limit); captured before Dynamo it is one op on the lengths tensor
    for module in (SplitComprehension(), SplitAppendLoop()):
        torch._dynamo.reset()
        compiled = fuse_compile(module, inner="aot_eager")
        for lengths in ([2, 5, 1], [3, 1, 4], [1, 1, 6], [4, 2, 2]):
            values, offsets = _batch(lengths)
            values.requires_grad_(True)
            out = compiled(values, offsets)
            expected = pooling.partitioned_mean_reference(values, offsets)
            torch.testing.assert_close(out, expected)
            grad = torch.autograd.grad(out.sum(), values)[0]
            torch.testing.assert_close(grad, torch.autograd.grad(expected.sum(), values)[0])
        assert compiled.liger_fuse_stats.loops_captured == 1
        assert compiled.liger_fuse_stats.replaced == {"loop_slice_mean_stack": 1}
        assert compiled.liger_fuse_stats.graphs_compiled <= 2


def test_split_into_equal_chunks_is_not_a_partitioned_mean():
    class EqualChunks(nn.Module):
        def forward(self, values):
            return torch.stack([t.mean(0) for t in torch.split(values, 2)])

    torch._dynamo.reset()
    compiled = fuse_compile(EqualChunks(), inner="aot_eager")
    values = torch.randn(6, 3)
    torch.testing.assert_close(compiled(values), EqualChunks()(values))
    assert compiled.liger_fuse_stats.loops_captured == 0


class PaddedSplit(nn.Module):
    def forward(self, values, offsets):
        lengths = offsets[1:] - offsets[:-1]
        sizes = lengths.tolist()
        padded = torch.nn.utils.rnn.pad_sequence(torch.split(values, sizes), batch_first=True)
        mask = torch.arange(padded.shape[1])[None, :] < lengths[:, None]
        return (padded * mask[..., None]).sum(1) / lengths[:, None]


def test_the_padded_split_becomes_one_op_on_the_lengths_and_new_lengths_do_not_recompile():
    torch._dynamo.reset()
    compiled = fuse_compile(PaddedSplit(), inner="aot_eager")
    for lengths in ([2, 5, 1], [3, 1, 4], [1, 1, 7], [4, 2, 2]):  # the longest changes: an unbacked size
        values, offsets = _batch(lengths)
        values.requires_grad_(True)
        out = compiled(values, offsets)
        expected = pooling.partitioned_mean_reference(values, offsets)
        torch.testing.assert_close(out, expected)
        grad = torch.autograd.grad((out * torch.arange(5.0)).sum(), values)[0]
        torch.testing.assert_close(grad, torch.autograd.grad((expected * torch.arange(5.0)).sum(), values)[0])
    # captured as one op, then the masked mean over it pooled on the unpadded rows (the pad is never written)
    assert compiled.liger_fuse_stats.replaced == {"padded_split": 1, "padded_split_masked_mean": 2}
    assert compiled.liger_fuse_stats.graphs_compiled <= 2


def test_a_padded_split_with_another_padding_value_is_left_as_written():
    class OtherPadding(nn.Module):
        def forward(self, values, lengths):
            return torch.nn.utils.rnn.pad_sequence(torch.split(values, lengths.tolist()), True, -1.0)

    torch._dynamo.reset()
    compiled = fuse_compile(OtherPadding(), inner="aot_eager")
    values = torch.randn(5, 2)
    torch.testing.assert_close(compiled(values, torch.tensor([3, 2])), OtherPadding()(values, torch.tensor([3, 2])))
    assert "padded_split" not in compiled.liger_fuse_stats.replaced


def test_the_padded_split_s_pad_is_never_written_once_its_masked_mean_is_pooled():
    # Dynamo checks the pad's unbacked length (sym_size >= 0 -> _assert_scalar): left in, it keeps the pad alive
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = fuse_compile(PaddedSplit(), inner=keep)
    values, offsets = _batch([2, 5, 1])
    torch.testing.assert_close(compiled(values, offsets), pooling.partitioned_mean_reference(values, offsets))
    assert graphs and not any("pad_partitions" in gm.code for gm in graphs)


class NestedStack(nn.Module):  # the stacked means inside the statement that uses them
    def __init__(self):
        super().__init__()
        self.scale = nn.Linear(3, 3, bias=False)

    def forward(self, values, offsets):
        bounds = offsets.tolist()
        return self.scale(torch.stack([values[bounds[i] : bounds[i + 1]].mean(0) for i in range(len(bounds) - 1)]))


class CatKeepdim(nn.Module):
    def forward(self, values, offsets):
        rows = []
        for start, end in zip(offsets[:-1], offsets[1:], strict=False):
            rows.append(torch.mean(values[start:end], dim=0, keepdim=True))
        return torch.cat(rows, dim=0) * 3


class TensorSplit(nn.Module):
    def forward(self, values, offsets):
        return torch.vstack([t.mean(dim=0) for t in torch.tensor_split(values, offsets[1:-1].tolist())])


def _reference(module, values, offsets):
    pooled = pooling.partitioned_mean_reference(values, offsets)
    return {NestedStack: lambda: module.scale(pooled), CatKeepdim: lambda: 3 * pooled}.get(
        type(module), lambda: pooled
    )()


def test_stacked_means_anywhere_in_a_statement_cat_of_keepdim_rows_and_tensor_split_points_are_captured():
    for module in (NestedStack(), CatKeepdim(), TensorSplit()):
        torch._dynamo.reset()
        compiled = fuse_compile(module, inner="aot_eager")
        for lengths in ([2, 5, 1], [3, 1, 4], [1, 1, 6], [4, 2, 2]):
            values, offsets = _batch(lengths, width=3)
            values.requires_grad_(True)
            out = compiled(values, offsets)
            expected = _reference(module, values, offsets)
            torch.testing.assert_close(out, expected)
            grad = torch.autograd.grad((out * torch.arange(3.0)).sum(), values)[0]
            torch.testing.assert_close(grad, torch.autograd.grad((expected * torch.arange(3.0)).sum(), values)[0])
        stats = compiled.liger_fuse_stats
        assert (stats.loops_captured, stats.replaced) == (1, {"loop_slice_mean_stack": 1}), type(module).__name__
        assert stats.graphs_compiled <= 2, type(module).__name__


def test_only_the_stacking_of_the_means_is_replaced_and_a_stack_of_other_rows_is_left_alone():
    class Beside(nn.Module):
        def forward(self, values, offsets):
            return torch.cat([values[:1], torch.stack([torch.mean(t, 0) for t in torch.split(values, offsets)])])

    class KeepdimStacked(nn.Module):  # stack of [1, D] means is [B, 1, D]: not the pooled [B, D]
        def forward(self, values, offsets):
            return torch.stack([t.mean(0, keepdim=True) for t in torch.split(values, offsets.tolist())])

    values = torch.randn(8, 3)
    torch._dynamo.reset()
    compiled = fuse_compile(Beside(), inner="aot_eager")
    torch.testing.assert_close(compiled(values, [2, 5, 1]), Beside()(values, [2, 5, 1]))
    assert compiled.liger_fuse_stats.loops_captured == 1
    torch._dynamo.reset()
    compiled = fuse_compile(KeepdimStacked(), inner="aot_eager")
    lengths = torch.tensor([2, 5, 1])
    torch.testing.assert_close(compiled(values, lengths), KeepdimStacked()(values, lengths))
    assert compiled.liger_fuse_stats.loops_captured == 0


def test_a_split_by_an_int_held_in_a_variable_runs_as_written():
    # `torch.split(values, self.chunk)` reads as a split by sizes: only a run tells the int (equal chunks) apart;
    # before, the captured call turned the int into a 0-d tensor and Dynamo's fake run of torch.cat raised
    class Chunks(nn.Module):
        def __init__(self, chunk):
            super().__init__()
            self.chunk = chunk

        def forward(self, values):
            means = torch.stack([t.mean(0) for t in torch.split(values, self.chunk)])
            sections = torch.stack([t.mean(0) for t in torch.tensor_split(values, self.chunk)])
            padded = torch.nn.utils.rnn.pad_sequence(torch.split(values, self.chunk), batch_first=True)
            return means, sections, padded

    values = torch.randn(10, 3)
    torch._dynamo.reset()
    compiled = fuse_compile(Chunks(3), inner="aot_eager")
    for got, want in zip(compiled(values), Chunks(3)(values), strict=True):
        torch.testing.assert_close(got, want)
