"""pipelines.registry: the one table of pipelines, read by the command table, the job flow, `liger-bot verify` and
the CLI; reading it loads no torch, and nothing under pipelines/ imports bot/. The toy pipeline
(tests/pipelines/toy/job.py) shows what adding one takes: its folder and one registry line (its App flow through
the worker is tests/bot/test_new_pipeline.py)."""

from __future__ import annotations

import ast
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli import program
from bot.commands import VERBS
from bot.commands import parse_line
from bot.commands import render_help
from bot.runners import VerifyReport
from bot.worker import flow_for
from bot.worker import run_change_job
from pipelines import registry
from pipelines.contract import BRANCH_PREFIX
from pipelines.contract import Pipeline
from pipelines.outcome import ExitStatus
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError
from tests.pipelines.toy import job as toy

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "triton")


@pytest.fixture
def with_toy(monkeypatch):
    """The toy's one registry line."""
    monkeypatch.setitem(registry.PIPELINES, "toy", toy.LOCATION)


def test_reading_the_registry_and_the_verb_table_loads_no_torch():
    code = (
        "import sys\n"
        "from pipelines import registry\n"
        f"before = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "rows = [registry.pipeline(name) for name in registry.names()]\n"
        "import bot.commands, bot.worker\n"
        "bot.commands.render_help()\n"
        f"after = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "print(before, after, len(rows))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "[]", str(len(registry.names()))]


def test_no_pipelines_module_imports_bot():
    upward = []
    for path in sorted((ROOT / "pipelines").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            upward += [f"{path.relative_to(ROOT)}: {n}" for n in names if n == "bot" or n.startswith("bot.")]
    assert upward == []


def test_every_row_is_a_complete_pipeline_and_a_verb_that_starts_its_job_flow():
    assert registry.names() == ("autopatch", "kernel", "chunked-loss", "perf", "fuse")
    for name in registry.names():
        row = registry.pipeline(name)
        assert isinstance(row, Pipeline) and row.usage is not None and callable(row.profile_table)
        assert VERBS[name].pipeline == name and VERBS[name].usage == row.usage.arguments
        assert flow_for(name).run is run_change_job
    with pytest.raises(PipelineError, match="no pipeline runs `nope` yet"):
        registry.pipeline("nope")
    assert registry.profile_table("scan", {}) == "" and "rms_offset" in registry.settings_help("autopatch")


def test_the_toy_is_a_verb_a_job_flow_and_a_verify_target_by_its_registry_line_alone(with_toy):
    assert "| `/liger toy NAME` | write `toy/NAME.txt`" in render_help()
    assert parse_line("/liger toy hello_world").target == "hello_world"
    assert flow_for("toy").run is run_change_job
    assert registry.profile_table("toy", {"name": "x", "greeting": "hi"}).endswith("| greeting | `hi` |")


def test_the_toy_verb_is_gone_with_its_line():
    assert "toy" not in VERBS and "/liger toy" not in render_help()
    with pytest.raises(PipelineError, match="no pipeline runs `toy` yet"):
        flow_for("toy")


def verify(*argv: str) -> tuple[ExitStatus, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = program(["verify", *argv], {}, out, err)
    return status, out.getvalue(), err.getvalue()


def test_liger_bot_verify_runs_the_toy_on_its_branch(with_toy, liger_checkout, tmp_path):
    from pipelines.contract import Request

    outcome = toy.act_verify(Request(liger_checkout, "hello_world"), lambda _event: None)
    assert outcome.ok and outcome.branch == f"{BRANCH_PREFIX}toy-hello_world"
    assert liger_checkout.git.current_branch() == outcome.branch
    report = tmp_path / "report.json"
    status, out, _ = verify(
        "--repo", str(liger_checkout.root), "--pipeline", "toy", "--target", "hello_world", "--job-id", "7",
        "--report", str(report),
    )  # fmt: skip
    assert status is ExitStatus.OK and "| toy file | PASS |" in out
    result = VerifyReport.from_json(json.loads(report.read_text()))
    assert result.passed and result.head_sha == liger_checkout.git.head()
    assert [(g.name, g.status) for g in result.gates] == [("toy file", GateStatus.PASS)]
    status, _, err = verify(
        "--repo", str(liger_checkout.root), "--pipeline", "toy", "--target", "Bad;x", "--job-id", "7"
    )
    assert status is ExitStatus.REFUSED and "is not a kernel name" in err
