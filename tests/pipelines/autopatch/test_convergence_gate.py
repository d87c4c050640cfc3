"""The convergence gate on a GPU host: Liger's four files in one pytest run, each file's cases read back from JUnit.

The files here are stand-ins with the target's paths and test name (a GPU is not needed to check how the gate
runs pytest and reads its report); `has_gpu=True` makes the gate run them.
"""

from __future__ import annotations

import pytest

from pipelines.autopatch import act
from pipelines.autopatch import verify
from pipelines.outcome import GateStatus
from tests.pipelines.autopatch.hand_profiles import hand_profile

CASES = {
    "bf16/test_mini_models.py": "assert True",
    "bf16/test_mini_models_with_logits.py": "assert True",
    "fp32/test_mini_models.py": "assert False, '[Loss] Number of mismatched elements: 3'",
    "fp32/test_mini_models_with_logits.py": "pytest.skip('Helium not available in this version of transformers')",
}


def _packages(root):
    """Liger's test tree is packages (two files named test_mini_models.py)."""
    for folder in ("test", "test/convergence", "test/convergence/bf16", "test/convergence/fp32"):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "__init__.py").write_text("")


@pytest.mark.slow
def test_each_file_gets_its_own_gate(tmp_path):
    _packages(tmp_path)
    for path, body in CASES.items():
        test = tmp_path / "test/convergence" / path
        test.write_text(
            "import pytest\n\n\n"
            "@pytest.mark.parametrize('model_name, steps', [('mini_helium', 32), ('mini_helium2', 32), ('mini_llama', 32)])\n"
            f"def test_mini_model(model_name, steps):\n    if model_name == 'mini_helium':\n        {body}\n"
        )
    gates = verify.gate_convergence(hand_profile("helium"), tmp_path, verify.LocalRunner(has_gpu=True))
    by_name = {g.name: g for g in gates}
    assert [g.name for g in gates] == [verify.convergence_gate_name(p) for p in act.CONVERGENCE_FILES]
    assert by_name["Convergence bf16 FLCE"].status is GateStatus.PASS
    assert by_name["Convergence bf16 FLCE"].detail == "1 passed"  # mini_helium2 and mini_llama are not its cases
    failed = by_name["Convergence fp32 FLCE"]
    assert failed.status is GateStatus.FAIL and failed.hard and "Number of mismatched elements" in failed.detail
    skipped = by_name["Convergence fp32 with_logits"]
    assert skipped.status is GateStatus.SKIP and not skipped.hard and "not available" in skipped.detail


def test_a_file_without_the_case_fails(tmp_path):
    _packages(tmp_path)
    for path in CASES:
        test = tmp_path / "test/convergence" / path
        test.write_text("def test_mini_model():\n    pass\n")
    gates = verify.gate_convergence(hand_profile("helium"), tmp_path, verify.LocalRunner(has_gpu=True))
    assert all(g.status is GateStatus.FAIL and "no mini case collected" in g.detail for g in gates)
