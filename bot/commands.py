"""The `/liger` command grammar: pure functions from comment text to commands, and the verb registry.

A later pipeline plugs in by adding one row to VERBS (verb -> pipeline, required permission, help line) and a
runner to `bot.worker.RUNNERS`; `/liger help` is rendered from this table. Text inside fenced or indented code
blocks, inline code and `>` quotes is never a command (people quote commands when they explain them).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from bot.forge.base import Permission

PREFIX = "/liger"
MAX_COMMANDS_PER_COMMENT = 5
MAX_TARGET_LENGTH = 80
MAX_SETTING_LENGTH = 300

# A model is named by model_type, class or display name: letters, digits, '.', '_' and '-' only, so a name can
# never become a path outside its folder or a shell word.
_TARGET_RE = re.compile(r"^[A-Za-z][A-Za-z0-9._-]*$")
_SETTING_RE = re.compile(r"^[a-z][a-z0-9_]*=.+$", re.DOTALL)
_FENCE_RE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_INLINE_CODE_RE = re.compile(r"(`+).*?\1")
_HTML_COMMENT_RE = re.compile(r"<!--.*?-->", re.DOTALL)


@dataclass(frozen=True)
class Verb:
    name: str
    usage: str  # the arguments after the verb, as help shows them
    help: str
    permission: Permission
    pipeline: str | None = None  # the job kind it starts; None: it acts on the thread's current job
    takes_target: bool = False
    takes_settings: bool = False  # accepts field=value settings (as `--set f=v` or bare for `set`)


VERBS: dict[str, Verb] = {
    verb.name: verb
    for verb in (
        Verb("help", "", "show this help", Permission.NONE),
        Verb(
            "autopatch",
            "MODEL [--set field=value ...]",
            "profile MODEL, then (after `/liger approve`) patch it into the target, verify it and open a draft PR",
            Permission.WRITE,
            pipeline="autopatch",
            takes_target=True,
            takes_settings=True,
        ),
        Verb("approve", "", "continue the job waiting at its checkpoint in this thread", Permission.WRITE),
        Verb(
            "set",
            "field=value ...",
            "override profile decisions of this thread's job (on the bot's PR: re-run act and verify)",
            Permission.WRITE,
            takes_settings=True,
        ),
        Verb("status", "", "show where this thread's job stands", Permission.NONE),
        Verb("cancel", "", "cancel this thread's active job", Permission.WRITE),
        Verb("retry", "", "start this thread's last failed or cancelled job again", Permission.WRITE),
        Verb(
            "scan",
            "",
            "classify every causal LM of transformers against the target; update the dashboard issue",
            Permission.WRITE,
            pipeline="scan",
        ),
    )
}


@dataclass(frozen=True)
class Command:
    verb: str
    target: str | None = None
    settings: tuple[str, ...] = ()  # "field=value", syntax-checked; the pipeline checks names and values

    @property
    def spec(self) -> Verb:
        return VERBS[self.verb]

    def text(self) -> str:
        parts = [PREFIX, self.verb] + ([self.target] if self.target else [])
        if self.verb == "set":
            parts += [shlex.quote(s) for s in self.settings]
        else:
            for setting in self.settings:
                parts += ["--set", shlex.quote(setting)]
        return " ".join(parts)


class CommandError(ValueError):
    """A command we recognised but refuse; `str()` is the reply a person sees."""


def _shown(text: str, limit: int = 40) -> str:
    text = text.replace("`", "'").replace("\n", " ")
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def command_lines(body: str) -> list[str]:
    """The lines of a comment that start with `/liger`, outside code blocks, inline code and quotes."""
    lines: list[str] = []
    fence: str | None = None
    for raw in _HTML_COMMENT_RE.sub("", body or "").splitlines():
        opening = _FENCE_RE.match(raw)
        if fence is not None:
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
                fence = None
            continue
        if opening:
            fence = opening.group(1)
            continue
        if raw.startswith(("    ", "\t")) or raw.lstrip().startswith(">"):
            continue
        line = _INLINE_CODE_RE.sub("", raw).strip()
        if line == PREFIX or line.startswith(PREFIX + " "):
            lines.append(line)
    return lines


def validate_target(target: str) -> str:
    if len(target) > MAX_TARGET_LENGTH:
        raise CommandError(f"the model name {_shown(target)} is too long (at most {MAX_TARGET_LENGTH} characters)")
    if not _TARGET_RE.match(target) or ".." in target:
        raise CommandError(
            f"`{_shown(target)}` is not a model name: use a model_type, class or display name "
            "(letters, digits, `.`, `_`, `-`), e.g. `/liger autopatch nemotron`"
        )
    return target


def _setting(text: str) -> str:
    if len(text) > MAX_SETTING_LENGTH or not _SETTING_RE.match(text):
        raise CommandError(f"`{_shown(text)}` is not field=value (for example `rms_offset=1.0`)")
    return text


def parse_line(line: str) -> Command:
    """One `/liger ...` line -> Command. Raises CommandError with the reply for anything malformed."""
    try:
        words = shlex.split(line[len(PREFIX) :], posix=True)
    except ValueError as exc:
        raise CommandError(f"could not read `{_shown(line, 60)}`: {exc}") from None
    if not words:
        return Command("help")
    verb_name, args = words[0].lower(), words[1:]
    verb = VERBS.get(verb_name)
    if verb is None:
        raise CommandError(f"`{_shown(verb_name)}` is not a `/liger` command. Try `/liger help`.")
    target = None
    if verb.takes_target:
        if not args or args[0].startswith("--"):
            raise CommandError(f"`/liger {verb.name}` needs a model: `/liger {verb.name} {verb.usage}`")
        target, args = validate_target(args[0]), args[1:]
    settings = _settings(verb, args)
    if verb.name == "set" and not settings:
        raise CommandError("`/liger set` needs at least one field=value, e.g. `/liger set rms_offset=1.0`")
    return Command(verb.name, target, settings)


def _settings(verb: Verb, args: list[str]) -> tuple[str, ...]:
    if verb.name == "set":
        return tuple(_setting(arg) for arg in args)
    settings: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg == "--set" and verb.takes_settings:
            value = next(rest, None)
            if value is None:
                raise CommandError("`--set` needs field=value after it")
            settings.append(_setting(value))
        elif arg.startswith("--set=") and verb.takes_settings:
            settings.append(_setting(arg[len("--set=") :]))
        else:
            raise CommandError(f"`/liger {verb.name}` does not take `{_shown(arg)}`: `/liger {verb.name} {verb.usage}`")
    return tuple(settings)


def parse_comment(body: str) -> list[Command | CommandError]:
    """Every command in a comment, in order (at most MAX_COMMANDS_PER_COMMENT), each parsed or refused."""
    parsed: list[Command | CommandError] = []
    for line in command_lines(body)[:MAX_COMMANDS_PER_COMMENT]:
        try:
            parsed.append(parse_line(line))
        except CommandError as exc:
            parsed.append(exc)
    return parsed


def render_help() -> str:
    rows = ["| command | what it does | who may run it |", "|---|---|---|"]
    for verb in VERBS.values():
        usage = f"{PREFIX} {verb.name} {verb.usage}".strip()
        who = "anyone" if verb.permission <= Permission.READ else f"{verb.permission.name.lower()} access or higher"
        rows.append(f"| `{usage}` | {verb.help} | {who} |")
    notes = "Commands inside code blocks, inline code or `>` quotes are ignored."
    return "**liger-bot commands**\n\n" + "\n".join(rows) + "\n\n" + notes
