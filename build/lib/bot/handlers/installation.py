"""`installation.*`: log installs; an uninstall or suspension cancels the jobs still active under it."""

from __future__ import annotations

from bot.handlers import on
from bot.jobs import JobState


@on("installation", "created", "new_permissions_accepted", "unsuspend")
def installed(ctx) -> None:
    account = ctx.payload["installation"]["account"]["login"]
    names = [r["full_name"] for r in ctx.payload.get("repositories") or []]
    ctx.log.info("installation %s on %s: %s", ctx.installation_id, account, ", ".join(names) or "all repositories")


@on("installation", "deleted", "suspend")
def uninstalled(ctx) -> None:
    account = ctx.payload["installation"]["account"]["login"]
    for job in ctx.store.jobs():
        if job.installation_id == ctx.installation_id and not job.job_state.terminal:
            ctx.store.transition(job.id, JobState.CANCELLED, message=f"the App was {ctx.action}d on {account}")
    ctx.log.info("installation %s %s on %s", ctx.installation_id, ctx.action, account)
