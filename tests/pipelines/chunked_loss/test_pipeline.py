"""End to end on a real Liger-Kernel checkout: TRL's IPO (the loss type Liger 0.8.5's DPO refuses) becomes a chunked
loss whose files pass the target's ruff, import, and their own tests on the CPU; the GPU gates SKIP here. A wrong
per-chunk loss fails the test gate; a refusal leaves the checkout untouched."""

from __future__ import annotations

import pytest

from pipelines import target
from pipelines.chunked_loss import pipeline
from pipelines.chunked_loss import verify
from pipelines.chunked_loss.act import LossFiles
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError


@pytest.fixture(scope="module")
def ipo_run(tmp_path_factory, liger_template):
    """One pipeline run shared by this file's tests (the run is the slow part: ~20 s on a CPU host)."""
    root = tmp_path_factory.mktemp("chunked-loss")
    checkout = target.fetch(root / "liger-kernel")
    run = pipeline.run("trl:dpo:ipo", checkout.root, out_dir=root / "out", progress=lambda _: None)
    return checkout, run, root / "out"


@pytest.mark.slow
def test_trl_ipo_end_to_end(ipo_run):
    checkout, run, out = ipo_run
    statuses = {g.name: g.status for g in run.gates}
    assert statuses == {
        "checkstyle": GateStatus.PASS,
        "import": GateStatus.PASS,
        "unit tests (CPU)": GateStatus.PASS,
        "unit tests (GPU)": GateStatus.SKIP,  # never PASS without a GPU
        "benchmark (GPU)": GateStatus.SKIP,
    }, run.gates
    assert not run.failed and run.branch == "liger-bot/chunked-loss-ipo"
    assert checkout.git.current_branch() == run.branch and checkout.git.dirty_paths() == []
    loss = checkout.path(LossFiles.of("ipo").loss).read_text()
    assert "class LigerFusedLinearIPOFunction(LigerFusedLinearPreferenceBase):" in loss
    assert "class LigerFusedLinearIPOLoss(torch.nn.Module):" in loss
    init = checkout.path("src/liger_kernel/chunked_loss/__init__.py").read_text()
    assert (
        init.index("grpo_loss import") < init.index("ipo_loss import LigerFusedLinearIPOLoss") < init.index("jsd_loss")
    )
    functional = checkout.path("src/liger_kernel/chunked_loss/functional.py").read_text()
    assert functional.rstrip().endswith("liger_fused_linear_ipo = LigerFusedLinearIPOFunction.apply")
    assert checkout.path(LossFiles.of("ipo").benchmark).is_file()
    body = (out / "pr_body.md").read_text()
    assert "| checkstyle | PASS |" in body and "liger-bot chunked-loss trl:dpo:ipo --repo DIR --name ipo" in body


@pytest.mark.slow
def test_a_wrong_per_chunk_loss_fails_the_test_gate(ipo_run):
    """The gate tells a right loss from a wrong one: the generated loss with its sign flipped fails its tests."""
    checkout, _, _ = ipo_run
    path = checkout.path(LossFiles.of("ipo").loss)
    right = path.read_text()
    wrong = right.replace(
        "return per_sequence_loss.sum() / n_sequences", "return -per_sequence_loss.sum() / n_sequences"
    )
    assert wrong != right
    path.write_text(wrong)
    try:
        gate = verify.unit_tests(checkout, "ipo", on_gpu=False)
    finally:
        path.write_text(right)
    assert gate.status is GateStatus.FAIL and gate.hard
    assert "Mismatch" in gate.detail or "assert" in gate.detail.lower()


def test_a_loss_that_does_not_decompose_is_refused_and_nothing_written(ipo_run):
    checkout, _, _ = ipo_run
    head, branch = checkout.git.head(), checkout.git.current_branch()
    with pytest.raises(PipelineError, match="does not decompose over chunks"):
        pipeline.run("trl:dpo:aot", checkout.root, progress=lambda _: None)
    assert checkout.git.head() == head and checkout.git.current_branch() == branch
    assert checkout.git.dirty_paths() == []


def test_an_existing_loss_name_is_refused(ipo_run):
    checkout, _, _ = ipo_run
    with pytest.raises(PipelineError, match="exists already") as error:
        pipeline.run("test/chunked_loss/test_dpo_loss.py:HFDPOLoss", checkout.root, progress=lambda _: None)
    assert "--name" in error.value.hint
