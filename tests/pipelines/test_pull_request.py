"""The PR body in the target's own PR template (Liger's: Summary, Testing Done with Hardware Type and the make
checklist), checked against a golden file; a checkout without a template gets the same sections plainly."""

from __future__ import annotations

from pathlib import Path

from pipelines import pull_request
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.outcome import Report

GOLDEN = Path(__file__).parent / "golden" / "pr_body_liger_template.md"
HOST = "CPU only (TRITON_INTERPRET=1; the GPU gates SKIP and say so)"
VERSIONS = {"liger-bot": "0.1.0", "transformers": "5.24.0", "torch": "2.13.0", "triton": "3.9.0"}
GATES = (
    GateResult("Checkstyle", GateStatus.PASS, "ruff check . && ruff format --check ."),
    GateResult("Instance patching", GateStatus.PASS, "3 passed"),
    GateResult("Convergence fp32 FLCE", GateStatus.SKIP, "needs GPU runner"),
)


def parts() -> pull_request.BodyParts:
    return pull_request.BodyParts(
        summary="Adds `apply_liger_kernel_to_olmo`.\n\n- `src/liger_kernel/transformers/model/olmo.py`",
        details="### Profile\n\n| Decision | Value |\n|---|---|\n| rope | `'standard'` |",
        make_targets={"checkstyle": ("Checkstyle",), "test-convergence": ("Convergence fp32 FLCE",)},
        reproduce="liger-bot autopatch olmo --repo DIR",
    )


def rendered(checkout, gates=GATES) -> str:
    return pull_request.body(checkout, parts(), Report(tuple(gates)), VERSIONS, HOST)


def test_liger_s_template_is_filled_in_its_order_and_matches_the_golden_file(liger_checkout):
    body = rendered(liger_checkout)
    assert body == GOLDEN.read_text()  # regenerate by writing `body` there and reading the diff
    assert "<!--" not in body and "<BLANK>" not in body  # the template's instructions to a person are gone
    order = [body.index(h) for h in ("## Summary", "## Details", "## Testing Done", "Versions", "Reproduce")]
    assert order == sorted(order)


def test_a_box_is_ticked_only_when_every_gate_standing_for_it_passed(liger_checkout):
    body = rendered(liger_checkout)
    assert "- [x] run `make checkstyle`" in body
    assert "- [ ] run `make test-convergence`" in body  # the GPU gate skipped on this host
    assert "- [ ] run `make test` to ensure correctness (not run by liger-bot)" in body
    passed = (*GATES[:2], GateResult("Convergence fp32 FLCE", GateStatus.PASS, "4 passed"))
    assert "- [x] run `make test-convergence`" in rendered(liger_checkout, passed)


def test_without_a_template_the_same_sections_follow_one_another(liger_checkout):
    liger_checkout.path(pull_request.TEMPLATE).unlink()
    body = rendered(liger_checkout)
    assert body.startswith("## Summary\n\nAdds `apply_liger_kernel_to_olmo`.")
    assert "## Details" in body and "## Testing Done" in body and "| target | liger_kernel 0.8.5 |" in body


def test_a_kernel_run_s_body_fills_the_same_template(liger_checkout):
    from pipelines.kernel import pipeline as kernel_pipeline

    _, _, profile = kernel_pipeline.understand("relu6", liger_checkout.root)
    gates = [GateResult("checkstyle", GateStatus.PASS, "ruff: 7 files")]
    body = kernel_pipeline.pr_body(liger_checkout, profile, gates, liger_checkout.root.parent, "relu6", force=True)
    assert body.startswith("## Summary\n\nAdds `LigerReLU6`, a Triton kernel generated from")
    assert "- [x] run `make checkstyle` to ensure code style (liger-bot: checkstyle)" in body
    assert "liger-bot kernel relu6 --repo DIR --name relu6 --force" in body
    assert "<summary>Kernel profile</summary>" in body and "## Testing Done" in body
