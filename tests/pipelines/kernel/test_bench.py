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


# --- CUDA-graph timing: the choice of method (stand-ins for the graphs; no GPU here) -----------------------------


def _fallbacks(calls: list) -> dict:
    def fallback(mode):
        return lambda: calls.append(mode) or (1.0, "events")

    return {mode: fallback(mode) for mode in bench.MODES}


def _capture_fails():
    raise RuntimeError("operation not permitted when stream is capturing")


def test_modes_are_graph_timed_where_capture_works_and_backward_is_full_minus_forward():
    calls = []
    graphs = {"forward": lambda: 0.25, "full": lambda: 1.0}
    times, methods = bench.choose_modes(graphs, _fallbacks(calls), enabled=True)
    assert times == {"forward": 0.25, "backward": 0.75, "full": 1.0}
    assert methods == dict.fromkeys(bench.MODES, "cudagraph") and calls == []


def test_a_mode_whose_capture_fails_is_timed_per_call_and_says_so():
    calls = []
    graphs = {"forward": _capture_fails, "full": lambda: 1.0}
    times, methods = bench.choose_modes(graphs, _fallbacks(calls), enabled=True)
    # backward is a difference of two graph figures only: one host-timed side makes it host-timed too
    assert methods == {"forward": "events", "backward": "events", "full": "cudagraph"}
    assert times == {"forward": 1.0, "backward": 1.0, "full": 1.0} and calls == ["forward", "backward"]


def test_no_graph_without_cuda_and_no_difference_below_zero():
    calls = []
    times, methods = bench.choose_modes({"forward": lambda: 0.5, "full": lambda: 1.0}, _fallbacks(calls), False)
    assert set(methods.values()) == {"events"} and calls == ["forward", "full", "backward"]
    calls.clear()  # noise leaving full under forward: backward is timed on its own
    times, methods = bench.choose_modes({"forward": lambda: 0.5, "full": lambda: 0.5}, _fallbacks(calls), True)
    assert methods["backward"] == "events" and methods["full"] == "cudagraph" and calls == ["backward"]


@pytest.mark.parametrize("fn", [_OneBackwardPerGraph, _GradsIntoInputs], ids=["donated-buffers", "grads-into-inputs"])
def test_the_captured_calls_run_over_and_over_on_one_set_of_static_leaves(fn, monkeypatch):
    """What the graph captures, run eagerly as the unrolled capture runs it: full is a new autograd graph per call
    (one backward each, no retain_graph), so the donated-buffers and grads-into-inputs stand-ins both go through."""
    seen = []

    def unrolled(make_call, leaves):
        call = make_call()
        for _ in range(4):
            for leaf in leaves:
                leaf.grad = None
            call()
        seen.append(leaves)
        return 0.5

    monkeypatch.setattr(bench.graph_timing, "graph_ms", unrolled)
    layer = _Layer(fn)
    templates = [torch.randn(4, 16) for _ in range(fn.forward.__code__.co_argcount - 1)]
    kept = [t.clone() for t in templates]

    def fresh():
        return [t.clone().requires_grad_(True) for t in templates]

    dy = torch.randn(4, 16)
    graphs = bench.graph_calls(lambda xs: layer(*xs), fresh, dy, [layer.scale])
    assert graphs["forward"]() == 0.5 and graphs["full"]() == 0.5
    # the param's grad is cleared before each call too, and each full call ran its backward
    assert any(leaf is layer.scale for leaf in seen[1]) and len(seen[1]) == len(templates) + 1
    assert all(leaf.grad is not None for leaf in seen[1])
    assert all(torch.equal(t, k) for t, k in zip(templates, kept, strict=True))  # the static leaves are clones


def test_the_gate_json_and_table_say_how_each_point_was_timed_and_what_is_under_the_floor():
    def side(fwd, method):
        return {"forward": fwd, "backward": 0.2, "full": 0.3, "peak_mb": 10.0, "method": method}

    graphed = dict.fromkeys(bench.MODES, "cudagraph")
    host = {**graphed, "forward": "events"}
    result = {"name": "relu2", "rows": 8, "hidden": 16, "liger": side(0.004, graphed), "torch": side(0.1, host)}
    result["torch_compile"] = side(0.1, graphed)
    assert bench.not_judged(result, bench.PROVIDERS) == {"forward": "liger: launch-bound, 4 us under the 10 us floor"}
    result["not_judged"] = bench.not_judged(result, bench.PROVIDERS)
    for key in ("speedup_forward_vs_eager", "speedup_backward_vs_eager", "speedup_full_vs_eager"):
        result[key] = result[key.replace("eager", "compile")] = 1.0
    result |= {"memory_saving_vs_eager_pct": 0.0, "liger_forward_pct_copy": 1.0, "liger_backward_pct_copy": 1.0}
    row = bench.markdown([result], 4000.0).splitlines()[-1]
    assert row.endswith("| cudagraph / events | forward |")
    assert "10 us launch floor" in bench.markdown([result], 4000.0) and "{floor" not in bench.method_text(20)


class _DxIntoDy(torch.autograd.Function):
    """Liger's norms with in_place=True: dX written into dY's storage, whoever holds dY."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, dy):
        return dy.mul_(2)


class _FnLayer(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def test_the_handed_over_check_says_whether_dx_landed_in_dy_s_storage():
    x = torch.randn(4, 8)
    assert bench.handed_over_check(_FnLayer(_DxIntoDy.apply), x, "cpu") == {"shares_dy": True}
    assert bench.handed_over_check(_FnLayer(lambda t: t * 2), [x], "cpu") == {"shares_dy": False}


def test_the_peak_leaves_out_the_input_templates_and_the_dy_template_once_each():
    # the pass clones each template and dy: one copy of each is the pass's, the kept template is the harness's
    templates = [torch.empty(1024, 256, dtype=torch.bfloat16), torch.empty(1024, 256, dtype=torch.bfloat16)]
    assert bench.held_mb(templates, torch.empty(1024, 256, dtype=torch.bfloat16)) == 1.5
