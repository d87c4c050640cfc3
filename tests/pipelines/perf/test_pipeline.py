"""The perf loop end to end as a CPU dry run (TRITON_INTERPRET=1, wall-clock times), and the finalise stage: the
winner committed alone on its branch, or rolled back when the kernel's tests fail."""

from __future__ import annotations

import json

import pytest

from pipelines.outcome import GateStatus
from pipelines.perf import catalogue
from pipelines.perf import pipeline
from pipelines.perf import rules as rules_mod
from pipelines.perf.pipeline import Loop
from pipelines.perf.pipeline import Options
from pipelines.perf.pipeline import VariantRecord

SIZE = "24x64"
FAST_TESTS = "test_correctness and dtype0 and False-LlamaAddRMSNorm and 5-123-123"  # against the torch reference
OPS = "src/liger_kernel/ops/fused_add_rms_norm.py"


def dry_options(**extra) -> Options:
    return Options(sizes=(SIZE,), benchmark_sizes=False, interpret=True, tests_k=FAST_TESTS, **extra)


@pytest.mark.slow
def test_the_dry_run_measures_sweeps_and_writes_a_variant_with_its_notes(liger_checkout, tmp_path):
    original = liger_checkout.path(OPS).read_text()
    out = tmp_path / "work"
    options = dry_options(max_variants=1, final_tests_k=FAST_TESTS)
    run = pipeline.run("fused_add_rms_norm", liger_checkout.root, options, out, progress=lambda _: None)
    v0 = json.loads((out / "benchmarks" / "v0.json").read_text())
    assert set(v0["times"]) == {"liger", "eager", "compile"}
    assert all(set(v0["times"][p]) == {"forward", "backward", "full"} for p in v0["times"])
    assert "CPU under TRITON_INTERPRET=1" in v0["device"]["name"]
    sweep = json.loads((out / "benchmarks" / "sweep1.json").read_text())["sweep"]
    assert len(sweep["log"]) == 1 + 4  # the kernel's own warps (none fit a 64-wide block), then 4 num_stages
    [v1] = [r for r in run.variants if r.name == "v1"]
    assert v1.title == "Launch sweep" and v1.tests["ok"] and v1.times["backward"][SIZE] > 0
    notes = (out / "fused_add_rms_norm_v1_notes.md").read_text()
    assert notes.index("## Hypothesis") < notes.index("## Expected outcome") < notes.index("## Actual results")
    assert "no figure here is a speed claim" in notes and "## Verdict" in notes
    assert "_PERF_LAUNCH = " in (out / "fused_add_rms_norm_v1.py").read_text()
    assert (out / "original_fused_add_rms_norm.py").read_text() == original
    assert run.stop == "budget of 1 variants spent" and "no figure here is a speed claim" in run.pr_body
    assert liger_checkout.git.dirty_paths() == []
    if run.branch:  # v1 won on the wall clock: finalise committed it alone
        assert liger_checkout.git.changed_files("main", run.branch) == [OPS]
    else:
        assert liger_checkout.git.current_branch() == "main" and liger_checkout.path(OPS).read_text() == original
    assert json.loads((out / "run.json").read_text())["best"] == run.best


def finalise_loop(checkout, out, winner_text: str) -> Loop:
    options = dry_options(final_tests_k=FAST_TESTS)
    _, profile = pipeline.understand("fused_add_rms_norm", checkout.root, options)
    out.mkdir(parents=True)
    (out / ".interpret").write_text("dry run\n")
    rules = rules_mod.Rules("backward", (SIZE,))
    loop = Loop(checkout, profile, options, out, lambda _: None, rules, checkout.path(OPS).read_text())
    loop.texts = {"v0": loop.original, "v1": winner_text}
    loop.times = {"v0": {"backward": {SIZE: 2.0}}, "v1": {"backward": {SIZE: 1.0}}}
    loop.records = [VariantRecord("v1", "Unused output gradients as None", "v0", rules_mod.Verdict("ACCEPTED", 1.0))]
    loop.state = rules_mod.LoopState(variants=1, best="v1")
    return loop


@pytest.mark.slow
def test_finalise_commits_the_winner_alone_and_rolls_back_one_whose_tests_fail(liger_checkout, tmp_path):
    git = liger_checkout.git
    original = liger_checkout.path(OPS).read_text()
    winner = pipeline.target_style(liger_checkout, OPS, catalogue.unused_grad_none(original, {}))
    gates = pipeline.finalise(
        finalise_loop(liger_checkout, tmp_path / "a", winner), "liger-bot/perf-fused-add-rms-norm"
    )
    assert [g.status for g in gates] == [GateStatus.PASS] * 4, gates  # tests, numeric gate, checkstyle, kernel only
    assert gates[1].name == pipeline.NUMERIC_GATE and gates[1].detail.startswith("max rel err ")
    assert git.current_branch() == "liger-bot/perf-fused-add-rms-norm" and git.dirty_paths() == []
    assert git.changed_files("main") == [OPS] and liger_checkout.path(OPS).read_text() == winner
    assert (
        git.run("log", "-1", "--format=%s").strip()
        == "perf(fused_add_rms_norm): backward 2.00x at 24x64 (Unused output gradients as None)"
    )

    git.checkout("main")
    broken = original.replace("dX_row = rstd_row * m + c * X_row", "dX_row = rstd_row * m - c * X_row")
    assert broken != original
    gates = pipeline.finalise(finalise_loop(liger_checkout, tmp_path / "b", broken), "liger-bot/perf-broken")
    assert gates[0].status is GateStatus.FAIL and "failed" in gates[0].detail
    assert gates[1].status is GateStatus.SKIP and "unit tests failed" in gates[1].detail
    assert git.current_branch() == "main" and not git.branch_exists("liger-bot/perf-broken")
    assert git.dirty_paths() == [] and liger_checkout.path(OPS).read_text() == original
