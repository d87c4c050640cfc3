"""End to end, every part real: the Flask server on 127.0.0.1 receiving signed deliveries, the GitHub stand-in
(every request and answer checked against GitHub's REST description) holding a real Liger-Kernel 0.8.5
repository, the smart-HTTP git remote, the real `GitHubForge`, a worker in this process draining the real
SQLite queue, and the real pipelines (autopatch for `arcee`, kernel for `relu6`) on the worker's checkouts.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from bot.cli import program
from bot.jobs import JobState
from bot.runners import REPORT_ARTIFACT
from bot.runners import REPORT_FILE
from bot.runners import VerifyReport
from bot.runners import dispatch_profile
from pipelines.outcome import ExitStatus
from tests.bot.standin_app import TARGET
from tests.bot.standin_app import bot_fixture  # noqa: F401
from tests.bot.standin_app import seed_target
from tests.bot.standin_fixtures import *  # noqa: F401,F403
from tests.bot.standin_fixtures import STANDIN_MAINTAINER

pytestmark = pytest.mark.slow


def gpu_runner(bot, run: dict, workdir: Path) -> bytes:
    """What the verify workflow does on its runner: check out the bot's branch, `liger-bot verify`, the report."""
    bare = bot.remote.bare_path(TARGET.owner, TARGET.name)
    subprocess.run(["git", "clone", "-q", "-b", run["ref"], str(bare), str(workdir)], check=True)
    inputs, report = run["inputs"], workdir / "report.json"
    argv = ["verify", "--repo", str(workdir), "--pipeline", inputs["pipeline"], "--target", inputs["target"]]
    argv += ["--job-id", inputs["job_id"], "--settings", inputs["settings"], "--report", str(report)]
    if inputs.get("profile"):  # the workflow writes the dispatched profile to a file and passes --profile
        (workdir.parent / "profile.json").write_text(inputs["profile"])
        argv += ["--profile", str(workdir.parent / "profile.json")]
    status = program(argv, {})
    assert status is ExitStatus.OK
    return report.read_bytes()


def test_autopatch_comment_to_draft_pr_with_the_real_pipeline(bot, liger_checkout, tmp_path):
    seed_target(bot.standin, bot.remote, liger_checkout.root)
    issue = bot.standin.add_issue(TARGET.full_name, "Support Arcee", "AFM-4.5B, please", STANDIN_MAINTAINER)
    command = bot.say(issue, "Could we get this in?\n\n/liger autopatch arcee")

    # GitHub redelivers with the same id, and sometimes a second delivery of one comment arrives with a new one
    first = str(uuid.uuid4())
    assert bot.deliver("issue_comment", command, first) == 202
    assert bot.deliver("issue_comment", command, first) == 200
    assert bot.deliver("issue_comment", command) == 202
    bot.drain()

    (job,) = bot.store.jobs()
    assert (job.verb, job.target, job.job_state) == ("autopatch", "arcee", JobState.AWAITING_APPROVAL)
    reactions = [r for r in bot.standin.reactions if r["comment"] == command["comment"]["id"]]
    assert [r["content"] for r in reactions] == ["eyes"]
    (status,) = bot.comments(issue, "liger-bot:status")
    assert "waiting for approval" in status["body"] and "`rms_casting_mode`" in status["body"]
    assert "Next: `/liger approve`" in status["body"]
    assert bot.remote_head("liger-bot/autopatch-arcee") is None  # nothing pushed before approval

    bot.deliver("issue_comment", bot.say(issue, "/liger approve"))
    bot.drain()

    job = bot.store.get(job.id)
    assert job.job_state is JobState.PR_OPENED, job.message
    head = bot.remote_head("liger-bot/autopatch-arcee")
    assert head is not None and head == job.pushed_sha  # pushed over smart HTTP with the installation token
    (pull,) = bot.standin.pulls(TARGET.full_name)
    assert pull["pull"] == {"head": "liger-bot/autopatch-arcee", "base": "main", "draft": True}
    assert pull["number"] == job.pr_number
    body = pull["body"]
    assert "### Profile" in body and "| rms_casting_mode |" in body  # the profile
    assert "| Check | Status | Detail |" in body and "| Instance patching | PASS |" in body  # the verify table
    assert "| Convergence bf16 FLCE | SKIP | needs GPU runner |" in body  # never PASS without a GPU
    (status,) = bot.comments(issue, "liger-bot:status")  # the same comment, edited
    assert "draft PR opened" in status["body"] and f"#{job.pr_number}" in status["body"]
    assert "✓ waiting for approval → ✓ acting → ✓ verifying → **PR opened**" in status["body"]

    # the same comment delivered once more after the PR opened: no second job, PR or status comment
    assert bot.deliver("issue_comment", command) == 202
    bot.drain()
    assert len(bot.store.jobs()) == 1 and len(bot.standin.pulls(TARGET.full_name)) == 1
    assert len(bot.comments(issue, "liger-bot:status")) == 1
    assert bot.standin.count("POST", r"/pulls$") == 1

    # `liger-bot verify` on the pushed branch, as the GPU workflow runs it: on this CPU host its report gives the
    # verdict the worker gave, gate by gate (convergence SKIPs here; on a GPU host it runs)
    inputs = {"job_id": str(job.id), "pipeline": "autopatch", "target": "arcee", "settings": "[]"}
    inputs["profile"] = dispatch_profile(job.profile)  # what an Actions dispatch carries: the approved profile
    report = VerifyReport.from_json(json.loads(gpu_runner(bot, {"ref": job.branch, "inputs": inputs}, tmp_path / "r")))
    assert report.job_id == str(job.id) and report.passed and report.head_sha == job.pushed_sha
    assert [(g.name, g.status.value) for g in report.gates] == [(g["name"], g["status"]) for g in job.result["gates"]]


def test_kernel_on_the_actions_runner_parks_then_opens_the_pr_from_the_workflow_report(bot, liger_checkout, tmp_path):
    config = "autonomous: true\nrunner:\n  kind: actions\n  labels: [self-hosted, gpu, h200]\n"
    seed_target(bot.standin, bot.remote, liger_checkout.root, config)
    issue = bot.standin.add_issue(TARGET.full_name, "A ReLU² kernel", "for Nemotron-H", STANDIN_MAINTAINER)
    bot.deliver("issue_comment", bot.say(issue, "/liger kernel relu6"))
    bot.drain()

    (job,) = bot.store.jobs()
    assert (job.verb, job.target, job.job_state) == ("kernel", "relu6", JobState.VERIFYING)
    assert job.branch == "liger-bot/kernel-relu6" and bot.remote_head(job.branch) == job.pushed_sha
    (run,) = bot.standin.runs.values()
    assert run["workflow_file"] == "liger-bot-verify.yml" and run["ref"] == job.branch
    assert run["inputs"] == {
        "job_id": str(job.id),
        "pipeline": "kernel",
        "target": "relu6",
        "runner_labels": '["self-hosted", "gpu", "h200"]',
        "settings": "[]",
        "profile": dispatch_profile(job.profile),  # the profile act applied, as the runner verifies it
    }
    assert json.loads(run["inputs"]["profile"]) and "evidence" not in run["inputs"]["profile"]
    assert bot.standin.pulls(TARGET.full_name) == []  # no PR before the GPU verdict
    (status,) = bot.comments(issue, "liger-bot:status")
    assert "waiting for `liger-bot-verify.yml`" in status["body"] and "~~waiting for approval~~" in status["body"]
    assert bot.worker.sweep() == []  # parked: the workflow holds the lease, no sweep re-runs the job

    report = gpu_runner(bot, run, tmp_path / "runner")
    gates = VerifyReport.from_json(json.loads(report)).gates
    assert [g.name for g in gates][:2] == ["checkstyle", "unit tests (CPU, TRITON_INTERPRET=1)"]
    event = bot.standin.complete_run(run["id"], "success", {REPORT_ARTIFACT: {REPORT_FILE: report}})
    bot.deliver("workflow_run", event)
    bot.drain()

    job = bot.store.get(job.id)
    assert job.job_state is JobState.PR_OPENED, job.message
    assert job.result["workflow_run"] == {"id": run["id"], "conclusion": "success"}
    (pull,) = bot.standin.pulls(TARGET.full_name)
    assert pull["pull"]["head"] == "liger-bot/kernel-relu6" and pull["pull"]["draft"] is True
    assert "| unit tests (CPU, TRITON_INTERPRET=1) | PASS |" in pull["body"]
    assert "Kernel profile" in pull["body"] and "LigerReLU6" in pull["body"]
