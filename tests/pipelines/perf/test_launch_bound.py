"""Launch-bound points, CUDA-graph timing and the budget split, on the H200's own figures (benchmarks/NOTES.md,
"kernel perf (issue 12): second run"): the measurement child is faked, the loop, rules and report are real."""

from __future__ import annotations

import sys
import types

import pytest

from pipelines import target
from pipelines.perf import measure
from pipelines.perf import pipeline
from pipelines.perf import report
from pipelines.perf import rules as r
from pipelines.perf.pipeline import Loop

SIZES = ("1024x4096", "2048x4096", "4096x4096", "8192x4096", "4096x16384")
TARGET = "4096x16384"
# Liger 0.8.5 fused_add_rms_norm on the H200 under do_bench (ms), the bytes its kernels touched, the copy ceiling
H200 = {
    "forward": (0.14534, 0.09859, 0.09651, 0.11816, 0.13622),
    "backward": (0.36074, 0.36800, 0.31598, 0.23718, 0.38392),
    "full": (0.64192, 0.67702, 0.81027, 0.61882, 0.68075),
}
BYTES = {
    "1024x4096": {"forward": 33574912, "backward": 35737600, "full": 69312512},
    "2048x4096": {"forward": 67133440, "backward": 69296128, "full": 136429568},
    "4096x4096": {"forward": 134250496, "backward": 136413184, "full": 270663680},
    "8192x4096": {"forward": 268484608, "backward": 270647296, "full": 539131904},
    "4096x16384": {"forward": 536952832, "backward": 545603584, "full": 1082556416},
}
COPY_GBPS = 4248.0
COMPILE_BACKWARD_TARGET = 0.5615


def v0() -> dict:
    return {p: dict(zip(SIZES, ms, strict=True)) for p, ms in H200.items()}


def scaled(**changes: float) -> dict:
    """v0 with `pass__size` points scaled, e.g. forward__1024x4096=1.72."""
    out = v0()
    for key, factor in changes.items():
        pass_name, size = key.split("__")
        out[pass_name][size] *= factor
    return out


def h200_rules() -> r.Rules:
    return r.Rules("backward", (TARGET,), not_judged=r.launch_bound(v0(), BYTES, COPY_GBPS, keep=(TARGET,)))


def test_the_host_bound_sizes_of_the_h200_run_are_not_judged_and_the_bytes_bound_ones_are():
    skipped = {(p, s): why for p, s, why in h200_rules().not_judged}
    assert set(skipped) == {
        ("forward", "1024x4096"),  # 145 us for 8 us of bytes: 18x
        ("forward", "2048x4096"),  # 6.2x
        ("backward", "1024x4096"),
        ("backward", "2048x4096"),
        ("backward", "4096x4096"),  # 9.8x
        ("full", "1024x4096"),
        ("full", "2048x4096"),
        ("full", "4096x4096"),
        ("full", "8192x4096"),  # 4.9x
    }
    assert skipped[("forward", "1024x4096")] == "launch-bound, 145 us vs 8 us bound, host-timed"
    # judged: forward 4096x4096 (3.0x), 8192x4096 (1.9x), backward 8192x4096 (3.7x), and the target size always


def test_under_a_cuda_graph_only_the_floor_makes_a_point_launch_bound():
    # the host is out of a graph replay's time: 99 us for 8 us of bytes is a slow kernel there, and a variant that
    # makes it slower must be rejected; 8 us is a few launches' latency whatever the timing
    graph = {"forward": {"1024x4096": 0.008, "2048x4096": 0.0986, "4096x16384": 0.13}}
    methods = {"forward": dict.fromkeys(graph["forward"], "cudagraph")}
    assert r.launch_bound(graph, BYTES, COPY_GBPS, methods=methods) == (
        ("forward", "1024x4096", "launch-bound, 8 us under the 10 us floor"),
    )
    host = {"forward": dict.fromkeys(graph["forward"], "do_bench")}
    assert [s for _, s, _ in r.launch_bound(graph, BYTES, COPY_GBPS, methods=host)] == ["1024x4096", "2048x4096"]


def test_a_noisy_launch_bound_point_does_not_reject_a_variant():
    noisy = scaled(backward__4096x16384=0.811, forward__1024x4096=1.721, forward__2048x4096=1.582, full__8192x4096=1.6)
    assert r.judge(r.Rules("backward", (TARGET,)), v0(), v0(), noisy, True).status == r.REJECTED  # as on the H200
    verdict = r.judge(h200_rules(), v0(), v0(), noisy, True)
    assert verdict.status == r.ACCEPTED and verdict.gain == pytest.approx(1 / 0.811 - 1)
    assert r.regressed_points(h200_rules(), v0(), noisy) == []  # nothing to re-time either


def test_a_real_regression_at_a_judged_size_still_rejects():
    slow = scaled(
        backward__4096x16384=0.811, forward__1024x4096=1.721, forward__8192x4096=1.12, backward__8192x4096=1.06
    )
    verdict = r.judge(h200_rules(), v0(), v0(), slow, True)
    assert verdict.status == r.REJECTED
    assert verdict.reasons == (
        "backward at 8192x4096: +6.0% (limit +5% off target)",
        "forward at 8192x4096: +12.0% (limit +10%)",
    )


def test_recheck_rounds_fit_the_window():
    assert r.recheck_rounds(now=0, window_end=None, child_s=18, max_rounds=3) == 3
    assert r.recheck_rounds(now=0, window_end=80, child_s=18, max_rounds=3) == 2
    assert r.recheck_rounds(now=0, window_end=30, child_s=18, max_rounds=3) == 0


# --- the loop, with the GPU child faked ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    target.template_repository(target.DEFAULT_VERSION)
    return target.fetch(tmp_path_factory.mktemp("lk") / "liger-kernel")


class FakeGpu:
    """The measurement child: every child costs `child_s` seconds of a fake clock; times by the variant's name."""

    def __init__(self, times_by_variant: dict[str, dict], child_s: float = 18.0):
        self.now, self.child_s, self.times, self.children = 0.0, child_s, times_by_variant, []

    def clock(self) -> float:
        return self.now

    def child(self, checkout, out_dir, name, spec):
        self.now += self.child_s
        self.children.append((name, spec))
        if "sweep" in spec:
            return {"sweep": {"table": {}, "log": []}}
        variant = name.split("_recheck")[0] if "_v0" not in name else "v0"
        times = self.times.get(variant, v0())
        methods = {p: dict.fromkeys(by_size, "cudagraph") for p, by_size in times.items()}
        return {"tests": {"ok": True, "summary": "40 passed"}, "times": {"liger": times}, "methods": {"liger": methods}}


def h200_loop(checkout, out_dir, gpu: FakeGpu, budget_s: float, monkeypatch) -> Loop:
    monkeypatch.setattr(pipeline, "run_child", gpu.child)
    monkeypatch.setattr(pipeline, "target_style", lambda checkout, relative, text: text)
    options = pipeline.Options(budget_s=budget_s, ncu=False, script=False)
    _, profile = pipeline.understand("fused_add_rms_norm", checkout.root, options)
    compiled = scaled()
    compiled["backward"][TARGET] = COMPILE_BACKWARD_TARGET
    methods = {p: dict.fromkeys(SIZES, "do_bench") for p in H200}
    profile.measured = {
        "device": {"name": "NVIDIA H200"},
        "times": {"liger": v0(), "eager": scaled(), "compile": compiled},
        "methods": {"liger": methods},
        "bytes": BYTES,
        "copy_gbps": COPY_GBPS,
    }
    out_dir.mkdir()
    rules = pipeline.make_rules(profile, options)
    loop = Loop(
        checkout, profile, options, out_dir, lambda _: None, rules, checkout.path(profile.source.files.ops).read_text()
    )
    loop.clock, loop.deadline = gpu.clock, gpu.clock() + budget_s
    loop.texts["v0"], loop.times["v0"] = loop.original, v0()
    return loop


def test_v2_runs_within_the_budget_after_v1_is_rejected(checkout, tmp_path, monkeypatch):
    """v1 regresses a judged size for real (confirmed if re-timed): rejected within the sweep's share, so the
    structural v2 still starts inside a budget that v1's three re-timing rounds alone would have spent."""
    gpu = FakeGpu(
        {
            "v1": scaled(forward__8192x4096=1.3),
            "v2": scaled(backward__4096x16384=0.811, forward__1024x4096=1.721, forward__2048x4096=1.582),
        }
    )
    loop = h200_loop(checkout, tmp_path / "work", gpu, budget_s=120, monkeypatch=monkeypatch)
    stop = pipeline.optimise(loop)
    names = [c[0] for c in gpu.children]
    assert names[:3] == ["sweep1", "v1", "v2"], names
    assert gpu.children[0][1]["sweep"]["seconds"] == pytest.approx(r.SWEEP_CHILD_SHARE * r.SWEEP_SHARE * 120)
    v1, v2 = (rec for rec in loop.records if rec.name in ("v1", "v2"))
    assert v1.verdict.status == r.REJECTED and "forward at 8192x4096: +30.0% (limit +10%)" in v1.verdict.reasons
    assert v1.verdict.reasons[-1] == "not re-timed: the budget's share for it was spent"
    assert v2.verdict.status == r.ACCEPTED and v2.based_on == "v0"  # its launch-bound +72% is shown, not judged
    assert stop.startswith("target met by v2") and loop.state.best == "v2"
    assert v2.methods["forward"]["1024x4096"] == "cudagraph"


def test_the_report_lists_not_judged_points_with_the_reason(checkout, tmp_path, monkeypatch):
    gpu = FakeGpu({"v1": scaled(forward__1024x4096=1.721), "v2": scaled(backward__4096x16384=0.811)})
    loop = h200_loop(checkout, tmp_path / "work", gpu, budget_s=120, monkeypatch=monkeypatch)
    stop = pipeline.optimise(loop)
    body = report.pr_body(loop, stop, [])
    assert "- forward 1024x4096: not judged: launch-bound, 145 us vs 8 us bound, host-timed" in body
    assert "- full 8192x4096: not judged: launch-bound, 619 us vs 127 us bound, host-timed" in body
    assert "| forward | 8192x4096 |" in body and "| do_bench / cudagraph | judged |" in body
    assert "| do_bench / cudagraph | not judged: launch-bound, 145 us vs 8 us bound, host-timed |" in body
    notes = (tmp_path / "work" / "fused_add_rms_norm_v1_notes.md").read_text()
    assert "| forward | 1024x4096 | 0.1453 | 0.2501 | +72.1% | 0.1453 | cudagraph | not judged: launch-bound" in notes
    v1 = next(rec for rec in loop.records if rec.name == "v1")
    assert v1.verdict.status == r.NO_GAIN  # +72% at a launch-bound point, nothing else changed


# --- timing -------------------------------------------------------------------------------------------------------


class FakeUtils:
    class Out:
        y_50 = 0.25

    def run_speed_benchmark(self, forward, mode, inputs):
        return self.Out()


def test_a_point_is_timed_from_a_cuda_graph_and_falls_back_to_do_bench_when_capture_fails(monkeypatch):
    """A torch stand-in (no GPU here): the graph's time where capture works, do_bench's where it raises."""
    graph = {"ms": 0.125}

    def graph_ms(forward, mode, x):
        if graph["ms"] is None:
            raise RuntimeError("operation not permitted when stream is capturing")
        measure.pass_fn(forward, mode)()
        return graph["ms"]

    cuda = types.SimpleNamespace(is_available=lambda: False, synchronize=lambda: None)
    draws = []
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda, randn_like=draws.append))
    monkeypatch.setattr(measure, "graph_ms", graph_ms)
    x = types.SimpleNamespace(grad="stale")
    y = types.SimpleNamespace(backward=lambda dy, retain_graph: None)
    assert measure.gpu_ms(FakeUtils(), lambda: y, "backward", x) == (0.125, "cudagraph")
    graph["ms"] = None
    assert measure.gpu_ms(FakeUtils(), lambda: y, "full", x) == (0.25, "do_bench") and x.grad is None
    graph["ms"] = 0.125
    assert measure.gpu_ms(FakeUtils(), lambda: y, "forward", x, cudagraph=False) == (0.25, "do_bench")
    # the passes draw their gradient once, before the graph: a random draw under capture breaks the generator
    draws.clear()
    pass_ = measure.pass_fn(lambda: y, "full")
    pass_(), pass_()
    assert len(draws) == 1


def test_the_sweep_child_stops_trying_configs_when_its_seconds_are_spent(monkeypatch):
    class Bench:
        calls = 0

        def time(self, provider, rows, hidden, modes):
            Bench.calls += 1
            return dict.fromkeys(modes, 1.0)

    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(measure.time, "monotonic", lambda: next(clock))
    module = type("Kernel", (), {})()
    spec = {"warps": [4, 8, 16, 32], "stages": [1, 2, 3, 4], "seconds": 15}
    out = measure.sweep(Bench(), module, spec, [{"key": "8x4096", "rows": 8, "hidden": 4096}])
    assert Bench.calls == 2  # the kernel's own settings, then one config before the 15 s ran out
    assert sum("skipped" in entry for entry in out["log"]) == 7
