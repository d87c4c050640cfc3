"""The job flow: the state machine every job of a verb moves through, stage by stage.

Every pipeline of `pipelines.registry` runs the same flow (`run_change_job`): understand -> [checkpoint] -> act +
verify -> push -> PR; its row (pipelines.contract) says how it understands, acts and verifies, and `flow_for` maps
each verb that starts work to its flow (JOB_FLOWS holds the verbs that are no pipeline: scan). Each stage starts
by committing the job's new state and ends by editing its one status comment; a row's understand and act + verify
run in a child process with an allow-listed environment (bot.isolation): those stages run the target repository's
code, and this process holds the App's key and tokens.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.commands import command_text
from bot.forge.base import ForgeError
from bot.forge.base import RateLimited
from bot.jobs import IllegalTransition
from bot.jobs import Job
from bot.jobs import JobState
from pipelines import registry
from pipelines.contract import no_settings
from pipelines.outcome import GateResult
from pipelines.outcome import PipelineError

if TYPE_CHECKING:
    from bot.worker import Worker

log = logging.getLogger(__name__)
TRANSIENT_RETRY_DELAY = 30.0
MAX_TRANSIENT_RETRIES = 5


class Cancelled(Exception):
    """The job was cancelled while a stage ran; the stage stops at its next progress report."""


@dataclass(frozen=True)
class JobFlow:
    validate_settings: Callable[[str | None, list[str]], None]  # raises PipelineError with the reply
    run: Callable[[Worker, Job], None]  # advance the job from whatever state it is in


def _field(result, name: str, default=None):
    if isinstance(result, dict):
        return result.get(name, default)
    return getattr(result, name, default)


def gate_record(gate) -> dict:
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
            self.gates.append(gate_record(event))
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


class JobFlowMixin:
    """The Worker's job state machine: claim a job and advance it, enter a state, fail it, defer it."""

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
        beat = Heartbeat(self, job_id)
        try:
            flow_for(job.verb).run(self, self.store.get(job_id))
        except Cancelled:
            pass
        except RateLimited as exc:
            self._defer(job_id, f"GitHub rate limit: {exc}", max(1.0, exc.retry_at - time.time()))
        except ForgeError as exc:
            if transient(exc):
                self._defer(job_id, f"GitHub did not answer ({exc})", TRANSIENT_RETRY_DELAY)
            else:
                self.fail(self.store.get(job_id), f"GitHub refused a call: {exc}", "/liger retry")
        except PipelineError as exc:
            self.fail(self.store.get(job_id), str(exc), retry_command(self.store.get(job_id)))
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


class Heartbeat:
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


def transient(error: ForgeError) -> bool:
    """Worth trying again later: rate limits, GitHub's 5xx, connection failures (no status)."""
    return isinstance(error, RateLimited) or error.status is None or error.status in (403, 429) or error.status >= 500


def retry_command(job: Job) -> str:
    return command_text(job.verb, job.target or None, job.overrides, job.options or {})
