"""`workflow_run.completed`: a verify workflow the `actions` runner dispatched has finished; resume its job.

The job is found by the run's head branch (`liger-bot/<verb>-<target>`), never by anything the run could claim.
"""

from __future__ import annotations

from bot.handlers import on
from bot.jobs import JobState

BRANCH_PREFIX = "liger-bot/"


@on("workflow_run", "completed")
def run_completed(ctx) -> None:
    run = ctx.payload["workflow_run"]
    branch = run.get("head_branch") or ""
    if not branch.startswith(BRANCH_PREFIX):
        return
    job = ctx.store.job_for_branch(ctx.repo.full_name, branch)
    if job is None or job.job_state is not JobState.VERIFYING:
        return
    result = dict(job.result or {})
    result["workflow_run"] = {"id": run["id"], "conclusion": run.get("conclusion")}
    ctx.store.update(job.id, result=result)
    ctx.runtime.queue.enqueue_job(job.id)
