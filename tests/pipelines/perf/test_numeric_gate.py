"""The numeric gate: a variant against the original (v0) at the run's sizes, forward and backward, in the child that
times it. Liger's unit tests stop at 1,500 columns, so a wrong path that switches on for wide rows only passes them;
the gate must reject it (in the loop and in Finalize) and keep a correct one. A CPU run under TRITON_INTERPRET=1, at
4 x 4096 with the looped forward switched on from BLOCK_SIZE 4096 (so Liger's tests never reach it)."""

from __future__ import annotations

import json

import pytest

from pipelines.outcome import GateStatus
from pipelines.perf import catalogue
from pipelines.perf import measure
from pipelines.perf import pipeline
from pipelines.perf import rules as rules_mod
from pipelines.perf.pipeline import Loop
from pipelines.perf.pipeline import Options

SIZE = "4x4096"
OPS = "src/liger_kernel/ops/poly_norm.py"
TESTS = "test_correctness and dtype0 and 5-123-123"  # Liger's own test, against its torch reference (123 columns)
WIDE_ONLY = {"chunk": 1024, "warps": 4, "from_block": 4096}  # the looped forward for rows of 4096 columns and more
FIRST_LOOP = "for chunk_start in range(0, n_cols, BLOCK_SIZE):"


def variants(original: str) -> tuple[str, str]:
    """(correct, wrong): the looped forward, and the same with a statistics loop that skips the row's last chunk."""
    correct = catalogue.looped_forward(original, WIDE_ONLY)
    wrong = correct.replace(FIRST_LOOP, "for chunk_start in range(0, n_cols - BLOCK_SIZE, BLOCK_SIZE):", 1)
    assert wrong != correct and correct.count(FIRST_LOOP) == 2
    return correct, wrong


def gate_loop(checkout, out) -> Loop:
    """A forward loop on poly_norm at 4 x 4096, as `run` builds it after the baseline. The baseline's times are
    stand-ins (the interpreter's wall clock claims nothing): slow enough that any variant gains, and no regression
    limit a wall clock could trip, so the verdict is the tests' and the numeric gate's alone."""
    options = Options(target_pass="forward", sizes=(SIZE,), benchmark_sizes=False, interpret=True, tests_k=TESTS)
    options.final_tests_k = TESTS
    _, profile = pipeline.understand("poly_norm", checkout.root, options)
    out.mkdir(parents=True)
    (out / ".interpret").write_text("dry run\n")
    slow = {p: {SIZE: 1e9} for p in ("forward", "backward", "full")}
    profile.measured = {"times": {"compile": slow, "eager": slow}, "device": {"name": "CPU"}}
    rules = rules_mod.Rules("forward", (SIZE,), size_regression=1e9, pass_regression=1e9)
    loop = Loop(checkout, profile, options, out, lambda _: None, rules, checkout.path(OPS).read_text())
    loop.texts["v0"], loop.times["v0"] = loop.original, slow
    return loop


@pytest.mark.slow
def test_a_wrong_wide_row_path_that_passes_liger_s_tests_is_rejected_and_a_correct_one_accepted(
    liger_checkout, tmp_path
):
    loop = gate_loop(liger_checkout, tmp_path / "work")
    correct, wrong = variants(loop.original)
    bad = loop.try_variant("Looped forward, last chunk skipped", wrong, "-", "-", "-")
    assert bad.tests["ok"] and "1 passed" in bad.tests["summary"]  # Liger's test runs the narrow path: it passes
    assert bad.verdict.status == rules_mod.REJECTED and bad.times is None
    [reason] = bad.verdict.reasons
    assert reason.startswith(f"numeric gate: output at {SIZE}: max rel err ") and "vs fp32" in reason
    assert not bad.numeric["ok"] and bad.numeric["dtype"] == "float32"  # the interpreter's; bf16 on the GPU
    [checked] = bad.numeric["sizes"]
    failed = {row["tensor"] for row in checked["tensors"] if not row["ok"]}
    assert {"output", "grad x", "grad weight"} <= failed  # forward and backward both wrong; dB is the dy sum
    assert all(row["rel"] > 0.01 for row in checked["tensors"] if row["tensor"] in failed)
    # the variants' log (the PR body's table) and the variant's notes say why
    assert "REJECTED numeric gate: output at 4x4096" in pipeline.report.comparison(loop)
    assert "NUMERIC GATE FAILED" in (tmp_path / "work" / "poly_norm_v1_notes.md").read_text()

    good = loop.try_variant("Looped forward", correct, "-", "-", "-")
    assert good.verdict.status == rules_mod.ACCEPTED, good.verdict
    assert good.numeric["ok"] and good.numeric["summary"].startswith("max rel err ")
    [checked] = good.numeric["sizes"]
    assert {row["tensor"] for row in checked["tensors"]} == {"output", "grad x", "grad weight", "grad bias"}
    # the looped path ran (it sums in another order than v0's register row), and within the limit
    output = next(row for row in checked["tensors"] if row["tensor"] == "output")
    assert 0 < output["rel"] <= output["limit"] == measure.NUMERIC_FLOOR["float32"]
    assert liger_checkout.git.dirty_paths() == []  # the original is back between children


@pytest.mark.slow
def test_finalize_reports_the_numeric_gate_and_rolls_back_a_winner_that_fails_it(liger_checkout, tmp_path):
    git = liger_checkout.git
    loop = gate_loop(liger_checkout, tmp_path / "a")
    correct, wrong = variants(loop.original)

    def finalise(loop: Loop, text: str, branch: str):
        loop.texts["v1"] = pipeline.target_style(liger_checkout, OPS, text)
        loop.times["v1"] = {p: {SIZE: 1.0} for p in ("forward", "backward", "full")}
        loop.records = [pipeline.VariantRecord("v1", "Looped forward", "v0", rules_mod.Verdict("ACCEPTED", 1.0))]
        loop.state = rules_mod.LoopState(variants=1, best="v1")
        return pipeline.finalise(loop, branch)

    gates = finalise(loop, wrong, "liger-bot/perf-poly-norm-wrong")
    by_name = {g.name: g for g in gates}
    assert by_name[f"unit tests (GPU): test/transformers/test_poly_norm.py (-k {TESTS})"].status is GateStatus.PASS
    numeric = by_name[pipeline.NUMERIC_GATE]
    assert numeric.status is GateStatus.FAIL and numeric.detail.startswith(f"output at {SIZE}: max rel err ")
    assert git.current_branch() == "main" and not git.branch_exists("liger-bot/perf-poly-norm-wrong")
    assert git.dirty_paths() == [] and liger_checkout.path(OPS).read_text() == loop.original

    loop = gate_loop(liger_checkout, tmp_path / "b")
    gates = finalise(loop, correct, "liger-bot/perf-poly-norm")
    numeric = next(g for g in gates if g.name == pipeline.NUMERIC_GATE)
    assert [g.status for g in gates] == [GateStatus.PASS] * 4, gates
    assert numeric.detail.startswith("max rel err ") and f"at {SIZE} (" in numeric.detail
    assert "float32, forward and backward, every output and gradient at 4x4096" in numeric.detail
    assert git.changed_files("main") == [OPS]
    final = json.loads((tmp_path / "b" / "benchmarks" / "final.json").read_text())
    assert final["numeric"]["ok"] and final["tests"]["ok"]
    assert "| Numeric gate at the benchmark sizes | PASS | max rel err" in pipeline.report.pr_body(loop, "done", gates)


def test_the_limit_is_twice_v0_s_own_error_or_one_unit_of_the_dtype():
    import torch

    torch.manual_seed(0)
    reference = {"output": torch.randn(64, 512) + 1.0}
    original = {"output": reference["output"].to(torch.bfloat16)}  # v0: the bf16 rounding of the fp32 result
    rounded = compare_one(original["output"], original, reference)
    assert rounded["ok"] and rounded["rel"] == rounded["v0_rel"] > 0
    assert rounded["limit"] == max(2 * rounded["v0_rel"], 2.0**-7)
    scaled = reference["output"].clone()
    scaled[:, 256:] *= 1.02  # a wrong scale on the second half of the row only
    assert not compare_one(scaled.to(torch.bfloat16), original, reference)["ok"]
    missing = measure.compare({}, original, reference, "bfloat16")[0]
    assert not missing["ok"] and missing["why"] == "the variant does not produce it"
    broken = original["output"].clone()
    broken[0, 0] = float("nan")
    assert "non-finite" in compare_one(broken, original, reference)["why"]


def compare_one(got, original, reference) -> dict:
    [row] = measure.compare({"output": got}, original, reference, "bfloat16")
    return row


def test_the_gate_finds_what_a_closure_returned_by_the_setup_holds():
    import torch

    x, r = torch.randn(2, 8, requires_grad=True), torch.randn(2, 8, requires_grad=True)
    layer = torch.nn.Linear(8, 8)
    found = measure.leaves([x, lambda _: layer(x + r)])  # fused_add_rms_norm's setup returns such a closure
    assert list(found) == ["x", "layer.weight", "layer.bias", "r"]
    assert found["x"] is x and found["r"] is r and found["layer.weight"] is layer.weight
    assert list(measure.leaves([x, layer])) == ["x", "weight", "bias"]
