"""Prose addressed to the bot -> a proposed `/liger` command (the anthropic provider), and `/liger confirm`.

Off (nothing said, nothing spent) unless the App holds ANTHROPIC_API_KEY and the repo's config names the provider.
The comment goes to the API as data; the answer comes back as text that `bot.proposals.read_answer` parses with the
command grammar or refuses. Nothing runs here: a writer's `/liger confirm` starts the proposed command through
`start_job`, with that writer's permission checked for the command's own verb.
"""

from __future__ import annotations

from bot import permissions
from bot import proposals
from bot.commands import PREFIX
from bot.commands import VERBS
from bot.commands import Command
from bot.commands import CommandError
from bot.commands import parse_line
from bot.forge.base import Permission
from bot.handlers.commanding import Trigger
from bot.handlers.commanding import start_job
from bot.provider import provider_for
from pipelines import registry
from pipelines.llm.budget import OverBudget
from pipelines.outcome import PipelineError

PROPOSAL_ANSWER_TOKENS = 200  # one command line


def command_table() -> str:
    rows = ["| command | what it does |", "|---|---|"]
    for name in sorted(proposals.PROPOSABLE):
        verb = VERBS[name]
        rows.append(f"| `{PREFIX} {name} {verb.usage}` | {verb.help} |")
    fields = [f"{name}: {text}" for name in sorted(proposals.PROPOSABLE) if (text := registry.settings_help(name))]
    return "\n".join(rows) + ("\n\n--set " + "\n".join(fields) if fields else "")


def propose(ctx, body: str, trigger: Trigger) -> None:
    if not ctx.runtime.config.anthropic_api_key:  # the default bot: a mention without a command is no command
        return
    handle = ctx.forge.actor_login(ctx.repo).removesuffix("[bot]")
    if not proposals.addressed_to_bot(body, handle) or proposals.asked_already(ctx.store, trigger.comment_id):
        return
    verdict = permissions.check(ctx.forge, ctx.repo, trigger.login, Permission.WRITE)  # asking spends the budget
    if not verdict.allowed:
        return ctx.reply(verdict.reason, trigger.key)
    try:
        asked = _ask(ctx, body)
    except (CommandError, OverBudget) as exc:
        return ctx.reply(f"@{trigger.login} {exc}. `/liger help` lists the commands; type one to run it.", trigger.key)
    except PipelineError as exc:
        return ctx.reply(f"@{trigger.login} {exc.message}" + (f" ({exc.hint})" if exc.hint else ""), trigger.key)
    if asked is None:
        return
    command, answer = asked
    proposals.record(ctx.store, ctx.repo.full_name, ctx.thread, trigger.comment_id, trigger.login, command)
    ctx.reply(
        f"@{trigger.login} I read this as:\n\n```\n{command.text()}\n```\n\nNothing runs until someone with "
        f"{command.spec.permission.name.lower()} access replies `/liger confirm` here (within 24 hours).\n\n"
        f"<sub>proposed by the anthropic provider: {answer.spend.tokens:,} tokens, ${answer.spend.usd:.4f}</sub>",
        trigger.key,
    )


def _ask(ctx, body: str):
    """(the proposed command, parsed and its settings checked; the answer), or None where the provider is off."""
    from pipelines.llm import prompts

    provider = provider_for(ctx.runtime, ctx.repo.full_name, ctx.repo_config(), purpose="propose")
    if provider is None:
        return None
    text = body[: proposals.MAX_PROSE_CHARACTERS]
    system, messages = prompts.propose_system(command_table()), prompts.propose_messages(text)
    answer = provider.ask(system, messages, PROPOSAL_ANSWER_TOKENS)
    command = proposals.read_answer(answer.text)
    from bot.worker.flow import flow_for

    flow_for(command.spec.pipeline).validate_settings(command.target, list(command.settings))
    return command, answer


def confirm(ctx, _command: Command, trigger: Trigger) -> None:
    proposal = proposals.take_open(ctx.store, ctx.repo.full_name, ctx.thread, trigger.login)
    if proposal is None:
        return ctx.reply(f"@{trigger.login} there is no open proposal to confirm in this thread.", trigger.key)
    command = parse_line(proposal.command)  # the grammar again: the row holds text, not a trusted command
    verdict = permissions.check(ctx.forge, ctx.repo, trigger.login, command.spec.permission)
    if not verdict.allowed:
        return ctx.reply(verdict.reason, trigger.key)
    start_job(ctx, command, trigger)
