"""The one table of pipelines: verb -> the `module:ATTRIBUTE` of its row (a pipelines.contract.Pipeline).

The bot's command table (bot.commands: one `/liger <verb>` per line here), its job flows (bot.worker), `liger-bot
verify` and the CLI read this table and nothing else; adding a pipeline is its folder `pipelines/<name>/` and one
line below. A row is imported on first use, and rows import their heavy modules (torch, transformers) inside
their stages: importing this module, or reading a row's words, loads neither. The `module:ATTRIBUTE` string is
also how a stage's child process (bot.isolation) finds the row again.
"""

from __future__ import annotations

import importlib

from pipelines.contract import Pipeline
from pipelines.outcome import PipelineError

PIPELINES: dict[str, str] = {
    "autopatch": "pipelines.autopatch.job:PIPELINE",
    "kernel": "pipelines.kernel.job:PIPELINE",
    "chunked-loss": "pipelines.chunked_loss.job:PIPELINE",
    "perf": "pipelines.perf.job:PIPELINE",
    "fuse": "pipelines.fuse.job:PIPELINE",
}


def names() -> tuple[str, ...]:
    """Every pipeline's verb, in the table's order (the order `/liger help` lists them)."""
    return tuple(PIPELINES)


def location(name: str) -> str:
    """The row's `module:ATTRIBUTE`; a PipelineError for a verb no pipeline runs."""
    try:
        return PIPELINES[name]
    except KeyError:
        raise PipelineError(f"no pipeline runs `{name}` yet") from None


def resolve(where: str) -> Pipeline:
    """The row at `module:ATTRIBUTE`."""
    module, _, attribute = where.partition(":")
    return getattr(importlib.import_module(module), attribute)


def pipeline(name: str) -> Pipeline:
    """The row of `name`, in process (what a stage's child and `liger-bot verify` run)."""
    return resolve(location(name))


def profile_table(name: str, profile: dict) -> str:
    """The profile as its pipeline tabulates it; "" for a verb no pipeline runs."""
    return pipeline(name).profile_table(profile) if name in PIPELINES else ""


def settings_help(name: str) -> str:
    """The `--set field=value` names and values a pipeline accepts (the provider's proposals are told them)."""
    return pipeline(name).settings_help if name in PIPELINES else ""
