"""The worker: runs stored deliveries through the handlers and moves jobs stage by stage.

One module a concern, composed here: `deliveries` (a webhook delivery through the handlers), `flow` (the job
state machine and the flow of each verb), `stages` (understand, act + verify, scan), `publish` (status comment, push, the PR), `actions`
(dispatch to GPU runners, park, resume from the run's report) and `recovery` (the sweep for work a dead worker
left, the serving loop). The git side (mirror, checkout, push) is bot.gitops.

With `runner: {kind: actions}` in the repo config, the worker pushes the branch, dispatches the verify workflow
and parks the job (verifying, its lease held by the workflow); `workflow_run.completed` or, failing that, the
lease running out brings it back to `resume_verification`, which reads the run's report.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable

from bot.forge.base import Forge
from bot.forge.base import RepoRef
from bot.gitops import GitWorkspace
from bot.isolation import in_child
from bot.jobs import Job
from bot.runtime import Runtime
from bot.worker.actions import ActionsMixin
from bot.worker.deliveries import DeliveriesMixin
from bot.worker.flow import JOB_FLOWS
from bot.worker.flow import Cancelled
from bot.worker.flow import JobFlow
from bot.worker.flow import JobFlowMixin
from bot.worker.flow import flow_for
from bot.worker.flow import run_change_job
from bot.worker.flow import waiting_for_workflow
from bot.worker.publish import PublishMixin
from bot.worker.recovery import RecoveryMixin
from bot.worker.stages import StagesMixin
from pipelines import registry
from pipelines.contract import Pipeline

__all__ = ["JOB_FLOWS", "Cancelled", "JobFlow", "Worker", "flow_for", "run_change_job", "waiting_for_workflow"]


class Worker(DeliveriesMixin, JobFlowMixin, StagesMixin, PublishMixin, ActionsMixin, RecoveryMixin):
    def __init__(self, runtime: Runtime, name: str | None = None):
        self.runtime = runtime
        self.store = runtime.store
        self.config = runtime.config
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
        self.workspace = runtime.workspace or GitWorkspace(self.config.work_dir)
        # each registry row, its stages in a child (bot.isolation); tests swap a row for a small real pipeline
        self.pipelines: dict[str, Pipeline] = {name: in_child(name) for name in registry.names()}
        self.scan_understand: Callable | None = None  # None: the real understand, for every model

    def forge(self, job: Job) -> Forge:
        return self.runtime.forge(job.installation_id)

    def repo(self, job: Job) -> RepoRef:
        return RepoRef(*job.repo.split("/", 1))

    def heartbeat(self, job_id: int) -> None:
        self.store.heartbeat(job_id, self.name, self.config.lease_seconds)
