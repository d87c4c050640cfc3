"""The kernel pipeline's benchmark timing (`bench.time_modes`), on the CPU: the two faults the first H200 run of the
kernel leave-one-out met when one graph's backward was timed over and over with retain_graph (its torch.compile side
and Liger's SwiGLU / GeGLU side), by stand-ins that raise the same way."""

from __future__ import annotations

import pytest
import torch

from pipelines.kernel import bench


class _OneBackwardPerGraph(torch.autograd.Function):
    """torch.compile's backward with donated buffers: a second backward of one graph raises."""

    @staticmethod
    def forward(ctx, x):
        ctx.done = False
        return x * 2

    @staticmethod
    def backward(ctx, dy):
        if ctx.done:
            raise RuntimeError("This backward function was compiled with non-empty donated buffers")
        ctx.done = True
        return dy * 2


class _GradsIntoInputs(torch.autograd.Function):
    """Liger's LigerSiLUMulFunction: views of the inputs made in forward (no_grad), saved, and its backward writes
    da, db into them and returns them."""

    @staticmethod
    def forward(ctx, a, b):
        a, b = a.view(-1, a.shape[-1]), b.view(-1, b.shape[-1])
        ctx.save_for_backward(a, b)
        return torch.nn.functional.silu(a) * b

    @staticmethod
    def backward(ctx, dc):
        a, b = ctx.saved_tensors
        s = torch.sigmoid(a)
        db = dc * a * s
        a.copy_(dc * b * s * (1 + a * (1 - s)))
        b.copy_(db)
        return a, b


class _Layer(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn
        self.scale = torch.nn.Parameter(torch.ones(16))

    def forward(self, *xs):
        return self.fn.apply(*xs) * self.scale


@pytest.mark.parametrize("fn", [_OneBackwardPerGraph, _GradsIntoInputs], ids=["donated-buffers", "grads-into-inputs"])
def test_every_timed_backward_has_its_own_graph_and_fresh_leaves(fn):
    """The first H200 run: every torch.compile timing of a row-wise op raised on the donated buffers (one graph,
    backward repeated with retain_graph), and Liger's SwiGLU / GeGLU side on `A view was created in no_grad mode ...
    modified inplace` (inputs reused across calls while its backward writes into them)."""
    layer = _Layer(fn)
    templates = [torch.randn(4, 16) for _ in range(fn.forward.__code__.co_argcount - 1)]
    kept = [t.clone() for t in templates]
    times = bench.time_modes(layer, templates, rep=0.5, device="cpu")
    assert set(times) == {"forward", "backward", "full"} and all(v > 0 for v in times.values())
    assert all(torch.equal(t, k) for t, k in zip(templates, kept, strict=True))  # the caller's tensors untouched
    assert layer.scale.grad is None  # no gradient accumulated over the calls


def test_one_tensor_input_is_timed_as_a_list_of_one():
    # benchmarks/kernel_gpu.py passes the input itself
    layer = _Layer(_OneBackwardPerGraph)
    x = torch.randn(4, 16)
    times = bench.time_modes(layer, x, rep=0.5, device="cpu")
    assert set(times) == {"forward", "backward", "full"} and x.grad is None and not x.requires_grad
