"""Recovery: a worker that dies stops renewing its lease, and any worker's sweep then resumes the job from the stage
it was in (understand and act+verify are re-run from the default branch; the push and the PR are found again by
branch name) or, after `max_resumes`, fails it with a message and the next command; a parked job whose workflow's
lease ran out is looked up instead. `run` serves the queue and sweeps every lease/2 seconds."""

from __future__ import annotations

import logging
import threading
import time

from bot.jobs import JobState
from bot.worker.flow import waiting_for_workflow

log = logging.getLogger(__name__)


class RecoveryMixin:
    """The Worker's sweep for lost work and its serving loop."""

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
