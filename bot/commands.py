"""The `/liger` command grammar: pure functions from comment text to commands, and the verb registry.

A pipeline plugs in with one line of `pipelines.registry`: its row's words (pipelines.contract.Usage) become its
verb here, which starts work with write access; `/liger help` is rendered from this table. What a verb's target may
be (a model name, a kernel spec, a model file) is a row of TARGETS, checked before anything becomes a path. Text inside
fenced or indented code blocks, inline code, HTML blocks, `<details>` and `>` quotes (with their lazy continuation
lines) is never a command: people quote commands when they explain them, and a quote-reply must never turn an
outsider's text into the quoter's command (`bot.rendered` judges lines the way GitHub renders them).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass

from bot import rendered
from bot.forge.base import Permission
from pipelines import registry

PREFIX = "/liger"
MAX_COMMANDS_PER_COMMENT = 5
MAX_TARGET_LENGTH = 80
MAX_PATH_SPEC_LENGTH = 100  # the job row keeps 100 characters of target
MAX_SETTING_LENGTH = 300

# A model is named by model_type, class or display name: letters, digits, '.', '_' and '-' only, so a name can
# never become a path outside its folder or a shell word.
_TARGET_RE = re.compile(r"^[A-Za-z][A-Za-z0-9._-]*$")
_SETTING_RE = re.compile(r"^[a-z][a-z0-9_]*=.+$", re.DOTALL)
# `path/in/repo.py[:name]`, relative, every segment starting with a letter, digit or '_' (no `..`, no `/abs`, no `-x`)
_PATH_SPEC_RE = re.compile(
    r"^(?P<path>[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.-]*)*\.py)"
    r"(?::(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*))?$"
)
_SNAKE_RE = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
_INLINE_CODE_RE = re.compile(r"(`+).*?\1")


@dataclass(frozen=True)
class Verb:
    name: str
    usage: str  # the arguments after the verb, as help shows them
    help: str
    permission: Permission
    pipeline: str | None = None  # the job kind it starts; None: it acts on the thread's current job
    target: str | None = None  # the kind of its one positional argument, a key of TARGETS; None: takes none
    takes_settings: bool = False  # accepts field=value settings (as `--set f=v` or bare for `set`)
    options: tuple[str, ...] = ()  # named `--option VALUE`s it accepts, keys of OPTIONS

    @property
    def takes_target(self) -> bool:
        return self.target is not None


# The verbs that are no pipeline of the registry, in help's order; each pipeline's verb comes after `help`.
_HELP = Verb("help", "", "show this help", Permission.NONE)
_THREAD_VERBS = (
    Verb("approve", "", "continue the job waiting at its checkpoint in this thread", Permission.WRITE),
    Verb(
        "set",
        "field=value ...",
        "override profile decisions of this thread's job (on the bot's PR: re-run act and verify)",
        Permission.WRITE,
        takes_settings=True,
    ),
    Verb(
        "confirm",
        "",
        "run the command liger-bot proposed for a request in plain words in this thread (the optional LLM "
        "provider); the command's own permission applies",
        Permission.WRITE,
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


def pipeline_verb(name: str) -> Verb:
    """A registry pipeline's `/liger <name>`, in the words its row gives; starting work needs write access."""
    usage = registry.pipeline(name).usage
    return Verb(
        name,
        usage.arguments,
        usage.help,
        Permission.WRITE,
        pipeline=name,
        target=usage.target,
        takes_settings=usage.takes_settings,
        options=usage.options,
    )


class _VerbTable(Mapping[str, Verb]):
    """verb -> Verb: `help`, one per pipeline of `pipelines.registry` (read again when the registry changes), then
    the thread's verbs. Reading the rows' words imports no pipeline's heavy modules."""

    def __init__(self) -> None:
        self._key: tuple = ()
        self._verbs: dict[str, Verb] = {}

    def _table(self) -> dict[str, Verb]:
        key = tuple(registry.PIPELINES.items())
        if key != self._key:
            verbs = (_HELP, *(pipeline_verb(name) for name in registry.names()), *_THREAD_VERBS)
            self._verbs, self._key = {verb.name: verb for verb in verbs}, key
        return self._verbs

    def __getitem__(self, name: str) -> Verb:
        return self._table()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


VERBS: Mapping[str, Verb] = _VerbTable()


@dataclass(frozen=True)
class Command:
    verb: str
    target: str | None = None
    settings: tuple[str, ...] = ()  # "field=value", syntax-checked; the pipeline checks names and values
    options: tuple[tuple[str, str], ...] = ()  # (name, value) of `--name VALUE`, checked by OPTIONS

    @property
    def spec(self) -> Verb:
        return VERBS[self.verb]

    def text(self) -> str:
        return command_text(self.verb, self.target, self.settings, dict(self.options))


def command_text(verb: str, target: str | None, settings=(), options: dict | None = None) -> str:
    """The `/liger ...` line that asks for this again (help, retry hints, the status comment)."""
    parts = [PREFIX, verb] + ([target] if target else [])
    if verb == "set":
        parts += [shlex.quote(s) for s in settings]
    else:
        for setting in settings:
            parts += ["--set", shlex.quote(setting)]
    for name, value in (options or {}).items():
        parts += [f"--{name}"] if name in FLAGS else [f"--{name}", shlex.quote(value)]
    return " ".join(parts)


class CommandError(ValueError):
    """A command we recognised but refuse; `str()` is the reply a person sees."""


def _shown(text: str, limit: int = 40) -> str:
    text = text.replace("`", "'").replace("\n", " ")
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def command_lines(body: str) -> list[str]:
    """The lines of a comment that start with `/liger`, among the lines GitHub renders as the comment's own text
    (`bot.rendered`: not quoted, lazily or not, not code, not HTML), inline code removed."""
    found: list[str] = []
    for text in rendered.plain_lines(body):
        line = _INLINE_CODE_RE.sub("", text).strip(" \t")
        if line == PREFIX or line.startswith(PREFIX + " "):
            found.append(line)
    return found


def validate_target(target: str) -> str:
    if len(target) > MAX_TARGET_LENGTH:
        raise CommandError(f"the model name {_shown(target)} is too long (at most {MAX_TARGET_LENGTH} characters)")
    if not _TARGET_RE.match(target) or ".." in target:
        raise CommandError(
            f"`{_shown(target)}` is not a model name: use a model_type, class or display name "
            "(letters, digits, `.`, `_`, `-`), e.g. `/liger autopatch nemotron`"
        )
    return target


def validate_path_spec(text: str, name_required: bool = False) -> str:
    """`path/in/repo.py[:name]`: relative to the target repository and never leaving it; the worker checks again
    that the file is inside the checkout before any pipeline reads it."""
    found = _PATH_SPEC_RE.match(text) if len(text) <= MAX_PATH_SPEC_LENGTH else None
    if found is None or ".." in text or (name_required and not found.group("name")):
        usage = "path/in/repo.py:Factory" if name_required else "path/in/repo.py:function"
        raise CommandError(
            f"`{_shown(text)}` is not `{usage}`: a .py file inside the repository (relative, no `..`, at most "
            f"{MAX_PATH_SPEC_LENGTH} characters){'' if name_required else ', or an activation name such as `relu2`'}"
        )
    return text


def validate_kernel_spec(text: str) -> str:
    """A transformers activation name (`relu2`, `gelu_pytorch_tanh`) or `path/in/repo.py[:function]`."""
    if ":" in text or text.endswith(".py"):
        return validate_path_spec(text)
    if not _SNAKE_RE.match(text):
        raise CommandError(
            f"`{_shown(text)}` is not a kernel spec: an activation name (lowercase letters, digits, `_`, e.g. "
            "`relu2`) or `path/in/repo.py:function`"
        )
    return text


def validate_loss_spec(text: str) -> str:
    """`trl:<trainer>:<loss_type>` (snake_case words) or `path/in/repo.py[:name]`."""
    if text.startswith("trl:"):
        parts = text.split(":")
        if len(parts) != 3 or not all(_SNAKE_RE.match(p) for p in parts[1:]):
            raise CommandError(f"`{_shown(text)}` is not `trl:<trainer>:<loss_type>`, e.g. `trl:dpo:ipo`")
        return text
    if ":" in text or text.endswith(".py"):
        return validate_path_spec(text)
    raise CommandError(
        f"`{_shown(text)}` is not a loss spec: `path/in/repo.py:Class_or_function` or `trl:<trainer>:<loss_type>`"
    )


def validate_model_file(text: str) -> str:
    return validate_path_spec(text, name_required=True)


def validate_kernel_name(text: str) -> str:
    if not _SNAKE_RE.match(text):
        raise CommandError(f"`{_shown(text)}` is not a kernel name: snake_case, e.g. `--name relu_squared`")
    return text


def validate_pass(text: str) -> str:
    if text not in ("forward", "backward", "full"):
        raise CommandError(f"`--pass {_shown(text)}`: one of `forward`, `backward`, `full`")
    return text


def validate_speedup(text: str) -> str:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 100:
        raise CommandError(f"`--target-speedup {_shown(text)}`: a number over 0, e.g. 1.0 (as fast as torch.compile)")
    return text


# target kind -> validator; a validator returns the text unchanged or raises CommandError with the reply
TARGETS = {
    "model": validate_target,
    "kernel spec": validate_kernel_spec,
    "kernel name": validate_kernel_name,
    "model file": validate_model_file,
    "loss spec": validate_loss_spec,
}
# options that take no value: present means "yes" (`--force`: write a kernel the target already has)
FLAGS = {"force"}
# option -> validator of its value
OPTIONS = {
    "name": validate_kernel_name,
    "pass": validate_pass,
    "target-speedup": validate_speedup,
}


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
            noun = "a model" if verb.target == "model" else f"a {verb.target}"
            raise CommandError(f"`/liger {verb.name}` needs {noun}: `/liger {verb.name} {verb.usage}`")
        target, args = TARGETS[verb.target](args[0]), args[1:]
    settings, options = _arguments(verb, args)
    if verb.name == "set" and not settings:
        raise CommandError("`/liger set` needs at least one field=value, e.g. `/liger set rms_offset=1.0`")
    return Command(verb.name, target, settings, options)


def _arguments(verb: Verb, args: list[str]) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """(settings, options) from the words after the target: `--set f=v`, `--set=f=v`, `--name N`, `--name=N`."""
    if verb.name == "set":
        return tuple(_setting(arg) for arg in args), ()
    settings: list[str] = []
    options: dict[str, str] = {}
    rest = iter(args)
    for arg in rest:
        flag, equals, inline = arg.partition("=")
        name = flag[2:] if flag.startswith("--") else ""
        accepted = (name == "set" and verb.takes_settings) or name in verb.options
        if not accepted:
            raise CommandError(f"`/liger {verb.name}` does not take `{_shown(arg)}`: `/liger {verb.name} {verb.usage}`")
        if name in FLAGS:
            if equals:
                raise CommandError(f"`--{name}` takes no value")
            options[name] = "yes"
            continue
        value = inline if equals else next(rest, None)
        if value is None:
            raise CommandError(f"`--{name}` needs {'field=value' if name == 'set' else 'a value'} after it")
        if name == "set":
            settings.append(_setting(value))
        else:
            options[name] = OPTIONS[name](value)
    return tuple(settings), tuple(options.items())


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
