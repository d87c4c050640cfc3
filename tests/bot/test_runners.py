"""Runners: local gates in-process; Actions dispatch on the bot's branch, resumed from the report artifact."""

from __future__ import annotations

import json

import pytest

from bot.gitops import push_branch
from bot.runners import ActionsRunner
from bot.runners import Dispatched
from bot.runners import VerifyReport
from bot.runners import VerifyRequest
from bot.runners import WorkflowKind
from bot.runners import classify_workflow_run
from bot.runners import dispatch_profile
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError
from tests.bot.standin_fixtures import *  # noqa: F401,F403
from tests.bot.standin_fixtures import BOT_BRANCH as BRANCH
from tests.bot.standin_fixtures import STANDIN_REPO

REQUEST = VerifyRequest(STANDIN_REPO, BRANCH, "autopatch", "nemotron", "job-7")
GATES = (GateResult("import", GateStatus.PASS), GateResult("convergence (GPU)", GateStatus.FAIL, "loss diverged"))


def test_report_json_round_trip_and_malformed_reports():
    report = VerifyReport("job-7", GATES)
    assert VerifyReport.from_json(json.loads(json.dumps(report.to_json()))) == report
    soft = VerifyReport("j", (GateResult("bench", GateStatus.FAIL, hard=False),))
    assert soft.passed
    with pytest.raises(PipelineError):
        VerifyReport.from_json({"job_id": "j", "gates": [{"name": "x", "status": "MAYBE"}]})
    # the runner's hardware reaches the PR body as one line of plain text
    hostile = {"job_id": "j", "gates": [], "hardware": "NVIDIA H200\n| <img src=x onerror=alert(1)> [x](y)" + "z" * 500}
    hardware = VerifyReport.from_json(hostile).hardware
    assert hardware.startswith("NVIDIA H200 ") and len(hardware) <= 120
    assert not set(hardware) & set("|<>[]\n=")


def test_actions_runner_dispatches_then_resumes_from_the_artifact(bot_checkout, github_forge, github_standin):
    push_branch(bot_checkout, BRANCH, github_forge.clone_url(STANDIN_REPO), github_forge.push_credentials(STANDIN_REPO))
    runner = ActionsRunner(github_forge, labels=("self-hosted", "gpu", "h100"))
    sent = runner.start(REQUEST)
    (run,) = github_standin.runs.values()
    assert (sent.workflow, sent.branch, sent.actor, sent.run_id) == (
        "liger-bot-verify.yml",
        BRANCH,
        "liger-bot[bot]",
        run["id"],
    )
    assert isinstance(sent, Dispatched)
    assert run["inputs"]["runner_labels"] == '["self-hosted", "gpu", "h100"]'
    assert run["title"] == "liger-bot verify job-7"

    report = json.dumps(VerifyReport("job-7", GATES).to_json()).encode()
    event = github_standin.complete_run(run["id"], "failure", {"liger-bot-report": {"report.json": report}})
    kind, finished = classify_workflow_run(event)
    assert kind is WorkflowKind.VERIFY and finished.head_branch == BRANCH
    resumed = runner.resume(STANDIN_REPO, finished, "job-7")
    assert resumed.gates == GATES


def test_actions_run_without_report_is_a_failed_gate(bot_checkout, github_forge, github_standin):
    push_branch(bot_checkout, BRANCH, github_forge.clone_url(STANDIN_REPO), github_forge.push_credentials(STANDIN_REPO))
    runner = ActionsRunner(github_forge)
    runner.start(REQUEST)
    (run,) = github_standin.runs.values()
    _, finished = classify_workflow_run(github_standin.complete_run(run["id"], "cancelled"))
    report = runner.resume(STANDIN_REPO, finished, "job-7")
    assert not report.passed and "cancelled" in report.gates[0].detail


def test_actions_runner_refuses_branches_that_are_not_the_bots(github_forge):
    with pytest.raises(PipelineError):
        ActionsRunner(github_forge).start(VerifyRequest(STANDIN_REPO, "main", "autopatch", "nemotron", "j"))


def test_workflow_run_events_are_classified_by_path_and_branch():
    def event(path, branch="liger-bot/x", action="completed"):
        run = {"id": 1, "status": "completed", "conclusion": "success", "path": path, "head_branch": branch}
        return {"action": action, "workflow_run": run}

    assert classify_workflow_run(event(".github/workflows/liger-bot-scan.yml", "main"))[0] is WorkflowKind.SCAN
    assert classify_workflow_run(event(".github/workflows/liger-bot-verify.yml"))[0] is WorkflowKind.VERIFY
    assert classify_workflow_run(event(".github/workflows/liger-bot-verify.yml", "main")) is None
    assert classify_workflow_run(event(".github/workflows/ci.yml")) is None
    assert classify_workflow_run(event(".github/workflows/liger-bot-verify.yml", action="requested")) is None


def test_the_dispatch_carries_the_applied_profile_without_its_evidence(bot_checkout, github_forge, github_standin):
    push_branch(bot_checkout, BRANCH, github_forge.clone_url(STANDIN_REPO), github_forge.push_credentials(STANDIN_REPO))
    evidence = [{"file": "modeling_x.py", "lines": [1, 2], "snippet": "x" * 40_000}]
    profile = {"model_type": "nemotron", "decisions": {"rope": {"value": "standard", "evidence": evidence}}}
    request = VerifyRequest(STANDIN_REPO, BRANCH, "autopatch", "nemotron", "job-7", profile=profile)
    ActionsRunner(github_forge).start(request)
    (run,) = github_standin.runs.values()
    assert json.loads(run["inputs"]["profile"]) == {
        "model_type": "nemotron",
        "decisions": {"rope": {"value": "standard"}},
    }
    too_big = {"model_type": "nemotron", "notes": ["y" * 40_000]}  # past GitHub's input cap: the runner derives it
    assert dispatch_profile(too_big) == "" and dispatch_profile(None) == ""
