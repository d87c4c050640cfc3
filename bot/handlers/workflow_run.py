"""`workflow_run.completed`: a verify workflow the `actions` runner dispatched has finished; resume its job.

The job is found by the run's head branch (`liger-bot/<verb>-<target>`), and only a job parked waiting for a
workflow is touched, and only by the run the App dispatched: the run must match what the job recorded at dispatch
(workflow, branch, head SHA, event `workflow_dispatch`, the App as actor, not a fork, created after the dispatch,
its run id once known). Any other run is ignored and logged. The handler records the run and frees the job's lease
(held by the workflow while it ran); the worker then reads the run's report (`Worker.resume_verification`).
"""

from __future__ import annotations

from bot.handlers import on
from bot.runners import Dispatched
from bot.runners import WorkflowKind
from bot.runners import classify_workflow_run


@on("workflow_run", "completed")
def run_completed(ctx) -> None:
    from bot.worker.flow import waiting_for_workflow

    classified = classify_workflow_run(ctx.payload)
    if classified is None or classified[0] is not WorkflowKind.VERIFY:
        return
    _, run = classified
    job = ctx.store.job_for_branch(ctx.repo.full_name, run.head_branch)
    if job is None or not waiting_for_workflow(job):
        return
    why = Dispatched.from_json(job.result["dispatched"]).mismatch(run, ctx.repo)
    if why:
        ctx.log.warning(
            "ignored workflow run %s on %s (job %s): not the run the App dispatched: %s",
            run.id,
            run.head_branch,
            job.id,
            why,
        )
        return
    bound = {**job.result["dispatched"], "run_id": run.id}
    result = {**job.result, "dispatched": bound, "workflow_run": {"id": run.id, "conclusion": run.conclusion}}
    ctx.store.update(job.id, result=result, worker="", lease_until=0.0)
    ctx.runtime.queue.enqueue_job(job.id)
