"""`liger-bot`: a thin `main` around a testable `program(argv, env)` (httpie-style).

Each subcommand lives in its own module under `bot/cli/` and exposes `register(subparsers)`, which adds its
parser and sets `handler=` to a function `(args, ui) -> ExitStatus`. Adding a command is one line in
COMMAND_MODULES.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Mapping
from typing import TextIO

from pipelines.outcome import ExitStatus
from pipelines.outcome import PipelineError

DESCRIPTION = (
    "Kernel engineering for Liger-Kernel: autopatch HF models, write Triton kernels, rewrite traced graphs, "
    "and the GitHub App that runs them. Exit statuses: 0 done, 1 unexpected failure, 2 usage, 3 refused, "
    "4 a verify gate failed."
)
COMMAND_MODULES = (
    "bot.cli.target",
    "bot.cli.autopatch",
    "bot.cli.debug",
    "bot.cli.kernel",
    "bot.cli.perf",
    "bot.cli.demo",
    "bot.cli.fuse",
    "bot.cli.app",
    "bot.cli.verify",
)


class UI:
    """Where a command writes: results to `out`, progress and errors to `err` (so `--json` stays parseable)."""

    def __init__(self, out: TextIO, err: TextIO, env: Mapping[str, str]):
        self.out = out
        self.err = err
        self.env = env

    def result(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def progress(self, text: str) -> None:
        print(f"liger-bot: {text}", file=self.err, flush=True)

    def error(self, text: str) -> None:
        print(f"liger-bot: error: {text}", file=self.err, flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="liger-bot", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"liger-bot {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version

    try:
        return version("liger-bot")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def program(argv: list[str], env: Mapping[str, str], out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> ExitStatus:
    args = build_parser().parse_args(argv)
    ui = UI(out, err, env)
    try:
        return args.handler(args, ui)
    except PipelineError as exc:
        ui.error(str(exc))
        return exc.status
    except KeyboardInterrupt:
        ui.error("interrupted")
        return ExitStatus.ERROR


def main() -> None:
    sys.exit(int(program(sys.argv[1:], os.environ)))
