"""The worker: runs stored deliveries through the handlers and moves jobs stage by stage.

Each stage starts by committing the job's new state and ends by editing its one status comment. A worker holds a
lease on the job it runs and renews it; a worker that dies stops renewing, and any worker's sweep then resumes
the job from the stage it was in (understand and act+verify are re-run from the default branch; the push and
the PR are found again by branch name) or, after `max_resumes`, fails it with a message and the next command.

RUNNERS is the second half of the verb registry (`bot.commands.VERBS` is the first): pipeline -> how to check
its settings and how to run it.
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

from bot import handlers
from bot import status
from bot.forge.base import Forge
from bot.forge.base import ForgeError
from bot.forge.base import RateLimited
from bot.forge.base import RepoRef
from bot.jobs import IllegalTransition
from bot.jobs import Job
from bot.jobs import JobState
from bot.runtime import Context
from bot.runtime import Runtime
from bot.scan import DASHBOARD_TITLE
from bot.scan import call_understand
from bot.scan import render_dashboard
from bot.scan import scan
from pipelines.outcome import GateResult
from pipelines.outcome import PipelineError
from pipelines.target import Checkout
from pipelines.target import open_checkout

log = logging.getLogger(__name__)
BRANCH_PREFIX = "liger-bot/"
TRANSIENT_RETRY_DELAY = 30.0
MAX_TRANSIENT_RETRIES = 5


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
        proc = subprocess.run(
            ["git", "clone", "-q", "-b", branch, str(mirror), str(dest)], capture_output=True, text=True
        )
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


# --- pipeline runners --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Runner:
    validate_settings: Callable[[str | None, list[str]], None]  # raises PipelineError with the reply
    run: Callable[[Worker, Job], None]  # advance the job from whatever state it is in


def _autopatch_settings(_target: str | None, settings: list[str]) -> None:
    from pipelines.autopatch.profile import parse_overrides

    parse_overrides(settings)


def _no_settings(_target: str | None, settings: list[str]) -> None:
    if settings:
        raise PipelineError("this command takes no field=value settings")


def _understand(model: str, checkout: Checkout):
    from pipelines.autopatch import understand

    return call_understand(understand.understand, model, checkout)


def _run_pipeline(checkout: Checkout, profile, progress):
    from pipelines.autopatch import pipeline

    return pipeline.run_pipeline(checkout, profile, progress)


def _field(result, name: str, default=None):
    if isinstance(result, dict):
        return result.get(name, default)
    return getattr(result, name, default)


def _gate_json(gate) -> dict:
    if isinstance(gate, GateResult):
        return {**gate.to_json(), "hard": gate.hard}
    if isinstance(gate, dict):
        return {"hard": True, **gate}
    return {
        "name": str(_field(gate, "name")),
        "status": str(_field(gate, "status")),
        "detail": str(_field(gate, "detail", "")),
    }


def _hard_failures(gates: list[dict]) -> list[dict]:
    return [g for g in gates if str(g.get("status")).upper().endswith("FAIL") and g.get("hard", True)]


class Progress:
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


def run_autopatch(worker: Worker, job: Job) -> None:
    if job.job_state is JobState.QUEUED:
        job = worker.enter(job, JobState.UNDERSTANDING)
    if job.job_state is JobState.UNDERSTANDING:
        job = worker.understand_stage(job)
    if job.job_state in (JobState.ACTING, JobState.VERIFYING):
        worker.act_verify_publish(job)


def run_scan_job(worker: Worker, job: Job) -> None:
    if job.job_state is JobState.QUEUED:
        job = worker.enter(job, JobState.ACTING)
    if job.job_state is JobState.ACTING:
        worker.scan_stage(job)


RUNNERS: dict[str, Runner] = {
    "autopatch": Runner(_autopatch_settings, run_autopatch),
    "scan": Runner(_no_settings, run_scan_job),
}


def runner_for(verb: str) -> Runner:
    try:
        return RUNNERS[verb]
    except KeyError:
        raise PipelineError(f"no pipeline runs `{verb}` yet") from None


# --- the worker --------------------------------------------------------------------------------------------


class Worker:
    def __init__(self, runtime: Runtime, name: str | None = None):
        self.runtime = runtime
        self.store = runtime.store
        self.config = runtime.config
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
        self.workspace = runtime.workspace or GitWorkspace(self.config.work_dir)
        self.understand = _understand
        self.run_pipeline = _run_pipeline
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
            runner_for(job.verb).run(self, self.store.get(job_id))
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

    def understand_stage(self, job: Job) -> Job:
        checkout, _ = self.fresh_checkout(job)
        profile = self.understand(job.target, checkout)
        if job.overrides:
            from pipelines.autopatch.profile import parse_overrides

            profile = profile.with_overrides(parse_overrides(job.overrides))
        self.heartbeat(job.id)
        config = self.runtime.repo_config(self.repo(job), job.installation_id)
        review = profile.needs_review()
        fields = {"profile": profile.to_json(), "branch": f"{BRANCH_PREFIX}{job.verb}-{profile.model_type}"}
        if review or (job.checkpoint and not config.autonomous):
            why = f"needs review: {', '.join(review)}. " if review else ""
            return self.enter(
                job,
                JobState.AWAITING_APPROVAL,
                message=why + "Check the profile, correct a decision with `/liger set field=value`, then approve.",
                next_command="/liger approve",
                **fields,
            )
        return self.enter(job, JobState.ACTING, message="", next_command="", **fields)

    def act_verify_publish(self, job: Job) -> None:
        if job.job_state is JobState.ACTING:
            self.publish(job)
        checkout, base = self.fresh_checkout(job)
        profile = self.understand(job.target, checkout)
        if job.overrides:
            from pipelines.autopatch.profile import parse_overrides

            profile = profile.with_overrides(parse_overrides(job.overrides))
        progress = Progress(self, job.id)
        result = self.run_pipeline(checkout, profile, progress)
        gates = [_gate_json(g) for g in (_field(result, "gates") or [])] or progress.gates
        branch = _field(result, "branch") or job.branch or f"{BRANCH_PREFIX}{job.verb}-{profile.model_type}"
        job = self.enter(self.store.get(job.id), JobState.VERIFYING)
        result_json = {**(job.result or {}), "gates": gates, "files": list(_field(result, "files") or [])}
        job = self.store.update(job.id, result=result_json, branch=branch, profile=profile.to_json())
        failures = _hard_failures(gates)
        if failures or _field(result, "ok") is False:
            names = ", ".join(g["name"] for g in failures) or "a hard gate"
            return self.fail(job, f"verify failed: {names}. Nothing was pushed.", _retry_command(job))
        self._push_and_open(job, checkout, base, result)

    def _push_and_open(self, job: Job, checkout: Checkout, base: str, result) -> None:
        from bot import gitops

        forge, repo = self.forge(job), self.repo(job)
        pushed = self.workspace.push(forge, repo, checkout, job.branch, job.pushed_sha or None)
        if pushed.outcome is gitops.PushOutcome.HUMAN_PUSHED:
            return self.fail(job, pushed.message, f"git push origin --delete {job.branch}  # then: /liger retry")
        job = self.store.update(job.id, pushed_sha=pushed.head)
        title = _field(result, "pr_title") or f"[liger-bot] {job.verb}: {job.target}"
        body = self._pr_body(job, result)
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
        self.workspace.discard(f"job-{job.id}")

    def _pr_body(self, job: Job, result) -> str:
        body = _field(result, "pr_body") or ""
        gates = (job.result or {}).get("gates") or []
        parts = [body or f"Generated by liger-bot for `{job.target}`."]
        if gates and "| Check |" not in body:
            parts.append(status.gate_table(gates))
        if job.profile and "| decision |" not in body:
            parts.append(status.profile_table(job.profile))
        parts.append(
            f"Requested by @{job.requested_by} in #{job.thread} (job {job.id}). "
            "Review it here: `/liger set field=value` re-runs act and verify on this branch."
        )
        parts.append(f"<!-- liger-bot:pr:{job.id} -->")
        return "\n\n".join(parts)

    def scan_stage(self, job: Job) -> None:
        forge, repo = self.forge(job), self.repo(job)
        checkout, _ = self.fresh_checkout(job)
        understand = self.scan_understand or (lambda model, co: _understand(model, co))
        rows = scan(checkout, understand, progress=lambda _line: self.heartbeat(job.id))
        config = self.runtime.repo_config(repo, job.installation_id)
        number = forge.find_issue(repo, DASHBOARD_TITLE)
        started = self._dashboard_notes(job.repo)
        body = render_dashboard(rows, started, (config.prs_per_hour, config.max_open_prs))
        if number is None:
            number = forge.create_issue(repo, DASHBOARD_TITLE, body)
        else:
            forge.edit_issue(repo, number, body)
        summary = f"Dashboard: #{number} ({sum(1 for r in rows if r.verdict.value == 'patchable')} patchable)."
        result = {"rows": [r.to_json() for r in rows], "dashboard": number, "summary": summary}
        self.enter(job, JobState.DONE, result=result)
        self.workspace.discard(f"job-{job.id}")

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
    settings = "".join(f" --set {s}" for s in job.overrides)
    return f"/liger {job.verb}" + (f" {job.target}" if job.target else "") + settings
