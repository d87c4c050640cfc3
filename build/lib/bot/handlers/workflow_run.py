"""`workflow_run.completed`: a verify workflow the `actions` runner dispatched has finished; resume its job.

The job is found by the run's head branch (`liger-bot/<verb>-<target>`), never by anything the run could claim,
and only a job parked waiting for a workflow is touched. The handler records the run and frees the job's lease
(held by the workflow while it ran); the worker then reads the run's report (`Worker.resume_verification`).
"""

from __future__ import annotations

from bot.handlers import on
from bot.runners import WorkflowKind
from bot.runners import classify_workflow_run


@on("workflow_run", "completed")
def run_completed(ctx) -> None:
    from bot.worker import waiting_for_workflow

    classified = classify_workflow_run(ctx.payload)
    if classified is None or classified[0] is not WorkflowKind.VERIFY:
        return
    _, run = classified
    job = ctx.store.job_for_branch(ctx.repo.full_name, run.head_branch)
    if job is None or not waiting_for_workflow(job):
        return
    result = {**(job.result or {}), "workflow_run": {"id": run.id, "conclusion": run.conclusion}}
    ctx.store.update(job.id, result=result, worker="", lease_until=0.0)
    ctx.runtime.queue.enqueue_job(job.id)
