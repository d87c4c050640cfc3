"""The pipeline end to end on a fresh checkout: one commit on the branch, the user's branch clean, refusals and
gate failures leave the checkout exactly as it was."""

from __future__ import annotations

import json

import pytest

from pipelines.autopatch import pipeline
from pipelines.autopatch import verify
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError
from tests.pipelines.autopatch.hand_profiles import hand_profile


def _state(checkout):
    git = checkout.git
    return git.current_branch(), git.head(), git.run("branch", "--list").split(), git.dirty_paths()


@pytest.mark.slow
def test_unsupported_model_end_to_end(liger_checkout):
    before = _state(liger_checkout)
    messages = []
    # the whole-model and CPU-numerics gates run in the App's and the demo's end-to-end tests and in their own files
    # (test_whole_model.py): here the pipeline's branch, commit, report and PR body (suite time)
    gates = tuple((name, gate) for name, gate in verify.GATES if name not in (verify.WHOLE_MODEL, verify.CPU_NUMERICS))
    result = pipeline.run_pipeline(
        liger_checkout, hand_profile("hyperclovax"), messages.append, verify.LocalRunner(has_gpu=False), gates
    )
    assert result.ok, result.summary()
    git = liger_checkout.git
    assert git.run("rev-list", "--count", f"main..{result.branch}").strip() == "1"
    assert result.branch == "liger-bot/autopatch-hyperclovax" and git.branch_exists(result.branch)
    assert git.run("rev-parse", result.branch).strip() == result.commit
    assert _state(liger_checkout)[:2] == before[:2] and git.dirty_paths() == []
    assert "src/liger_kernel/transformers/model/hyperclovax.py" in git.changed_files("main", result.branch)
    assert "| Check | Status | Detail |" in result.pr_body and "| Checkstyle | PASS |" in result.pr_body
    assert "| Convergence fp32 FLCE | SKIP | needs GPU runner |" in result.pr_body
    assert result.report_path.is_file() and liger_checkout.root not in result.report_path.parents
    out = result.to_json()
    assert {"profile", "branch", "files", "gates", "pr_body"} <= set(out) and json.dumps(out)
    assert any(m.startswith("verify:") for m in messages)


def test_supported_model_is_refused_before_anything_is_written(liger_checkout):
    before = _state(liger_checkout)
    with pytest.raises(PipelineError, match="already supported"):
        pipeline.run_pipeline(liger_checkout, hand_profile("mistral"), lambda _: None)
    assert _state(liger_checkout) == before
    assert not pipeline.report_path(liger_checkout, "mistral").parent.exists()


def _failing_gate(profile, root, runner):
    assert (root / "src/liger_kernel/transformers/model/hyperclovax.py").is_file()  # the patch is in the tree
    return GateResult("Forced failure", GateStatus.FAIL, "forced by the test")


@pytest.mark.slow
def test_gate_failure_leaves_the_tree_clean(liger_checkout):
    before = _state(liger_checkout)
    gates = (("Import", verify.gate_import), ("Forced failure", _failing_gate), ("Checkstyle", verify.gate_checkstyle))
    result = pipeline.run_pipeline(
        liger_checkout, hand_profile("hyperclovax"), lambda _: None, verify.LocalRunner(has_gpu=False), gates
    )
    assert not result.ok and result.commit is None
    assert [g.status for g in result.gates] == [GateStatus.PASS, GateStatus.FAIL, GateStatus.SKIP]
    assert _state(liger_checkout) == before
    assert "forced by the test" in result.report_path.read_text()


def _raising_gate(profile, root, runner):
    raise RuntimeError("gate crashed")


@pytest.mark.slow
def test_error_mid_run_restores_the_checkout(liger_checkout):
    before = _state(liger_checkout)
    with pytest.raises(RuntimeError, match="gate crashed"):
        pipeline.run_pipeline(
            liger_checkout,
            hand_profile("hyperclovax"),
            lambda _: None,
            verify.LocalRunner(has_gpu=False),
            (("Crash", _raising_gate),),
        )
    assert _state(liger_checkout) == before
