"""Run a subprocess for a pipeline stage: argv lists only (never a shell), bounded in time, output captured.

The commands run the target repository's code (its tests, its model files), so they get an environment built from
an allow-list, never the caller's whole environment: the App's key, secrets and tokens stay out of reach.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# What a child needs to find its tools, caches and devices; nothing that could hold a credential.
ALLOWED_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TERM",
        "PYTHONPATH",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONHASHSEED",
        "VIRTUAL_ENV",
        "LD_LIBRARY_PATH",
        "LIGER_BOT_CACHE",
        "XDG_CACHE_HOME",
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_HUB_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "TORCH_HOME",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
    }
)
ALLOWED_PREFIXES = ("LC_", "TRITON_", "CUDA_", "TORCHINDUCTOR_", "NVIDIA_", "HIP_", "ROCR_")
# A name under an allowed prefix that still says it holds a credential stays out.
DENIED_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PRIVATE", "CREDENTIAL", "KEY")


def allowed(name: str) -> bool:
    if any(word in name.upper() for word in DENIED_WORDS):
        return False
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def allowed_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of `environ` (default: this process's environment)."""
    source = os.environ if environ is None else environ
    return {name: value for name, value in source.items() if allowed(name)}


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


def run_command(
    argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 900, stdin: str | None = None
) -> CommandResult:
    """`env` adds to (or overrides) the allow-listed environment: the caller names what the command needs."""
    merged = {**allowed_env(), **(env or {})}
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=merged,
            input=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return CommandResult(tuple(argv), -9, out + f"\n[timed out after {timeout:.0f}s]")
    return CommandResult(tuple(argv), proc.returncode, proc.stdout)
