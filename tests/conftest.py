"""Shared fixtures. The Liger-Kernel target comes from the real PyPI sdist, fetched once per cache."""

from __future__ import annotations

import collections

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


def pytest_collection_modifyitems(config, items):
    """Files by their count of slow tests, most first (stable: a file's own order is kept). Under xdist's loadfile
    with --no-loadscope-reorder (pyproject) a worker takes the next file when it is free, so the long files start
    early; xdist's own reorder (most tests first) left the two end-to-end tests, one file, to close the run alone."""
    slow = collections.Counter(item.path for item in items if item.get_closest_marker("slow"))
    first: dict = {}
    for index, item in enumerate(items):
        first.setdefault(item.path, index)
    items.sort(key=lambda item: (-slow[item.path], first[item.path]))
