"""Conventions every `liger-bot` command shares (issue 15, point 8), through the installed console script."""

from __future__ import annotations

import subprocess
import sys


def test_version_names_the_installed_package(liger_bot_exe):
    done = subprocess.run([liger_bot_exe, "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip().startswith("liger-bot 0.")


def test_help_of_every_command_does_not_import_torch():
    # `--help` answers at once: the pipelines that import torch, transformers or triton load inside the handlers
    probe = (
        "import sys\n"
        "from bot.cli import build_parser\n"
        "build_parser()\n"
        "print(sorted(m for m in ('torch', 'transformers', 'triton') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
