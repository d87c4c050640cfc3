"""The pass's ops check offsets without reading them back on a GPU: a host read drains the device queue on every
call (the recsys demo's step ran three per forward, 2.64 ms against EmbeddingBag's 1.51 on the H200)."""

from __future__ import annotations

import pytest
import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from pipelines.fuse import recsys
from pipelines.fuse.runtime import compile as fuse_compile
from pipelines.fuse.runtime import embedding_pool
from pipelines.fuse.runtime import pooling


def _no_host_reads(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a host read of a device tensor")

    for name in ("tolist", "item", "__int__", "__bool__"):
        monkeypatch.setattr(torch.Tensor, name, refuse)


@pytest.mark.parametrize("whole", [False, True])
def test_the_device_assert_refuses_bad_offsets_without_reading_them(monkeypatch, whole):
    good, rows = torch.tensor([0, 2, 2, 5]), 5
    bad = [torch.tensor([0, 3, 2, 5]), torch.tensor([0, 2, 6]), torch.tensor([-1, 2, 5])]
    if whole:
        bad += [torch.tensor([1, 2, 5]), torch.tensor([0, 2, 4])]
    _no_host_reads(monkeypatch)
    pooling.assert_offsets_on_device(good, rows, whole)
    for offsets in bad:  # on the CPU _assert_async raises at once; on a GPU at the next sync
        with pytest.raises(RuntimeError, match="liger_fuse: offsets must"):
            pooling.assert_offsets_on_device(offsets, rows, whole)


def test_offsets_off_the_cpu_take_the_device_assert_and_cpu_ones_the_precise_checks(monkeypatch):
    taken = []
    monkeypatch.setattr(pooling, "assert_offsets_on_device", lambda offsets, rows, whole: taken.append("device"))
    pooling.check_offset_values(torch.empty(4, dtype=torch.int64, device="meta"), 5, on_device=True)
    assert taken == ["device"]
    with pytest.raises(ValueError, match=r"offsets must lie within \[0, N=5\] \(values' rows\), got 0..6"):
        pooling.check_offset_values(torch.tensor([0, 6]), 5, on_device=True)  # the CPU: the precise host check
    assert taken == ["device"]


def test_the_ops_still_refuse_bad_offsets_on_the_cpu_with_the_precise_message():
    values = torch.randn(5, 4)
    with pytest.raises(ValueError, match="offsets must not decrease"):
        torch.ops.liger_fuse.partitioned_mean(values, torch.tensor([0, 3, 2, 5]))


# --- the pass's path off the CPU: the offsets check in the graph, the prechecked ops (embedding_pool.py) --------


def test_the_in_graph_check_keeps_good_offsets_and_refuses_bad_ones_without_reading_them(monkeypatch):
    _no_host_reads(monkeypatch)
    good = torch.tensor([1, 2, 2, 4])  # the pass's ops allow rows outside the partitions
    assert torch.equal(embedding_pool.offsets_checked_in_graph(good, 5), good)
    for bad in (torch.tensor([0, 3, 2, 5]), torch.tensor([0, 2, 6]), torch.tensor([-1, 2, 5])):
        with pytest.raises(RuntimeError, match="liger_fuse: offsets must lie within"):
            embedding_pool.offsets_checked_in_graph(bad, 5)


def test_the_pass_checks_in_the_graph_on_a_gpu_only_unless_switched_off(monkeypatch):
    assert embedding_pool.checks_in_graph(torch.device("cuda"))
    assert not embedding_pool.checks_in_graph(torch.device("cpu"))  # the CPU keeps the precise host checks
    monkeypatch.setenv("LIGER_FUSE_CHECKS_IN_GRAPH", "0")
    assert not embedding_pool.checks_in_graph(torch.device("cuda"))


def _traced_graphs(monkeypatch):
    """fuse_compile whose inner compiler keeps AOTAutograd's forward and backward graphs, with the in-graph check on
    the CPU (as on a GPU)."""
    monkeypatch.setattr(embedding_pool, "CHECKS_IN_GRAPH_ON", ("cuda", "cpu"))
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm)

    return aot_autograd(fw_compiler=keep, bw_compiler=keep), graphs


def test_the_pass_on_a_gpu_checks_in_its_graph_and_calls_the_prechecked_ops_with_the_eager_gradient(monkeypatch):
    inner, graphs = _traced_graphs(monkeypatch)
    size = recsys.DemoSize(items=50, dim=8, histories=4, max_history=5, hidden=8)
    data = recsys.batches(size, 4, "cpu")
    torch.manual_seed(0)
    eager = recsys.NaiveEncoder(size)
    model = recsys.NaiveEncoder(size)
    model.load_state_dict(eager.state_dict())
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    fused = fuse_compile(model, inner=inner)
    for batch in data:  # lengths change every batch
        loss, grads = recsys.first_step_grads(fused, batch)
        eager_loss, eager_grads = recsys.first_step_grads(eager, batch)
        torch.testing.assert_close(loss, eager_loss)
        for name, grad in eager_grads.items():
            torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-6)
    stats = fused.liger_fuse_stats
    # the first batch's static graph, then one with dynamic lengths for the rest; never a break
    assert stats.graphs_compiled == 2 and not torch._dynamo.utils.counters["graph_break"] and not stats.fallbacks
    assert stats.replaced_by["embedding_partitioned_mean -> triton_embedding_partitioned_mean"] == 2
    forward, backward = (_targets(graphs[i::2]) for i in (0, 1))
    assert {"aten._assert_async.msg", "liger_fuse.embedding_mean_prechecked.default"} <= forward
    assert "liger_fuse.embedding_mean_prechecked_backward.default" in backward
    everything = forward | backward
    assert not any("embedding_partitioned_mean" in t or "local_scalar_dense" in t for t in everything)

    ids, offsets, _ = data[-1]
    bad = offsets.clone()
    bad[2] = bad[1] - 1  # same shapes: no recompile, so nothing reads the offsets on the host
    _no_host_reads(monkeypatch)
    with pytest.raises(RuntimeError, match="liger_fuse: offsets must lie within"):
        fused(ids, bad)
    assert stats.graphs_compiled == 2


def _targets(graphs) -> set[str]:
    return {str(n.target) for gm in graphs for n in gm.graph.nodes if n.op == "call_function"}


def test_the_prechecked_ops_pass_torch_library_opcheck():
    table = torch.randn(8, 4)
    ids, offsets = torch.tensor([3, 1, 3, 0, 7]), torch.tensor([0, 2, 2, 5])
    checks = ("test_schema", "test_faketensor")
    torch.library.opcheck(
        torch.ops.liger_fuse.embedding_mean_prechecked.default, (table, ids, offsets), test_utils=checks
    )
    grad_out = torch.randn(3, 4)
    args = (grad_out, ids, offsets, 8, torch.float32)
    torch.library.opcheck(torch.ops.liger_fuse.embedding_mean_prechecked_backward.default, args, test_utils=checks)


# the opt-in Inductor launch (LIGER_FUSE_LAUNCH=inductor): traced in a child without the interpreter, whose
# InterpretedFunctions wrap_triton cannot trace (the kernels must be Triton JITFunctions; nothing is launched)
_TRACE_LAUNCHED = r"""
import json, os
os.environ["LIGER_FUSE_LAUNCH"] = "inductor"
import torch
from functorch.compile import aot_function, default_partition
from torch.fx.experimental.proxy_tensor import make_fx
from pipelines.fuse.runtime import embedding_pool as ep

joints, report = [], {}
def keep_joint(joint, inputs, **kwargs):
    joints.append(joint)
    return default_partition(joint, inputs, **kwargs)
class Stop(Exception):
    pass
def stop(gm, example_inputs):
    raise Stop
def pooled(table, ids, offsets):
    return ep.LaunchedMean.apply(table, ids, ep.offsets_checked_in_graph(offsets, ids.shape[0]))
table = torch.randn(200, 128, requires_grad=True)
ids, offsets = torch.randint(0, 200, (3000,)), torch.linspace(0, 3000, 11).long()
try:
    aot_function(pooled, fw_compiler=stop, partition_fn=keep_joint, dynamic=True)(table, ids, offsets)
except Stop:
    pass
report["joint"] = [str(n.target) for n in joints[0].graph.nodes if n.op == "call_function"]
for name, fn, args in (
    ("forward", ep.launched_forward, (table.detach(), ids, offsets)),
    ("backward", ep.launched_backward, (torch.randn(10, 128), ids, offsets, 200, torch.float32)),
):
    gm = make_fx(fn, tracing_mode="symbolic")(*args)
    values = gm.shape_env.var_to_val
    rows = [s for s, v in values.items() if int(v) == 3000]
    bounds = [s for s, v in values.items() if int(v) == 11]
    guards = [g.expr for g in gm.shape_env.guards]
    report[name] = {
        "rows_in_guards": [str(g) for g in guards if set(rows) & g.free_symbols],
        "bounds_guards_false_at_some_b": [
            str(g) for g in guards if set(bounds) & g.free_symbols
            and not all(bool(g.subs({s: b for s in bounds})) for b in (3, 17, 5000))
        ],
    }
print("REPORT" + json.dumps(report))
"""


def test_the_inductor_launch_traces_both_kernels_behind_the_in_graph_check_with_no_size_guard():
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    child = subprocess.run(
        [sys.executable, "-c", _TRACE_LAUNCHED], env=env, capture_output=True, text=True, timeout=240, check=False
    )
    line = [ln for ln in child.stdout.splitlines() if ln.startswith("REPORT")]
    assert line, child.stderr[-3000:]
    report = json.loads(line[0].removeprefix("REPORT"))
    joint = report["joint"]
    assert joint.count("triton_kernel_wrapper_functional") == 2  # forward and backward, launched by Inductor
    assert "aten._assert_async.msg" in joint and not any("local_scalar_dense" in t for t in joint)
    assert not any("liger_fuse" in t for t in joint)  # no Python op left to dispatch
    for side in ("forward", "backward"):  # lengths that change every batch add no guard: no recompile
        assert report[side] == {"rows_in_guards": [], "bounds_guards_false_at_some_b": []}, report
