"""What the GPU benchmark scripts share: a child run under a hard limit (its whole process group killed there) and a
clone of one branch that runs none of the repository's hooks."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path


def run_bounded(argv: list[str], cwd: Path, log: Path, limit: float, env: dict | None = None) -> tuple[object, float]:
    """(exit status or "timeout" / "not started", seconds): under 5 s left nothing starts; the whole process group is
    killed at the limit."""
    if limit < 5:
        return "not started", 0.0
    started = time.monotonic()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as handle:
        proc = subprocess.Popen(
            argv, cwd=cwd, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True, env=env or os.environ.copy()
        )
        try:
            rc = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = "timeout"
    return rc, round(time.monotonic() - started, 1)


def clone(repo: Path, branch: str, work: Path) -> Path:
    shutil.rmtree(work, ignore_errors=True)
    subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", "clone", "-q", "-b", branch, str(repo), str(work)], check=True
    )
    return work
