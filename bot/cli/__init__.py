"""`liger-bot`: a thin `main` around a testable `program(argv, env)` (httpie-style).

Each subcommand lives in its own module under `bot/cli/` and exposes `register(subparsers)`, which adds its
parser and sets `handler=` to a function `(args, ui) -> ExitStatus`. Adding a command is one line in
COMMAND_MODULES.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import TextIO

from pipelines.outcome import ExitStatus
from pipelines.outcome import PipelineError

DESCRIPTION = (
    "Kernel engineering for Liger-Kernel: autopatch HF models, write Triton kernels and chunked losses, rewrite traced graphs, "
    "and the GitHub App that runs them. Exit statuses: 0 done, 1 unexpected failure, 2 usage, 3 refused, "
    "4 a verify gate failed, 130 interrupted. With --json, an error is a JSON object on stdout too."
)
ERROR_SCHEMA = 1  # the version of --json's error object: {"schema", "error": {"message", "hint", "status"}}
COMMAND_MODULES = (
    "bot.cli.target",
    "bot.cli.autopatch",
    "bot.cli.debug",
    "bot.cli.kernel",
    "bot.cli.chunked_loss",
    "bot.cli.perf",
    "bot.cli.demo",
    "bot.cli.fuse",
    "bot.cli.app",
    "bot.cli.verify",
)


class UI:
    """Where a command writes: results to `out`, progress and errors to `err` (so `--json` stays parseable)."""

    def __init__(self, out: TextIO, err: TextIO, env: Mapping[str, str], quiet: bool = False):
        self.out = out
        self.err = err
        self.env = env
        self.quiet = quiet

    def result(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def progress(self, text: str) -> None:
        if not self.quiet:
            print(f"liger-bot: {text}", file=self.err, flush=True)

    def error(self, text: str) -> None:
        print(f"liger-bot: error: {text}", file=self.err, flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="liger-bot", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"liger-bot {_version()}")
    loudness = parser.add_mutually_exclusive_group()
    loudness.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr (errors still)")
    loudness.add_argument("-v", "--verbose", action="store_true", help="also the pipelines' debug log on stderr")
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
    ui = UI(out, err, env, quiet=args.quiet)
    if args.verbose:
        logging.basicConfig(stream=err, level=logging.DEBUG, format="liger-bot: %(name)s: %(message)s")
    try:
        return args.handler(args, ui)
    except PipelineError as exc:
        ui.error(str(exc))
        _json_error(args, ui, exc.message, exc.hint, exc.status)
        return exc.status
    except KeyboardInterrupt:
        ui.error("interrupted")
        _json_error(args, ui, "interrupted", "", ExitStatus.INTERRUPTED)
        return ExitStatus.INTERRUPTED


def _json_error(args: argparse.Namespace, ui: UI, message: str, hint: str, status: ExitStatus) -> None:
    """A command run with --json keeps stdout parseable when it fails: one error object, versioned."""
    if getattr(args, "json", False):
        error = {"message": message, "hint": hint, "status": int(status)}
        ui.result(json.dumps({"schema": ERROR_SCHEMA, "error": error}))


def main() -> None:
    sys.exit(int(program(sys.argv[1:], os.environ)))
