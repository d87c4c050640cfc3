"""The `actions` runner wired into the job: push, dispatch the verify workflow on the bot's branch, park; then the
run's report (read through the stand-in's Actions API) decides: PR opened with the merged gates, or failed with
the reason. The pipeline is the small real stand-in (`tests.bot.small_pipeline`); GitHub, git and the queue are
real (see `tests.bot.standin_app`). The report a GPU runner would upload is the input here; the real
`liger-bot verify` producing one is exercised in test_end_to_end and test_cli_verify.
"""

from __future__ import annotations

import json
import time

import pytest

from bot.jobs import JobState
from bot.runners import REPORT_ARTIFACT
from bot.runners import REPORT_FILE
from bot.runners import VerifyReport
from pipelines.autopatch.job import autopatch_pipeline
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from tests.bot import small_pipeline
from tests.bot.standin_app import TARGET
from tests.bot.standin_app import bot_fixture  # noqa: F401
from tests.bot.standin_app import seed_target
from tests.bot.standin_fixtures import *  # noqa: F401,F403
from tests.bot.standin_fixtures import STANDIN_MAINTAINER

ACTIONS = "autonomous: true\nrunner:\n  kind: actions\n  labels: [self-hosted, gpu, h200]\n"
BRANCH = "liger-bot/autopatch-nemotron"


@pytest.fixture
def parked(bot, liger_checkout):
    """`/liger autopatch nemotron --set rms_offset=1.0` in a repo on the actions runner, run up to the dispatch."""
    bot.worker.pipelines["autopatch"] = autopatch_pipeline(small_pipeline.understand, small_pipeline.run_pipeline)
    seed_target(bot.standin, bot.remote, liger_checkout.root, ACTIONS)
    bot.warm_mirror()
    bot.issue = bot.standin.add_issue(TARGET.full_name, "Nemotron", "please", STANDIN_MAINTAINER)
    bot.deliver("issue_comment", bot.say(bot.issue, "/liger autopatch nemotron --set rms_offset=1.0"))
    bot.drain()
    (bot.job,) = bot.store.jobs()
    (bot.run,) = bot.standin.runs.values()
    return bot


def report(job, *gates: GateResult, head_sha: str | None = None, hardware: str = "") -> dict:
    """The artifact a verify run uploads for `job` (a job row, or a bare job id), bound to its pushed commit."""
    job_id, sha = (job, head_sha) if isinstance(job, int) else (job.id, head_sha or job.pushed_sha)
    verdict = VerifyReport(str(job_id), gates, head_sha=sha or "", hardware=hardware)
    return {REPORT_ARTIFACT: {REPORT_FILE: json.dumps(verdict.to_json()).encode()}}


GPU_PASS = (
    GateResult("import", GateStatus.PASS, "imported"),
    GateResult("convergence", GateStatus.PASS, "4 passed in 312.0s"),
)


def test_the_job_parks_until_its_own_report_then_the_gpu_verdict_is_merged_into_the_pr(parked):
    job = parked.store.get(parked.job.id)
    assert job.job_state is JobState.VERIFYING and job.worker == f"actions:{job.id}"
    assert job.lease_until > time.time() + 3600  # the workflow holds the lease, not a worker
    assert parked.remote_head(BRANCH) == job.pushed_sha
    assert parked.run["ref"] == BRANCH and parked.run["inputs"]["target"] == "nemotron"
    assert parked.run["inputs"]["settings"] == '["rms_offset=1.0"]'
    assert parked.standin.pulls(TARGET.full_name) == []
    parked.drain()  # a stray task for the job finds its lease held and does nothing
    assert parked.store.get(job.id).job_state is JobState.VERIFYING and len(parked.standin.runs) == 1

    # a run on this branch that verified another job (an earlier one) is not this job's verdict
    stale = parked.standin.complete_run(parked.run["id"], "success", report(9999, *GPU_PASS, head_sha=job.pushed_sha))
    parked.deliver("workflow_run", stale)
    parked.drain()
    job = parked.store.get(job.id)
    assert job.job_state is JobState.VERIFYING and "ignored workflow run" in job.message
    assert job.lease_until > time.time() + 3600 and parked.standin.pulls(TARGET.full_name) == []

    parked.standin.artifacts.clear()  # the run is re-run and uploads this job's report
    event = parked.standin.complete_run(parked.run["id"], "success", report(job, *GPU_PASS, hardware="NVIDIA H200"))
    parked.deliver("workflow_run", event)
    parked.drain()
    job = parked.store.get(job.id)
    assert job.job_state is JobState.PR_OPENED, job.message
    assert [(g["name"], g["status"]) for g in job.result["gates"]] == [("import", "PASS"), ("convergence", "PASS")]
    (pull,) = parked.standin.pulls(TARGET.full_name)
    assert "| convergence | PASS | 4 passed in 312.0s |" in pull["body"]  # the GPU's PASS replaced the CPU's SKIP
    assert "needs GPU runner" not in pull["body"]
    hardware_type = next(line for line in pull["body"].splitlines() if "Hardware Type" in line)
    assert "NVIDIA H200" in hardware_type, hardware_type  # where the GPU gates ran, not the worker's CPU
    assert pull["labels"] == ["liger-bot", "liger-bot:autopatch"]  # added through GitHub's labels endpoint
    (status,) = parked.comments(parked.issue, "liger-bot:status")
    assert "draft PR opened" in status["body"]


def test_a_failed_gpu_gate_fails_the_job_and_opens_no_pr(parked):
    failing = (GPU_PASS[0], GateResult("convergence", GateStatus.FAIL, "loss diverged at step 12"))
    event = parked.standin.complete_run(parked.run["id"], "failure", report(parked.store.get(parked.job.id), *failing))
    parked.deliver("workflow_run", event)
    parked.drain()

    job = parked.store.get(parked.job.id)
    assert job.job_state is JobState.FAILED
    assert "verify on GPU runners failed: convergence" in job.message and str(parked.run["id"]) in job.message
    assert job.next_command == "/liger autopatch nemotron --set rms_offset=1.0"
    assert parked.standin.pulls(TARGET.full_name) == [] and parked.remote_head(BRANCH) == job.pushed_sha
    (status,) = parked.comments(parked.issue, "liger-bot:status")
    assert (
        "loss diverged" in status["body"] and "Next: `/liger autopatch nemotron --set rms_offset=1.0`" in status["body"]
    )


def test_a_run_that_uploaded_no_report_fails_with_the_reason(parked):
    parked.deliver("workflow_run", parked.standin.complete_run(parked.run["id"], "cancelled"))
    parked.drain()

    job = parked.store.get(parked.job.id)
    assert job.job_state is JobState.FAILED
    assert f"workflow run {parked.run['id']} ended cancelled without uploading liger-bot-report" in job.message


def test_a_lost_webhook_is_made_up_for_when_the_lease_runs_out(parked):
    job_id = parked.job.id
    parked.store.update(job_id, lease_until=time.time() - 1)  # two hours later, no workflow_run arrived
    assert parked.worker.sweep() == [job_id]
    parked.drain()
    job = parked.store.get(job_id)
    assert job.job_state is JobState.VERIFYING and f"run {parked.run['id']} is queued" in job.message
    assert job.lease_until > time.time() + 3600  # parked again

    parked.standin.complete_run(
        parked.run["id"], "success", report(parked.store.get(job_id), *GPU_PASS)
    )  # its webhook is lost
    parked.store.update(job_id, lease_until=time.time() - 1)
    parked.worker.sweep()
    parked.drain()
    job = parked.store.get(job_id)
    assert job.job_state is JobState.PR_OPENED, job.message
    assert len(parked.standin.pulls(TARGET.full_name)) == 1


# --- red team, finding 1: a forged GPU verdict ------------------------------------------------------------------

FORGERIES = {
    "another commit": {"sha": "f" * 40},
    "a person's dispatch": {"actor": "mallory"},
    "a fork's run": {"head_repository": "mallory/liger-kernel"},
    "a push-triggered run": {"event": "push"},
    "a run from before the dispatch": {"created_at": "2020-01-01T00:00:00Z"},
}


@pytest.mark.parametrize("claims", FORGERIES.values(), ids=FORGERIES.keys())
def test_a_forged_pass_from_a_run_the_app_did_not_dispatch_opens_no_pr(parked, claims, caplog):
    job = parked.store.get(parked.job.id)
    claims = {"sha": job.pushed_sha, **claims}
    forged = parked.standin.add_run(TARGET.full_name, "liger-bot-verify.yml", BRANCH, **claims)
    # the forger knows the job id and, unless the forgery is the commit, the head SHA too
    event = parked.standin.complete_run(forged["id"], "success", report(job.id, *GPU_PASS, head_sha=claims["sha"]))
    parked.deliver("workflow_run", event)
    parked.drain()
    job = parked.store.get(job.id)
    assert job.job_state is JobState.VERIFYING and "workflow_run" not in job.result
    assert parked.standin.pulls(TARGET.full_name) == []
    assert f"ignored workflow run {forged['id']}" in caplog.text

    # the lease runs out: asking GitHub finds the forged run first (it is the newest) and skips it
    parked.store.update(job.id, lease_until=time.time() - 1)
    parked.worker.sweep()
    parked.drain()
    job = parked.store.get(job.id)
    assert job.job_state is JobState.VERIFYING and f"run {parked.run['id']} is queued" in job.message
    assert parked.standin.pulls(TARGET.full_name) == []

    # the App's own run still decides
    parked.deliver("workflow_run", parked.standin.complete_run(parked.run["id"], "success", report(job, *GPU_PASS)))
    parked.drain()
    assert parked.store.get(job.id).job_state is JobState.PR_OPENED


def test_only_the_dispatched_run_id_decides_and_its_report_must_name_the_pushed_commit(parked):
    job = parked.store.get(parked.job.id)
    assert job.result["dispatched"]["run_id"] == parked.run["id"]  # known from the dispatch answer
    assert job.result["dispatched"]["head_sha"] == job.pushed_sha
    assert job.result["dispatched"]["actor"] == "liger-bot[bot]"
    # a second App dispatch on the branch (same commit, same actor) is not this job's run
    other = parked.standin.add_run(TARGET.full_name, "liger-bot-verify.yml", BRANCH, sha=job.pushed_sha)
    parked.deliver("workflow_run", parked.standin.complete_run(other["id"], "success", report(job, *GPU_PASS)))
    parked.drain()
    assert parked.store.get(job.id).job_state is JobState.VERIFYING

    # the dispatched run, its report bound to another commit (or none): ignored, the job keeps waiting
    for sha in ("e" * 40, ""):
        parked.standin.artifacts.clear()
        doctored = report(job.id, *GPU_PASS, head_sha=sha)
        parked.deliver("workflow_run", parked.standin.complete_run(parked.run["id"], "success", doctored))
        parked.drain()
        job = parked.store.get(job.id)
        assert job.job_state is JobState.VERIFYING and "ignored workflow run" in job.message, job.message
        assert "not " + job.pushed_sha[:12] in job.message
    assert parked.standin.pulls(TARGET.full_name) == []
