"""`liger-bot chunked-loss`: the CLI verb, the `/liger chunked-loss` command and its registration in the App's
tables (pipelines.registry, `liger-bot verify --pipeline chunked-loss`)."""

from __future__ import annotations

import io
import json

import pytest

from bot.cli import program
from bot.commands import Command
from bot.commands import CommandError
from bot.commands import parse_line
from bot.commands import render_help
from pipelines.outcome import ExitStatus


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    return program(argv, {}, out, err), out.getvalue(), err.getvalue()


def test_profile_only_prints_the_profile_as_json_and_writes_nothing(liger_template):
    status, out, _ = _run(["chunked-loss", "trl:dpo:ipo", "--repo", str(liger_template), "--profile-only", "--json"])
    assert status is ExitStatus.OK
    profile = json.loads(out)
    assert profile["module_class_name"] == "LigerFusedLinearIPOLoss" and profile["kind"] == "paired preference"
    assert profile["average_log_prob"] is True and profile["decomposition"]["passed"] is True
    assert any("dpo_trainer.py" in e["file"] for e in profile["evidence"])


def test_refusals_exit_refused_with_a_json_error(liger_template):
    status, out, err = _run(["chunked-loss", "trl:dpo:aot", "--repo", str(liger_template), "--json"])
    assert status is ExitStatus.REFUSED and "does not decompose" in err
    assert json.loads(out)["error"]["status"] == int(ExitStatus.REFUSED)
    status, _, err = _run(["-q", "chunked-loss", "missing.py:f", "--repo", str(liger_template)])
    assert status is ExitStatus.REFUSED and "does not exist" in err


@pytest.mark.parametrize(
    "line, command",
    [
        ("/liger chunked-loss trl:dpo:ipo", Command("chunked-loss", "trl:dpo:ipo")),
        (
            "/liger chunked-loss test/chunked_loss/test_cpo_loss.py:HFCPOLoss --set loss_type=simpo --name simpo2",
            Command(
                "chunked-loss",
                "test/chunked_loss/test_cpo_loss.py:HFCPOLoss",
                settings=("loss_type=simpo",),
                options=(("name", "simpo2"),),
            ),
        ),
    ],
)
def test_the_command_parses(line, command):
    assert parse_line(line) == command


@pytest.mark.parametrize("target", ["trl:dpo", "trl:dpo:IPO;x", "../x.py:f", "/abs.py:f", "ipo"])
def test_bad_loss_specs_are_refused_before_they_become_paths(target):
    with pytest.raises(CommandError):
        parse_line(f"/liger chunked-loss {target}")


def test_the_pipeline_is_registered_for_the_app_and_verify():
    from bot.cli import build_parser
    from pipelines.registry import PIPELINES

    assert "chunked-loss" in PIPELINES and "/liger chunked-loss SPEC" in render_help()
    parser = build_parser()
    args = parser.parse_args(["verify", "--pipeline", "chunked-loss", "--target", "ipo", "--job-id", "1"])
    assert args.pipeline == "chunked-loss"


def test_verify_refuses_a_checkout_without_the_loss(liger_template, tmp_path):
    status, _, err = _run(
        [
            "verify",
            "--repo",
            str(liger_template),
            "--pipeline",
            "chunked-loss",
            "--target",
            "ipo",
            "--job-id",
            "1",
            "--report",
            str(tmp_path / "report.json"),
        ]
    )
    assert status is ExitStatus.REFUSED and "holds no chunked loss named 'ipo'" in err
