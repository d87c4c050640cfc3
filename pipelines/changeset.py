"""A changeset: the files a pipeline writes into the target, and the target's own style applied to them.

Every pipeline that edits the target (autopatch, kernel, fuse) builds one in memory first, so a refusal writes
nothing, then writes it and runs the target's ruff (its pyproject.toml: isort order, line length 120) on it.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError
from pipelines.subprocesses import run_command
from pipelines.target import Checkout


@dataclass(frozen=True)
class FileChange:
    path: str  # relative to the checkout root
    text: str
    created: bool = False


@dataclass(frozen=True)
class Changeset:
    changes: tuple[FileChange, ...]
    notes: tuple[str, ...] = ()  # conservative choices made for decisions that need review

    @property
    def paths(self) -> list[str]:
        return [c.path for c in self.changes]

    def write(self, root: Path) -> None:
        for change in self.changes:
            path = root / change.path
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w", newline="") as handle:  # the text carries the file's own line endings
                handle.write(change.text)


def generated_changeset(created: dict[str, str], edited: dict[str, str]) -> Changeset:
    """New files and edits of the target's own, each checked to parse: a template that renders invalid Python is a
    bug of this project, never a change to propose."""
    changes = [FileChange(p, t, created=True) for p, t in created.items()]
    changes += [FileChange(p, t) for p, t in edited.items()]
    for change in changes:
        try:
            ast.parse(change.text)
        except SyntaxError as exc:
            raise RuntimeError(f"generated {change.path} does not parse: {exc}") from exc
    return Changeset(tuple(changes))


def edit_file(root: Path, relative: Path, edit) -> FileChange:
    """Apply `edit(text) -> text` to a file, keeping its line endings (the target's README.md is CRLF)."""
    with open(root / relative, newline="") as handle:
        original = handle.read()
    crlf = "\r\n" in original
    edited = edit(original.replace("\r\n", "\n"))
    return FileChange(str(relative), edited.replace("\n", "\r\n") if crlf else edited)


def ruff_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "ruff", *args]


def format_with_target_style(checkout: Checkout, paths: list[str]) -> None:
    """The target's own ruff configuration (its pyproject.toml) on the touched files: isort order, then format."""
    paths = [p for p in paths if p.endswith(".py")]
    # lint findings that --fix cannot repair are the checkstyle gate's to report, not an error here
    run_command(ruff_argv("check", "--fix", "--quiet", *paths), cwd=checkout.root, timeout=120)
    fmt = run_command(ruff_argv("format", "--quiet", *paths), cwd=checkout.root, timeout=120)
    if not fmt.ok:
        raise PipelineError(f"ruff format failed on the generated files:\n{fmt.tail()}")


def checkstyle_gate(checkout: Checkout, paths: list[str]) -> GateResult:
    """The target's ruff (its pyproject.toml) on the written files, as its CI runs it: `ruff check` and
    `ruff format --check` (kernel, perf and fuse write files into the target; autopatch checks the whole tree)."""
    lint = run_command(ruff_argv("check", "--output-format=concise", *paths), cwd=checkout.root, timeout=120)
    fmt = run_command(ruff_argv("format", "--check", *paths), cwd=checkout.root, timeout=120)
    if lint.ok and fmt.ok:
        return GateResult("checkstyle", GateStatus.PASS, f"ruff check + ruff format --check: {', '.join(paths)}")
    return GateResult("checkstyle", GateStatus.FAIL, (lint.tail(15) + "\n" + fmt.tail(15)).strip())
