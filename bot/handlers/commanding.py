"""Running `/liger` commands from any comment-like event (issue comments, review comments, reviews).

A verb with a pipeline starts a job (so a new pipeline needs no code here); the control verbs act on the
thread's job through CONTROL. Every reply is keyed by the triggering comment, so a redelivery edits the first
reply instead of posting another.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot import permissions
from bot import status
from bot.commands import Command
from bot.commands import CommandError
from bot.commands import parse_comment
from bot.commands import render_help
from bot.jobs import IllegalTransition
from bot.jobs import Job
from bot.jobs import JobState
from pipelines.outcome import PipelineError


@dataclass(frozen=True)
class Trigger:
    login: str
    comment_id: int | None  # None for a review body (reviews have no reactions)
    key: str  # what replies are keyed by
    review_comment: bool = False


def handle_comment(ctx, body: str | None, comment_id: int | None, review_comment: bool = False) -> None:
    if permissions.is_bot(ctx.sender):
        return
    commands = parse_comment(body or "")
    login = ctx.sender.get("login", "")
    base_key = str(comment_id if comment_id is not None else ctx.delivery_id)
    reacted = False
    if not commands and body:  # prose: the provider may propose a command (bot.handlers.proposing)
        return _propose(ctx, body, Trigger(login, comment_id, f"{base_key}:proposal", review_comment))
    for index, command in enumerate(commands):
        trigger = Trigger(login, comment_id, f"{base_key}:{index}", review_comment)
        if isinstance(command, CommandError):
            ctx.reply(f"@{login} {command}", trigger.key)
            continue
        verdict = permissions.check(ctx.forge, ctx.repo, login, command.spec.permission)
        if not verdict.allowed:
            ctx.reply(verdict.reason, trigger.key)
            continue
        if comment_id is not None and not reacted:
            ctx.forge.add_reaction(ctx.repo, comment_id, "eyes", review_comment=review_comment)
            reacted = True
        action = CONTROL.get(command.verb, start_job)
        action(ctx, command, trigger)


def _flow(verb: str):
    from bot.worker.flow import flow_for  # the worker's table knows how each pipeline checks its settings

    return flow_for(verb)


def start_job(ctx, command: Command, trigger: Trigger, scope: str = "", checkpoint: bool = True) -> Job | None:
    try:
        _flow(command.spec.pipeline).validate_settings(command.target, list(command.settings))
    except PipelineError as exc:
        ctx.reply(f"@{trigger.login} {exc.message}" + (f" ({exc.hint})" if exc.hint else ""), trigger.key)
        return None
    created = ctx.store.create_job(
        repo=ctx.repo.full_name,
        installation_id=ctx.installation_id,
        thread=ctx.thread,
        verb=command.verb,
        target=command.target or "",
        overrides=list(command.settings),
        options=dict(command.options),
        requested_by=trigger.login,
        trigger_comment_id=trigger.comment_id,
        checkpoint=checkpoint,
        scope=scope,
    )
    job = created.job
    if not created.created:
        if trigger.comment_id is None or job.trigger_comment_id != trigger.comment_id:
            ctx.reply(
                f"@{trigger.login} a `/liger {job.verb}` job is already active here (job {job.id}, {job.state}). "
                "`/liger status` shows it; `/liger cancel` stops it.",
                trigger.key,
            )
        return None  # else: the same comment delivered again, already handled
    status.publish(ctx.forge, ctx.store, job)
    ctx.runtime.queue.enqueue_job(job.id)
    return job


def _thread_job(ctx) -> Job | None:
    return ctx.store.latest_job(ctx.repo.full_name, ctx.thread)


def _no_job(ctx, trigger: Trigger, wanted: str) -> None:
    ctx.reply(
        f"@{trigger.login} there is no liger-bot job {wanted} in this thread. `/liger help` lists commands.",
        trigger.key,
    )


def approve(ctx, _command: Command, trigger: Trigger) -> None:
    job = _thread_job(ctx)
    if job is None or job.job_state is not JobState.AWAITING_APPROVAL:
        return _no_job(ctx, trigger, "waiting for approval")
    config = ctx.repo_config()
    if not config.may_approve(trigger.login):
        approvers = ", ".join(f"@{a}" for a in config.approvers)
        return ctx.reply(
            f"@{trigger.login} in this repository only {approvers} may approve (.github/liger-bot.yml).", trigger.key
        )
    try:
        job = ctx.store.transition(job.id, JobState.ACTING, message=f"approved by @{trigger.login}", next_command="")
    except IllegalTransition:
        return  # approved twice at once: the first one won
    status.publish(ctx.forge, ctx.store, job)
    ctx.runtime.queue.enqueue_job(job.id)


def set_fields(ctx, command: Command, trigger: Trigger) -> None:
    job = _thread_job(ctx)
    if job is None or job.job_state not in (JobState.AWAITING_APPROVAL, JobState.PR_OPENED):
        if job is not None and not job.job_state.terminal:
            return ctx.reply(
                f"@{trigger.login} job {job.id} is {job.state}; `/liger set` applies once it waits.", trigger.key
            )
        return _no_job(ctx, trigger, "to adjust (waiting for approval, or with its PR open)")
    try:
        _flow(job.verb).validate_settings(job.target, job.overrides + list(command.settings))
    except PipelineError as exc:
        return ctx.reply(f"@{trigger.login} {exc.message}" + (f" ({exc.hint})" if exc.hint else ""), trigger.key)
    overrides = job.overrides + [s for s in command.settings if s not in job.overrides]
    if job.job_state is JobState.AWAITING_APPROVAL:
        job = ctx.store.transition(
            job.id, JobState.AWAITING_APPROVAL, overrides=overrides, message=f"overrides set by @{trigger.login}"
        )
        return status.publish(ctx.forge, ctx.store, job)
    if ctx.thread != job.pr_number:
        return ctx.reply(
            f"@{trigger.login} job {job.id} has its PR open: use `/liger set` on PR #{job.pr_number}.", trigger.key
        )
    job = ctx.store.transition(
        job.id, JobState.ACTING, overrides=overrides, message=f"revising: overrides set by @{trigger.login}"
    )
    status.publish(ctx.forge, ctx.store, job)
    ctx.runtime.queue.enqueue_job(job.id)


def show_status(ctx, _command: Command, trigger: Trigger) -> None:
    job = _thread_job(ctx)
    if job is None:
        return _no_job(ctx, trigger, "yet")
    job = status.note_config_problems(ctx.store, job, ctx.repo_config().problems)  # as the file reads now
    status.publish(ctx.forge, ctx.store, job)


def cancel(ctx, _command: Command, trigger: Trigger) -> None:
    job = _thread_job(ctx)
    if job is None or job.job_state.terminal:
        return _no_job(ctx, trigger, "to cancel")
    try:
        job = ctx.store.transition(
            job.id, JobState.CANCELLED, message=f"cancelled by @{trigger.login}", next_command="/liger retry"
        )
    except IllegalTransition:
        return
    status.publish(ctx.forge, ctx.store, job)


def retry(ctx, _command: Command, trigger: Trigger) -> None:
    job = _thread_job(ctx)
    if job is None or job.job_state not in (JobState.FAILED, JobState.CANCELLED):
        return _no_job(ctx, trigger, "that failed or was cancelled")
    again = Command(job.verb, job.target or None, tuple(job.overrides), tuple((job.options or {}).items()))
    start_job(ctx, again, trigger)


def show_help(ctx, _command: Command, trigger: Trigger) -> None:
    ctx.reply(render_help(), trigger.key)


def _propose(ctx, body: str, trigger: Trigger) -> None:
    from bot.handlers.proposing import propose  # it builds on start_job and Trigger, defined here

    propose(ctx, body, trigger)


def confirm(ctx, command: Command, trigger: Trigger) -> None:
    from bot.handlers.proposing import confirm as confirm_proposal

    confirm_proposal(ctx, command, trigger)


CONTROL = {
    "help": show_help,
    "approve": approve,
    "set": set_fields,
    "status": show_status,
    "cancel": cancel,
    "retry": retry,
    "confirm": confirm,
}
