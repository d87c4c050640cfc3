"""`issues.edited` on the dashboard issue: each newly ticked box starts `/liger autopatch` for its model.

The person who ticked needs write access, like any command; the repo's PR limits decide how many start now.
The bot's own edits of the dashboard come from a bot sender and are ignored.
"""

from __future__ import annotations

from bot import permissions
from bot.commands import Command
from bot.commands import CommandError
from bot.commands import validate_target
from bot.forge.base import Permission
from bot.handlers import on
from bot.handlers.commanding import Trigger
from bot.handlers.commanding import start_job
from bot.scan import DASHBOARD_MARKER
from bot.scan import DASHBOARD_TITLE
from bot.scan import newly_ticked
from bot.scan import pr_budget


def _active_dashboard_jobs(ctx) -> int:
    return sum(
        1
        for job in ctx.store.jobs(ctx.repo.full_name)
        if job.scope and job.thread == ctx.thread and not job.job_state.terminal
    )


@on("issues", "edited")
def dashboard_edited(ctx) -> None:
    issue = ctx.payload["issue"]
    if issue.get("title") != DASHBOARD_TITLE or DASHBOARD_MARKER not in (issue.get("body") or ""):
        return
    if permissions.is_bot(ctx.sender):
        return
    before = ((ctx.payload.get("changes") or {}).get("body") or {}).get("from")
    models = newly_ticked(before, issue["body"])
    if not models:
        return
    login = ctx.sender.get("login", "")
    verdict = permissions.check(ctx.forge, ctx.repo, login, Permission.WRITE)
    if not verdict.allowed:
        return ctx.reply(verdict.reason, f"{ctx.delivery_id}:permission")
    budget = pr_budget(ctx.store, ctx.forge, ctx.repo, ctx.repo_config(), _active_dashboard_jobs(ctx))
    for model in models[:budget]:
        trigger = Trigger(login, None, f"{ctx.delivery_id}:{model}")
        try:
            command = Command("autopatch", validate_target(model))
        except CommandError as exc:
            ctx.reply(f"@{login} {exc}", trigger.key)
            continue
        start_job(ctx, command, trigger, scope=model, checkpoint=False)
    waiting = models[budget:]
    if waiting:
        names = ", ".join(f"`{m}`" for m in waiting)
        ctx.reply(
            f"@{login} the PR limits of this repository are reached (.github/liger-bot.yml `limits`); {names} "
            "stay ticked and start with the next scan (`/liger scan`).",
            f"{ctx.delivery_id}:limit",
        )
