"""verify: gates run in order on a real checkout; a hard failure stops the run; no GPU means SKIP, never PASS."""

from __future__ import annotations

from pipelines.autopatch import verify
from pipelines.outcome import GateStatus
from pipelines.outcome import hard_failure
from tests.pipelines.autopatch.hand_profiles import hand_profile


def test_convergence_without_gpu_is_skipped_never_passed(liger_checkout):
    gates = verify.gate_convergence(hand_profile("mistral"), liger_checkout.root, verify.LocalRunner(has_gpu=False))
    assert len(gates) == 4
    assert {g.status for g in gates} == {GateStatus.SKIP}
    assert all(g.detail == "needs GPU runner" and not g.hard for g in gates)


def test_import_failure_is_hard_and_stops_the_run(liger_checkout):
    # the untouched checkout has no apply_liger_kernel_to_helium: the import gate fails for real
    said: list[str] = []
    results = verify.verify(hand_profile("helium"), liger_checkout.root, verify.LocalRunner(has_gpu=False), said.append)
    assert results[0].name == "Checkstyle" and results[0].status is GateStatus.PASS  # checkstyle comes first
    # each verdict is said as it lands (a runner killed at its timeout still shows the gates that finished)
    assert said[:2] == ["verify: Checkstyle", f"verify: Checkstyle: PASS: {results[0].detail}"]
    assert said[3].startswith("verify: Import: FAIL: `") and len(said) == 4
    assert results[1].name == "Import" and results[1].status is GateStatus.FAIL and results[1].hard
    assert "apply_liger_kernel_to_helium" in results[1].detail
    assert [g.status for g in results[2:]] == [GateStatus.SKIP] * (len(verify.GATES) - 2)
    assert all(g.detail == "not run: Import failed" for g in results[2:])
    assert hard_failure(results)


def test_instance_gate_selects_exact_tests():
    ids = verify.instance_test_ids("qwen3")
    assert ids[0].endswith("::test_apply_liger_kernel_to_instance_for_qwen3")
    assert not any("qwen3_vl" in i for i in ids)
