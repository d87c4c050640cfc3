"""The worker: runs stored deliveries through the handlers and moves jobs stage by stage.

Each stage starts by committing the job's new state and ends by editing its one status comment. A worker holds a
lease on the job it runs and renews it; a worker that dies stops renewing, and any worker's sweep then resumes
the job from the stage it was in (understand and act+verify are re-run from the default branch; the push and
the PR are found again by branch name) or, after `max_resumes`, fails it with a message and the next command.

Every pipeline of `pipelines.registry` runs the same flow (`run_change_job`); its row (pipelines.contract) says
how it understands, acts and verifies, and `flow_for` maps each verb that starts work to its flow (JOB_FLOWS holds
the verbs that are no pipeline: scan). The worker runs a row's understand and act + verify in a child process with
an allow-listed environment (bot.isolation): those stages run the target repository's code, and this process
holds the App's key and tokens.
With `runner: {kind: actions}` in the repo config, the worker pushes the branch, dispatches the
verify workflow and parks the job (verifying, its lease held by the workflow); `workflow_run.completed` or,
failing that, the lease running out brings it back to `resume_verification`, which reads the run's report.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bot import explain
from bot import handlers
from bot import status
from bot import tier3
from bot.commands import VERBS
from bot.commands import command_text
from bot.figures import Figures
from bot.figures import embed_figures
from bot.forge.base import Forge
from bot.forge.base import ForgeError
from bot.forge.base import RateLimited
from bot.forge.base import RepoRef
from bot.forge.base import WorkflowRun
from bot.isolation import in_child
from bot.jobs import IllegalTransition
from bot.jobs import Job
from bot.jobs import JobState
from bot.runners import VERIFY_WORKFLOW
from bot.runners import ActionsRunner
from bot.runners import Dispatched
from bot.runners import RunnerKind
from bot.runners import VerifyRequest
from bot.runtime import Context
from bot.runtime import Runtime
from bot.scan import DASHBOARD_TITLE
from bot.scan import STARTABLE
from bot.scan import call_understand
from bot.scan import render_dashboard
from bot.scan import scan
from pipelines import pull_request
from pipelines import registry
from pipelines.contract import Outcome
from pipelines.contract import Pipeline
from pipelines.contract import Request
from pipelines.contract import no_settings
from pipelines.outcome import GateResult
from pipelines.outcome import PipelineError
from pipelines.outcome import Report
from pipelines.pull_request import BodyParts
from pipelines.target import Checkout
from pipelines.target import open_checkout

log = logging.getLogger(__name__)
TRANSIENT_RETRY_DELAY = 30.0
MAX_TRANSIENT_RETRIES = 5
# A parked job's lease, held by the GPU workflow: the workflow's own timeout (90 min) plus time queued for a runner.
ACTIONS_LEASE_SECONDS = 2 * 3600.0
MAX_WORKFLOW_WAIT_SECONDS = 12 * 3600.0  # past this with no completed run, the job fails with a message


class Cancelled(Exception):
    """The job was cancelled while a stage ran; the stage stops at its next progress report."""


# --- the git side: a fresh checkout of a branch, and the push (bot.gitops) ---------------------------------


class GitWorkspace:
    """Checkouts under `root`, one folder per job, made fresh for each stage (a stage never trusts leftovers).

    Each repository has a bare mirror under `root/mirrors`, fetched incrementally; a job's checkout is a local
    clone of it (hardlinks), so a stage costs a fetch of what changed, not a download of the repository.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _mirror(self, forge: Forge, repo: RepoRef, branch: str) -> Path:
        from bot import gitops
        from pipelines.git import Git

        mirror = self.root / "mirrors" / f"{repo.owner}__{repo.name}.git"
        mirror.parent.mkdir(parents=True, exist_ok=True)
        with open(mirror.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # workers on one host share the mirror
            if not (mirror / "HEAD").exists():
                mirror.mkdir(exist_ok=True)
                Git(mirror).run("init", "-q", "--bare")
            remote = gitops.Remote(mirror, forge.clone_url(repo), forge.push_credentials(repo))
            remote.git(
                "fetch", "-q", "--no-tags", "--prune", gitops.REMOTE, f"+refs/heads/{branch}:refs/heads/{branch}"
            )
        return mirror

    def checkout(self, forge: Forge, repo: RepoRef, branch: str, name: str) -> Checkout:
        mirror = self._mirror(forge, repo, branch)
        dest = self.root / name
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)  # a stage child (another user) may reach its own folder, not list the others
        # --no-hardlinks: the stage user will own the checkout's files, never an object shared with the mirror
        argv = ["git", "-c", "core.hooksPath=/dev/null", "clone", "-q", "--no-hardlinks", "-b", branch]
        proc = subprocess.run([*argv, str(mirror), str(dest)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise PipelineError(f"could not check out {repo.full_name}@{branch}: {proc.stderr.strip()[-300:]}")
        return open_checkout(dest)

    def push(self, forge: Forge, repo: RepoRef, checkout: Checkout, branch: str, last_pushed: str | None):
        from bot import gitops

        return gitops.push_branch(
            checkout.root, branch, forge.clone_url(repo), forge.push_credentials(repo), last_pushed
        )

    def discard(self, name: str) -> None:
        shutil.rmtree(self.root / name, ignore_errors=True)

    def out_dir(self, job_id: int) -> Path:
        """Where a pipeline writes beside the checkout (reports, benchmark tables): never inside the target."""
        return self.root / f"job-{job_id}.out"

    def discard_job(self, job_id: int) -> None:
        for name in (f"job-{job_id}", f"job-{job_id}.out", f"job-{job_id}.liger-bot"):
            self.discard(name)


# --- job flows ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobFlow:
    validate_settings: Callable[[str | None, list[str]], None]  # raises PipelineError with the reply
    run: Callable[[Worker, Job], None]  # advance the job from whatever state it is in


def _scan_understand(model: str, checkout: Checkout):
    from pipelines.autopatch import understand

    return call_understand(understand.understand, model, checkout)


def _field(result, name: str, default=None):
    if isinstance(result, dict):
        return result.get(name, default)
    return getattr(result, name, default)


def _gate_json(gate) -> dict:
    if isinstance(gate, GateResult):
        return gate.to_record()
    if isinstance(gate, dict):
        return {"hard": True, **gate}
    return {
        "name": str(_field(gate, "name")),
        "status": str(_field(gate, "status")),
        "detail": str(_field(gate, "detail", "")),
    }


class JobProgress:
    """The callback a pipeline reports through: text lines, or GateResults as verify produces them."""

    def __init__(self, worker: Worker, job_id: int):
        self.worker, self.job_id = worker, job_id
        self.gates: list[dict] = []
        self.lines: list[str] = []
        self._published = 0.0

    def __call__(self, event) -> None:
        job = self.worker.store.get(self.job_id)
        if job.job_state is JobState.CANCELLED:
            raise Cancelled()
        if isinstance(event, str):
            self.lines.append(event)
            if event.lower().startswith("verif"):
                self.worker.enter(job, JobState.VERIFYING)
        else:
            self.gates.append(_gate_json(event))
            job = self.worker.enter(job, JobState.VERIFYING)
            self.worker.store.update(job.id, result={**(job.result or {}), "gates": self.gates})
        self.worker.heartbeat(self.job_id)
        if time.time() - self._published > 2.0:  # GitHub asks for no more than about one edit a second
            self._published = time.time()
            self.worker.publish(self.worker.store.get(self.job_id))


def waiting_for_workflow(job: Job) -> bool:
    """Parked: its branch is pushed and a verify workflow was dispatched; the run's report decides."""
    return job.job_state is JobState.VERIFYING and "dispatched" in (job.result or {})


def run_change_job(worker: Worker, job: Job) -> None:
    """understand -> [checkpoint] -> act + verify -> push -> PR, for every pipeline of pipelines.registry."""
    if job.job_state is JobState.QUEUED:
        job = worker.enter(job, JobState.UNDERSTANDING)
    if job.job_state is JobState.UNDERSTANDING:
        job = worker.understand_stage(job)
    if waiting_for_workflow(job):
        return worker.resume_verification(job)
    if job.job_state in (JobState.ACTING, JobState.VERIFYING):
        worker.act_verify_publish(job)


def run_scan_job(worker: Worker, job: Job) -> None:
    if job.job_state is JobState.QUEUED:
        job = worker.enter(job, JobState.ACTING)
    if job.job_state is JobState.ACTING:
        worker.scan_stage(job)


# The verbs that start work but are no pipeline of the registry; every pipeline's verb runs `run_change_job`.
JOB_FLOWS: dict[str, JobFlow] = {"scan": JobFlow(no_settings, run_scan_job)}


def flow_for(verb: str) -> JobFlow:
    """The verb's flow; a PipelineError for a verb no pipeline runs."""
    if verb in JOB_FLOWS:
        return JOB_FLOWS[verb]
    return JobFlow(registry.pipeline(verb).validate_settings, run_change_job)


# --- the worker --------------------------------------------------------------------------------------------


class Worker:
    def __init__(self, runtime: Runtime, name: str | None = None):
        self.runtime = runtime
        self.store = runtime.store
        self.config = runtime.config
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
        self.workspace = runtime.workspace or GitWorkspace(self.config.work_dir)
        # each registry row, its stages in a child (bot.isolation); tests swap a row for a small real pipeline
        self.pipelines: dict[str, Pipeline] = {name: in_child(name) for name in registry.names()}
        self.scan_understand: Callable | None = None  # None: the real understand, for every model

    # deliveries ------------------------------------------------------------------------------------------

    def handle_delivery(self, delivery_id: str) -> None:
        delivery = self.store.delivery(delivery_id)
        if delivery is None or delivery.handled:
            return
        ctx = Context(delivery.event, delivery.action, json.loads(delivery.payload), delivery_id, self.runtime)
        try:
            handlers.dispatch(ctx)
        except ForgeError as exc:
            if _transient(exc):  # GitHub was unavailable: keep it unhandled, the sweep queues it again
                log.warning("delivery %s: %s; will retry", delivery_id, exc)
                return
            log.error("delivery %s: %s", delivery_id, exc)
            self.store.mark_delivery(delivery_id, error=str(exc))
            return
        except Exception as exc:
            log.exception("delivery %s failed", delivery_id)
            self.store.mark_delivery(delivery_id, error=f"{exc.__class__.__name__}: {exc}")
            return
        self.store.mark_delivery(delivery_id)

    # jobs -------------------------------------------------------------------------------------------------

    def forge(self, job: Job) -> Forge:
        return self.runtime.forge(job.installation_id)

    def repo(self, job: Job) -> RepoRef:
        return RepoRef(*job.repo.split("/", 1))

    def publish(self, job: Job) -> None:
        status.publish(self.forge(job), self.store, job)

    def heartbeat(self, job_id: int) -> None:
        self.store.heartbeat(job_id, self.name, self.config.lease_seconds)

    def enter(self, job: Job, state: JobState, **fields) -> Job:
        """Commit the move to `state` (a cancelled job stops here), then show it."""
        if job.job_state is state:
            return job
        try:
            job = self.store.transition(job.id, state, **fields)
        except IllegalTransition:
            current = self.store.get(job.id)
            if current.job_state is JobState.CANCELLED:
                raise Cancelled() from None
            raise
        self.publish(job)
        return job

    def fail(self, job: Job, message: str, next_command: str) -> None:
        try:
            job = self.store.transition(job.id, JobState.FAILED, message=message, next_command=next_command)
        except IllegalTransition:
            return
        self.publish(job)

    def advance(self, job_id: int) -> None:
        job = self.store.get(job_id)
        if job is None or job.job_state.terminal or job.job_state is JobState.AWAITING_APPROVAL:
            return
        if not self.store.claim(job_id, self.name, self.config.lease_seconds):
            return  # a live worker holds it
        beat = _Heartbeat(self, job_id)
        try:
            flow_for(job.verb).run(self, self.store.get(job_id))
        except Cancelled:
            pass
        except RateLimited as exc:
            self._defer(job_id, f"GitHub rate limit: {exc}", max(1.0, exc.retry_at - time.time()))
        except ForgeError as exc:
            if _transient(exc):
                self._defer(job_id, f"GitHub did not answer ({exc})", TRANSIENT_RETRY_DELAY)
            else:
                self.fail(self.store.get(job_id), f"GitHub refused a call: {exc}", "/liger retry")
        except PipelineError as exc:
            self.fail(self.store.get(job_id), str(exc), _retry_command(self.store.get(job_id)))
        except Exception as exc:
            log.exception("job %s failed", job_id)
            message = f"unexpected error: {exc.__class__.__name__}: {exc}"[:1000]
            self.fail(self.store.get(job_id), message, "/liger retry")
        finally:
            beat.stop()
            self.store.release(job_id, self.name)

    def _defer(self, job_id: int, why: str, delay: float) -> None:
        job = self.store.get(job_id)
        retries = (job.result or {}).get("transient_retries", 0) + 1
        if retries > MAX_TRANSIENT_RETRIES:
            return self.fail(job, f"{why}; gave up after {MAX_TRANSIENT_RETRIES} tries", "/liger retry")
        self.store.update(
            job_id,
            result={**(job.result or {}), "transient_retries": retries},
            message=f"{why}; trying again in {delay:.0f}s",
        )
        self.runtime.queue.enqueue_job(job_id, delay=delay)

    # stages -----------------------------------------------------------------------------------------------

    def fresh_checkout(self, job: Job) -> tuple[Checkout, str]:
        forge, repo = self.forge(job), self.repo(job)
        base = forge.default_branch(repo)
        return self.workspace.checkout(forge, repo, base, f"job-{job.id}"), base

    def repo_config(self, job: Job):
        """The repo's `.github/liger-bot.yml`; its problems are kept on the job for its status comment."""
        config = self.runtime.repo_config(self.repo(job), job.installation_id)
        status.note_config_problems(self.store, self.store.get(job.id), config.problems)
        return config

    def pipeline(self, job: Job) -> Pipeline:
        """The job's pipeline row; one registered since this worker started is run too (in a child)."""
        return self.pipelines.get(job.verb) or in_child(job.verb)

    def request(self, job: Job, checkout: Checkout, approved: bool = False) -> Request:
        """`approved`: act on the profile kept on the job (shown at the checkpoint), not a new understand."""
        options = dict(job.options or {})
        profile = job.profile if approved else None
        return Request(checkout, job.target, tuple(job.overrides), options, self.workspace.out_dir(job.id), profile)

    def understand_stage(self, job: Job) -> Job:
        checkout, _ = self.fresh_checkout(job)
        request = tier3.allow_drafts(self, job, self.request(job, checkout))  # tier 3 for the provider, if on
        understood = self.pipeline(job).understand(request)
        self.heartbeat(job.id)
        fields = {"profile": understood.profile, "branch": understood.branch}
        if not understood.branch:  # nothing to propose (a fuse with every chain matched): say so and stop
            result = {**(job.result or {}), "summary": understood.summary}
            job = self.enter(job, JobState.DONE, message="", next_command="", result=result, **fields)
            self.workspace.discard_job(job.id)
            return job
        config = self.repo_config(job)
        job = self.store.get(job.id)
        review = list(understood.needs_review)
        if review or (job.checkpoint and not config.autonomous):
            job = explain.explain(self, self.store.update(job.id, **fields)) if review else job
            why = f"needs review: {', '.join(review)}. " if review else ""
            correct = "correct a decision with `/liger set field=value`, " if VERBS[job.verb].takes_settings else ""
            return self.enter(
                job,
                JobState.AWAITING_APPROVAL,
                message=why + f"Check the profile, {correct}then approve.",
                next_command="/liger approve",
                **fields,
            )
        result = {**(job.result or {}), "approval": "skipped"}
        return self.enter(job, JobState.ACTING, message="", next_command="", result=result, **fields)

    def act_verify_publish(self, job: Job) -> None:
        if job.job_state is JobState.ACTING:
            self.publish(job)
        checkout, base = self.fresh_checkout(job)
        progress = JobProgress(self, job.id)
        request = self.request(job, checkout, approved=True)
        outcome = tier3.act_verify(self, job, self.pipeline(job), request, progress)  # the pipeline's, or drafts
        gates = [_gate_json(g) for g in outcome.gates] or progress.gates
        job = self.enter(self.store.get(job.id), JobState.VERIFYING)
        result = {k: v for k, v in (job.result or {}).items() if k not in ("dispatched", "workflow_run")}
        result |= {"gates": gates, "files": list(outcome.files)}
        job = self.store.update(
            job.id, result=result, branch=outcome.branch or job.branch, profile=outcome.profile or job.profile
        )
        failures = Report.from_records(gates).failures
        if failures or not outcome.ok:
            names = ", ".join(g.name for g in failures) or "a hard gate"
            job = explain.explain(self, job, failures)  # the provider's plain words, where it is on
            return self.fail(job, f"verify failed: {names}. Nothing was pushed.", _retry_command(job))
        job = self._push(job, checkout)
        if job is None:
            return
        config = self.repo_config(job)
        job = self.store.get(job.id)
        if config.runner == RunnerKind.ACTIONS.value and outcome.verify_target:
            return self._dispatch(job, config.runner_labels, outcome)
        figures = Figures.from_dir(self.workspace.out_dir(job.id))  # the plot, where this host ran the benchmark
        self._open_pr(job, base, outcome.pr_title, outcome.pr, Report.from_records(gates), figures)

    def _push(self, job: Job, checkout: Checkout) -> Job | None:
        from bot import gitops

        forge, repo = self.forge(job), self.repo(job)
        pushed = self.workspace.push(forge, repo, checkout, job.branch, job.pushed_sha or None)
        if pushed.outcome is gitops.PushOutcome.HUMAN_PUSHED:
            self.fail(job, pushed.message, f"git push origin --delete {job.branch}  # then: /liger retry")
            return None
        return self.store.update(job.id, pushed_sha=pushed.head)

    def _open_pr(
        self, job: Job, base: str, title: str, parts: BodyParts | None, report: Report, figures: Figures
    ) -> None:
        """The PR, its body rendered once from the pipeline's parts and the verdict (the GPU runner's merged in)."""
        forge, repo = self.forge(job), self.repo(job)
        title = title or f"[liger-bot] {job.verb}: {job.target}"
        body = embed_figures(forge, repo, self._pr_body(job, parts, report), figures)
        pr = forge.ensure_pull_request(repo, job.branch, base, title, body)
        opened_at = job.pr_opened_at or time.time()
        job = self.enter(
            job,
            JobState.PR_OPENED,
            pr_number=pr.number,
            pr_url=pr.url,
            pr_opened_at=opened_at,
            message="",
            next_command="",
        )
        self.workspace.discard_job(job.id)

    def _pr_body(self, job: Job, parts: BodyParts | None, report: Report) -> str:
        parts = parts or BodyParts(summary=f"Generated by liger-bot for `{job.target}`.")
        notes = [status.explanation(job.result["explanation"])] if (job.result or {}).get("explanation") else []
        notes.append(
            f"Requested by @{job.requested_by} in #{job.thread} (job {job.id}). "
            "Review it here: `/liger set field=value` re-runs act and verify on this branch."
        )
        return f"{pull_request.render(parts, report, notes)}\n<!-- liger-bot:pr:{job.id} -->"

    # the actions runner: push, dispatch, park; resume from the run's report ----------------------------------

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
            return self.fail(job, message, _retry_command(job))
        pr = result.get("pr") or {}
        parts = BodyParts.from_json(pr["parts"]) if pr.get("parts") else None
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

    def scan_stage(self, job: Job) -> None:
        forge, repo = self.forge(job), self.repo(job)
        checkout, _ = self.fresh_checkout(job)
        understand = self.scan_understand or _scan_understand
        rows = scan(checkout, understand, progress=lambda _line: self.heartbeat(job.id))
        config = self.repo_config(job)
        number = forge.find_issue(repo, DASHBOARD_TITLE)
        started = self._dashboard_notes(job.repo)
        body = render_dashboard(rows, started, (config.prs_per_hour, config.max_open_prs))
        if number is None:
            number = forge.create_issue(repo, DASHBOARD_TITLE, body)
        else:
            forge.edit_issue(repo, number, body)
        startable = sum(1 for r in rows if r.verdict in STARTABLE)
        summary = f"Dashboard: #{number} ({startable} patchable or partial)."
        result = {"rows": [r.to_json() for r in rows], "dashboard": number, "summary": summary}
        result["config_problems"] = list(config.problems)
        self.enter(job, JobState.DONE, result=result)
        self.workspace.discard_job(job.id)

    def _dashboard_notes(self, repo: str) -> dict[str, str]:
        notes: dict[str, str] = {}
        for job in self.store.jobs(repo):
            if job.scope and job.verb == "autopatch" and job.job_state is not JobState.CANCELLED:
                notes[job.scope] = f"PR #{job.pr_number}" if job.pr_number else f"job {job.id}, {job.state}"
        return notes

    # recovery ---------------------------------------------------------------------------------------------

    def sweep(self) -> list[int]:
        """Resume (or fail) jobs a dead worker left, and queue deliveries whose task was lost. Returns job ids."""
        resumed = []
        for job in self.store.recoverable(queued_grace=self.config.lease_seconds):
            if not self.store.take_for_recovery(job.id, job.attempts):
                continue  # another worker's sweep got there first
            if job.job_state is JobState.QUEUED and not job.worker:
                self.runtime.queue.enqueue_job(job.id)
                continue
            job = self.store.get(job.id)
            if waiting_for_workflow(job):  # the workflow's lease ran out: look the run up instead of re-running
                self.publish(self.store.update(job.id, message="no word from the verify workflow yet; asking GitHub"))
                self.runtime.queue.enqueue_job(job.id)
                resumed.append(job.id)
                continue
            if job.attempts > self.config.max_resumes:
                self.fail(
                    job,
                    f"the worker stopped {job.attempts} times while {job.state}; nothing was pushed",
                    "/liger retry",
                )
                continue
            job = self.store.update(job.id, message=f"resuming: a worker stopped while the job was {job.state}")
            self.publish(job)
            self.runtime.queue.enqueue_job(job.id)
            resumed.append(job.id)
        for delivery_id in self.store.unhandled_deliveries(older_than=time.time() - self.config.lease_seconds):
            self.runtime.queue.enqueue_delivery(delivery_id)
        return resumed

    def run(self, threads: int = 1) -> None:
        """Serve the queue until interrupted (SIGINT/SIGTERM), sweeping for lost work every lease/2 seconds."""
        self.runtime.queue.bind(self.handle_delivery, self.advance)
        self.sweep()
        stop = threading.Event()
        sweeper = threading.Thread(target=self._sweep_forever, args=(stop,), daemon=True)
        sweeper.start()
        try:
            self.runtime.queue.consumer(workers=threads).run()
        finally:
            stop.set()

    def _sweep_forever(self, stop: threading.Event) -> None:
        while not stop.wait(max(1.0, self.config.lease_seconds / 2)):
            try:
                self.sweep()
            except Exception:
                log.exception("sweep failed")


class _Heartbeat:
    """Renews the job's lease while a stage runs (a stage may sit in a long subprocess)."""

    def __init__(self, worker: Worker, job_id: int):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(worker, job_id), daemon=True)
        self._thread.start()

    def _beat(self, worker: Worker, job_id: int) -> None:
        while not self._stop.wait(max(0.2, worker.config.lease_seconds / 3)):
            worker.heartbeat(job_id)

    def stop(self) -> None:
        self._stop.set()


def _transient(error: ForgeError) -> bool:
    """Worth trying again later: rate limits, GitHub's 5xx, connection failures (no status)."""
    return isinstance(error, RateLimited) or error.status is None or error.status in (403, 429) or error.status >= 500


def _retry_command(job: Job) -> str:
    return command_text(job.verb, job.target or None, job.overrides, job.options or {})


def _failure_line(gate: GateResult) -> str:
    detail = gate.headline[:200]
    return f"{gate.name}: {detail}" if detail else gate.name
