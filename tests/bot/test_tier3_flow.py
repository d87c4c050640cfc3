"""`/liger kernel` on a tier-3 op with the provider on, through the server, the queue, the worker and the real stage
child (bot.isolation): the checkpoint waits for approval, the first draft fails the target's ruff, its output goes
back, the second passes the bot's test under TRITON_INTERPRET=1, the branch is pushed and the PR opened, and the
status comment reports the drafts and their cost against the caps."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bot import tier3
from bot.jobs import JobState
from pipelines.contract import TIER3_DRAFTS
from tests.bot.app_fixtures import comment_payload
from tests.bot.llm_fixtures import with_provider
from tests.pipelines.kernel.test_draft import CENTERED
from tests.pipelines.kernel.test_draft import RIGHT
from tests.pipelines.kernel.test_draft import WRONG
from tests.pipelines.kernel.test_draft import fenced


def say(server, app, body: str) -> None:
    assert server.deliver("issue_comment", comment_payload(body)).status_code in (200, 202)
    app.drain()


def add_to_default_branch(remote: Path, tmp_path: Path, name: str, text: str) -> None:
    work = tmp_path / "seed"
    subprocess.run(["git", "clone", "-q", str(remote), str(work)], check=True)
    (work / name).write_text(text)
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "add", name], check=True)
    subprocess.run([*git, "commit", "-q", "-m", f"add {name}"], check=True)
    subprocess.run([*git, "push", "-q", "origin", "HEAD"], check=True)


def status_body(app) -> str:
    (comment,) = [c for c in app.forge.comments() if "liger-bot:status" in c["body"]]
    return comment["body"]


@pytest.mark.slow
def test_a_tier3_kernel_is_drafted_repaired_verified_in_the_stage_child_and_its_cost_reported(
    server, app, standin, tmp_path
):
    add_to_default_branch(app.forge.remote, tmp_path, "centered.py", CENTERED)
    with_provider(app, standin)
    say(server, app, "/liger kernel centered.py:centered")
    (job,) = app.jobs()
    assert job.job_state is JobState.AWAITING_APPROVAL, job.message  # a draft spends money: a person approves
    assert job.profile["drafted_by"] and "only the last dimension is row-wise" in job.profile["refusal"]
    assert standin.requests == []  # nothing sent before the approval

    standin.answers += [fenced(WRONG), fenced(RIGHT)]
    say(server, app, "/liger approve")
    job = app.store.get(job.id)
    assert job.job_state is JobState.PR_OPENED, (job.message, job.result)
    report = job.result["llm"]
    assert [a["number"] for a in report["attempts"]] == [1, 2] and report["spend"]["calls"] == 2
    assert "F401" in standin.requests[1]["messages"][-1]["content"]  # the failing gate's output went back
    body = status_body(app)
    assert "draft 1: checkstyle FAIL; draft 2: passed" in body and "Cost: 2 calls" in body
    assert "caps per job: 3 drafts" in body and "This repository today:" in body and "of $5.00" in body
    assert "| drafted_by | `the anthropic provider (tier 3)` |" in body and "forward_computation" not in body
    (pr,) = app.forge.state["pulls"].values()
    assert pr["title"] == "Add LigerCenteredFunction: a tier-3 kernel drafted for centered.py:centered"
    assert "engine refuses: tier 3: the traced graph needs" in pr["body"] and "draft 2: passed" in pr["body"]
    shown = subprocess.run(
        ["git", "-C", str(app.forge.remote), "show", "liger-bot/kernel-centered:src/liger_kernel/ops/centered.py"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout == RIGHT


class _NoKeyWorker:
    class runtime:  # noqa: N801 (the attribute path the worker has)
        class config:  # noqa: N801
            anthropic_api_key = ""


def test_with_no_key_understand_is_asked_exactly_as_before():
    class Job:
        verb, profile = "kernel", None

    request = object.__new__(tier3.Request)
    object.__setattr__(request, "options", {"name": "x"})
    assert tier3.allow_drafts(_NoKeyWorker(), Job(), request) is request  # tier 3 stays refused
    assert TIER3_DRAFTS not in request.options and not tier3.is_draft_job(Job())


def test_the_status_comment_says_which_cap_stopped_the_drafts():
    from bot.status import llm_report
    from pipelines.llm.settings import Caps

    report = {
        "ok": False,
        "stop": "stopped before draft 3: the job's cost cap ($0.05) is reached",
        "spend": {"calls": 2, "input_tokens": 3000, "output_tokens": 1200, "usd": 0.051},
        "attempts": [
            {"number": 1, "gates": [{"name": "checkstyle", "status": "FAIL", "detail": "F401"}]},
            {"number": 2, "gates": [{"name": "unit tests (CPU, TRITON_INTERPRET=1)", "status": "FAIL", "detail": ""}]},
        ],
        "model": "claude-sonnet-4-5",
        "caps": Caps(job_usd=0.05).to_json(),
        "day": {"calls": 9, "input_tokens": 20000, "output_tokens": 8000, "usd": 0.3},
    }
    text = llm_report(report)
    assert "draft 1: checkstyle FAIL; draft 2: unit tests (CPU, TRITON_INTERPRET=1) FAIL" in text
    assert "stopped before draft 3: the job's cost cap ($0.05) is reached" in text
    assert "2 calls, 4,200 tokens (3,000 in, 1,200 out), $0.0510" in text
    assert "This repository today: 28,000 of 3,000,000 tokens, $0.3000 of $30.00" in text
