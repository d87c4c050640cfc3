"""The one contract every pipeline implements, and what crosses it.

A pipeline is one `Pipeline` row in `pipelines/<name>/job.py`, named by one line of `pipelines.registry`; the bot's
command table, its job flow, `liger-bot verify` and the CLI read the registry and nothing else. Every pipeline runs
the same job flow: understand -> [checkpoint] -> act + verify -> push -> PR. A row turns a job's words (target,
options, `field=value` settings) into the pipeline's calls, and the pipeline's results into what the job shows and
pushes: a profile (JSON, and a markdown table of it), the branch, the gates, the PR's title and body.
`verify_branch` is what `liger-bot verify` runs on a GPU runner against the pushed branch; a pipeline without one
always verifies where it acts.

Rows import their pipeline's heavy modules (torch, transformers) inside their functions: the web process reads the
table (the command grammar, the settings check) without loading them. Nothing here knows GitHub or jobs: the bot
wraps a row to run its stages in a child process (bot.isolation) where they run the target repository's code.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from pipelines.outcome import GateResult
from pipelines.outcome import PipelineError
from pipelines.pull_request import BodyParts
from pipelines.target import Checkout

BRANCH_PREFIX = "liger-bot/"  # every branch the bot pushes; the one place it is spelled
# Request options the worker sets (never a command's: `--llm:...` is no option of any verb's grammar)
TIER3_DRAFTS = "llm:tier3"  # "on": a tier-3 kernel is understood for the provider to draft, not refused
DRAFT = "llm:draft"  # the provider's draft of a tier-3 kernel's ops file, to write and verify in the stage child
Progress = Callable[[object], None]  # text lines, or GateResults as verify produces them


def branch_name(verb: str, name: str) -> str:
    """`liger-bot/<verb>-<name>`: the branch is the key a job's push and PR are found again by."""
    return f"{BRANCH_PREFIX}{verb}-{name}"


@dataclass(frozen=True)
class Request:
    """One job's input to a pipeline, on a fresh checkout of the default branch."""

    checkout: Checkout
    target: str
    settings: tuple[str, ...] = ()
    options: Mapping[str, str] = field(default_factory=dict)
    out_dir: Path | None = None  # reports, benchmark tables (no .py: the verify workflow keeps it in the checkout)
    profile: dict | None = None  # the approved profile (JSON): act and verify apply it instead of re-deriving it


@dataclass(frozen=True)
class Understood:
    profile: dict  # JSON, kept on the job and shown at the checkpoint
    branch: str  # liger-bot/<verb>-<name>; "" when there is nothing to propose
    needs_review: tuple[str, ...] = ()
    summary: str = ""  # said when there is nothing to propose


@dataclass(frozen=True)
class Outcome:
    branch: str
    gates: list[GateResult]
    files: list[str]
    pr_title: str
    pr: BodyParts | None  # the PR body's parts: the job renders the body once, from these and its gates
    ok: bool
    profile: dict | None = None
    verify_target: str = ""  # `liger-bot verify --target` on a GPU runner; "" : this pipeline verifies here


@dataclass(frozen=True)
class Usage:
    """How the pipeline's `/liger <verb>` reads: the words of the bot's command grammar (bot.commands), by name."""

    arguments: str  # what follows the verb, as help shows it, e.g. "SPEC [--name NAME]"
    help: str
    target: str  # the kind of its one positional argument: a key of bot.commands.TARGETS ("model", "kernel spec")
    takes_settings: bool = False  # accepts `--set field=value`
    options: tuple[str, ...] = ()  # named `--option VALUE`s: keys of bot.commands.OPTIONS


def no_settings(_target: str | None, settings: list[str]) -> None:
    if settings:
        raise PipelineError("this command takes no field=value settings")


@dataclass(frozen=True)
class Pipeline:
    """One pipeline's row: every stage the job flow and `liger-bot verify` call, and its command's words."""

    understand: Callable[[Request], Understood]
    act_verify: Callable[[Request, Progress], Outcome]
    profile_table: Callable[[dict], str]
    usage: Usage | None = None  # its `/liger` verb's words; every registered row has them (a test's stand-in not)
    validate_settings: Callable[[str | None, list[str]], None] = no_settings  # raises PipelineError with the reply
    verify_branch: Callable[[Request, Progress], list[GateResult]] | None = None
    verify_target: str = "kernel name"  # the kind (bot.commands.TARGETS) of `liger-bot verify --target`
    settings_help: str = ""  # the `--set field=value` names and values it accepts (the provider is told them)


# --- pieces the rows share ----------------------------------------------------------------------------------


def cell(value) -> str:
    """A value as one markdown table cell."""
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("|", "\\|").replace("\n", " ")[:120]


def field_table(profile: dict, fields: tuple[str, ...]) -> str:
    rows = ["| field | value |", "|---|---|"]
    rows += [f"| {key} | `{cell(profile[key])}` |" for key in fields if key in profile]
    return "\n".join(rows)


def file_in_checkout(checkout: Checkout, spec: str) -> Path:
    """The file of `path/in/repo.py[:name]`, refused unless it is a file inside the checkout (symlinks resolved)."""
    path_part = spec.partition(":")[0]
    root = checkout.root.resolve()
    resolved = (root / path_part).resolve()
    if Path(path_part).is_absolute() or not resolved.is_relative_to(root) or not resolved.is_file():
        raise PipelineError(
            f"`{path_part}` is not a file of this repository's default branch",
            hint="name a .py file by its path from the repository root",
        )
    return resolved


def run_outcome(run, pr_title: str, verify_target: str) -> Outcome:
    """A file-writing pipeline's run (pipelines.outcome.PipelineRun: kernel, chunked-loss) as the job flow's Outcome."""
    return Outcome(
        branch=run.branch,
        gates=list(run.gates),
        files=list(run.files),
        pr_title=pr_title,
        pr=run.pr,
        ok=not run.failed,
        profile=run.profile.to_json(),
        verify_target=verify_target,
    )
