"""`liger-bot verify`: what the GPU workflow runs on the bot's branch. Its full runs on real branches are in
test_end_to_end (autopatch `arcee`: the report matches the worker's verdict gate by gate, convergence SKIPs on
this CPU host; kernel `relu2`: the report the App resumes from); here, a failing gate and the refusals."""

from __future__ import annotations

import io
import json

import pytest

from bot.cli import program
from bot.runners import VerifyReport
from pipelines.outcome import ExitStatus
from pipelines.outcome import GateStatus


def verify(*argv: str) -> tuple[ExitStatus, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = program(["verify", *argv], {}, out, err)
    return status, out.getvalue(), err.getvalue()


def test_a_failing_gate_exits_4_and_the_report_still_says_why(liger_checkout, tmp_path):
    broken = liger_checkout.root / "src" / "liger_kernel" / "ops" / "relu2.py"
    broken.write_text("def relu2(x:\n")  # a kernel file that does not even parse
    report = tmp_path / "report.json"
    status, out, _ = verify(
        "--repo", str(liger_checkout.root), "--pipeline", "kernel", "--target", "relu2", "--job-id", "3",
        "--report", str(report),
    )  # fmt: skip
    assert status is ExitStatus.GATE_FAILED
    result = VerifyReport.from_json(json.loads(report.read_text()))
    assert not result.passed and result.gates[0].name == "checkstyle" and result.gates[0].status is GateStatus.FAIL
    assert "relu2.py" in result.gates[0].detail
    assert all(g.status is GateStatus.SKIP and "not run" in g.detail for g in result.gates[1:])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--pipeline", "autopatch", "--target", "../../etc"), "is not a model name"),
        (("--pipeline", "kernel", "--target", "relu2;id"), "is not a kernel name"),
        (("--pipeline", "autopatch", "--target", "arcee", "--settings", "{"), "is not a JSON list"),
        (("--pipeline", "autopatch", "--target", "arcee", "--settings", '["colour=blue"]'), "unknown field 'colour'"),
        (("--pipeline", "fuse", "--target", "m"), "fuse verifies in the worker"),
        (("--pipeline", "kernel", "--target", "relu9"), "holds no kernel named 'relu9'"),
    ],
)
def test_verify_refuses_what_it_cannot_check(liger_checkout, tmp_path, argv, message):
    status, _, err = verify("--repo", str(liger_checkout.root), "--job-id", "1", *argv)
    assert status is ExitStatus.REFUSED and message in err
