"""The actions runner's side of a job: push, dispatch the verify workflow and park the job (its lease held by the
workflow); `workflow_run.completed` or, failing that, the lease running out brings it back to
`resume_verification`, which reads the run's report and merges its gates over the worker's."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from bot.forge.base import Forge
from bot.forge.base import RepoRef
from bot.forge.base import WorkflowRun
from bot.jobs import Job
from bot.runners import VERIFY_WORKFLOW
from bot.runners import ActionsRunner
from bot.runners import Dispatched
from bot.runners import VerifyRequest
from bot.worker.flow import retry_command
from pipelines.contract import Outcome
from pipelines.outcome import GateResult
from pipelines.outcome import Report
from pipelines.pull_request import BodyParts

log = logging.getLogger(__name__)
# A parked job's lease, held by the GPU workflow: the workflow's own timeout (90 min) plus time queued for a runner.
ACTIONS_LEASE_SECONDS = 2 * 3600.0
MAX_WORKFLOW_WAIT_SECONDS = 12 * 3600.0  # past this with no completed run, the job fails with a message


class ActionsMixin:
    """The Worker's side of GPU verification: dispatch and park, then resume from the run's report."""

    def _park(self, job: Job, result: dict, message: str) -> Job:
        """Hand the job's lease to the GPU workflow: no sweep touches it until the lease runs out."""
        return self.store.update(
            job.id,
            result=result,
            worker=f"actions:{job.id}",
            lease_until=time.time() + ACTIONS_LEASE_SECONDS,
            message=message,
            next_command="/liger status",
        )

    def _dispatch(self, job: Job, labels: tuple[str, ...], outcome: Outcome) -> None:
        runner = ActionsRunner(self.forge(job), tuple(labels))
        request = VerifyRequest(
            self.repo(job),
            job.branch,
            job.verb,
            outcome.verify_target,
            str(job.id),
            tuple(job.overrides),
            profile=outcome.profile,
        )
        shown = ", ".join(labels)
        expected = runner.expect(request, job.pushed_sha)  # the one run this job will accept
        dispatched = {**expected.to_json(), "labels": list(labels)}
        result = {
            **(job.result or {}),
            "dispatched": dispatched,
            "pr": {"title": outcome.pr_title, "parts": outcome.pr.to_json() if outcome.pr else None},
        }
        before = job
        job = self._park(
            job, result, f"verifying on GPU runners ({shown}): waiting for `{runner.workflow}` on `{job.branch}`"
        )
        try:  # parked first, so a run that finishes at once finds the job waiting for it
            sent = runner.start(request, expected)
        except BaseException:
            self.store.update(
                job.id, result=before.result, worker=self.name, lease_until=before.lease_until, message=""
            )
            raise
        if sent.run_id is not None:
            job = self._bind_run(job.id, sent.run_id)
        self.workspace.discard_job(job.id)
        self.publish(job)

    def _bind_run(self, job_id: int, run_id: int) -> Job:
        """From now on only run `run_id` can decide the job."""
        job = self.store.get(job_id)
        result = dict(job.result or {})
        result["dispatched"] = {**result["dispatched"], "run_id": run_id}
        return self.store.update(job_id, result=result)

    def _dispatched_run(self, forge: Forge, repo: RepoRef, dispatched: Dispatched) -> WorkflowRun | None:
        """The run the App dispatched, among the branch's runs; the others are logged and ignored."""
        for run in forge.workflow_runs(repo, dispatched.workflow, dispatched.branch):
            why = dispatched.mismatch(run, repo)
            if why is None:
                return run
            log.info("ignored workflow run %s on %s: not the run the App dispatched: %s", run.id, run.head_branch, why)
        return None

    def resume_verification(self, job: Job) -> None:
        """The parked job's verdict: the report of its completed run, merged over the gates the worker ran."""
        forge, repo = self.forge(job), self.repo(job)
        result = dict(job.result or {})
        dispatched = Dispatched.from_json(result["dispatched"])
        finished = result.get("workflow_run")
        if finished is None:  # the lease ran out with no webhook: ask GitHub about the run
            run = self._dispatched_run(forge, repo, dispatched)
            if run is not None and dispatched.run_id is None:
                job = self._bind_run(job.id, run.id)
                result = dict(job.result)
            if run is None or run.status != "completed":
                return self._still_waiting(job, result, run)
        else:
            run = WorkflowRun(int(finished["id"]), "completed", finished.get("conclusion"), job.branch)
        report = ActionsRunner(forge).resume(repo, run, str(job.id), dispatched.head_sha)
        problem = report.binding_problem(str(job.id), dispatched.head_sha)
        if problem:  # not this job's verdict on this commit (an earlier job's run, a doctored report): keep waiting
            log.warning("job %s: ignored the report of workflow run %s: %s", job.id, run.id, problem)
            result.pop("workflow_run", None)
            self._park(job, result, f"ignored workflow run {run.id} ({problem}); still waiting")
            return
        local = Report.from_records(result.get("gates") or [])
        merged = local.merged(Report(report.gates))
        result |= {"gates": merged.records(), "workflow_run": {"id": run.id, "conclusion": run.conclusion}}
        job = self.store.update(job.id, result=result)
        failures = merged.failures
        if failures:
            why = "; ".join(_failure_line(g) for g in failures)
            message = (
                f"verify on GPU runners failed: {why} (workflow run {run.id}). "
                f"`{job.branch}` holds the patch; no PR was opened."
            )
            return self.fail(job, message, retry_command(job))
        pr = result.get("pr") or {}
        parts = BodyParts.from_json(pr["parts"]) if pr.get("parts") else None
        if parts and report.hardware:  # the template's Hardware Type: where the GPU gates ran, not the worker
            parts = replace(parts, host=report.hardware)
        self._open_pr(job, forge.default_branch(repo), pr.get("title") or "", parts, merged, report.figures)

    def _still_waiting(self, job: Job, result: dict, run: WorkflowRun | None) -> None:
        waited = time.time() - float((result.get("dispatched") or {}).get("at", job.updated_at))
        if waited > MAX_WORKFLOW_WAIT_SECONDS:
            seen = f"its run {run.id} is still {run.status}" if run else "no run of it started"
            labels = ", ".join((result.get("dispatched") or {}).get("labels") or [])
            message = (
                f"`{VERIFY_WORKFLOW}` did not report back in {waited / 3600:.0f} h ({seen}); "
                f"is a runner with the labels {labels} online?"
            )
            return self.fail(job, message, "/liger retry")
        seen = f"run {run.id} is {run.status}" if run else "no run has started yet"
        self._park(job, result, f"still waiting for `{VERIFY_WORKFLOW}` on `{job.branch}` ({seen})")
        self.publish(self.store.get(job.id))


def _failure_line(gate: GateResult) -> str:
    detail = gate.headline[:200]
    return f"{gate.name}: {detail}" if detail else gate.name
