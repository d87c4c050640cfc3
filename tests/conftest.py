"""Shared fixtures. The Liger-Kernel target comes from the real PyPI sdist, fetched once per cache."""

from __future__ import annotations

import pytest

from pipelines import target


@pytest.fixture(scope="session")
def liger_template():
    """The committed template repository of liger-kernel 0.8.5 (downloaded once, then cached)."""
    return target.template_repository(target.DEFAULT_VERSION)


@pytest.fixture
def liger_checkout(tmp_path, liger_template):
    """A fresh, clean Liger-Kernel checkout for one test."""
    return target.fetch(tmp_path / "liger-kernel")


@pytest.fixture(scope="session")
def liger_bot_exe():
    """The installed console script, found beside the running interpreter (CI does not activate the venv)."""
    import shutil
    import sys
    from pathlib import Path

    beside = Path(sys.executable).parent / "liger-bot"
    return str(beside) if beside.exists() else shutil.which("liger-bot")
