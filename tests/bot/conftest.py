import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.bot.app_fixtures import app  # noqa: F401
from tests.bot.app_fixtures import bare_remote  # noqa: F401
from tests.bot.app_fixtures import forge  # noqa: F401
from tests.bot.app_fixtures import packed_template  # noqa: F401
from tests.bot.app_fixtures import server  # noqa: F401

STAGE_PYTHON_VARIABLE = "LIGER_BOT_STAGE_PYTHON"  # bot.isolation.STAGE_PYTHON_VARIABLE


@pytest.fixture(autouse=True)
def stage_user_can_reach_tmp(tmp_path_factory, tmp_path):
    """As root, stage children run as `nobody`: pytest's 0700 temp folders must let them through (not list)."""
    if os.geteuid() != 0:
        return
    base = tmp_path_factory.getbasetemp()
    # every pytest folder above it too: under pytest-xdist the base is pytest-of-root/pytest-N/popen-gwK
    above = [p for p in base.parents if p.name.startswith("pytest-")]
    for folder in (*above, base, *(p for p in base.iterdir() if p.is_dir()), tmp_path):
        os.chmod(folder, 0o711)


@pytest.fixture(autouse=True, scope="session")
def stage_python(tmp_path_factory):
    """As root, stage children run as `nobody`, who may not reach this interpreter (pyenv under /root, 0700): then
    they run a venv of the system's Python of the same minor version that sees this one's packages."""
    if os.geteuid() != 0 or os.environ.get(STAGE_PYTHON_VARIABLE) or _nobody_can_run(sys.executable):
        yield
        return
    venv = tmp_path_factory.mktemp("stage-venv")
    base = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    subprocess.run([base, "-m", "venv", "--without-pip", "--clear", str(venv)], check=True)
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "worker-packages.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    for tool in Path(sys.executable).parent.iterdir():  # the worker venv's native tools (ruff), not its scripts
        if not tool.name.startswith("python") and not (venv / "bin" / tool.name).exists() and _native(tool):
            (venv / "bin" / tool.name).symlink_to(tool.resolve())
    subprocess.run(["chmod", "-R", "o+rX", str(venv)], check=True)
    os.environ[STAGE_PYTHON_VARIABLE] = str(venv / "bin" / "python")
    yield
    del os.environ[STAGE_PYTHON_VARIABLE]


def _native(tool: Path) -> bool:
    with tool.open("rb") as handle:
        return handle.read(4) == b"\x7fELF"


def _nobody_can_run(python: str) -> bool:
    try:
        subprocess.run([python, "-c", "0"], user=65534, group=65534, extra_groups=[], check=True, capture_output=True)
    except (PermissionError, subprocess.CalledProcessError):
        return False
    return True
