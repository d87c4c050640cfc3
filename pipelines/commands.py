"""Run a subprocess for a pipeline stage: argv lists only (never a shell), bounded in time, output captured."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    output: str  # stdout and stderr interleaved

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.output.splitlines()[-lines:])


def run_command(argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> CommandResult:
    merged = {**os.environ, **(env or {})}
    try:
        proc = subprocess.run(
            argv, cwd=cwd, env=merged, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return CommandResult(tuple(argv), -9, out + f"\n[timed out after {timeout:.0f}s]")
    return CommandResult(tuple(argv), proc.returncode, proc.stdout)
