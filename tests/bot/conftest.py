import os
import re
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from tests.bot.app_fixtures import app  # noqa: F401
from tests.bot.app_fixtures import bare_remote  # noqa: F401
from tests.bot.app_fixtures import forge  # noqa: F401
from tests.bot.app_fixtures import packed_template  # noqa: F401
from tests.bot.app_fixtures import server  # noqa: F401
from tests.bot.llm_fixtures import standin  # noqa: F401  (the Messages API stand-in)

STAGE_PYTHON_VARIABLE = "LIGER_BOT_STAGE_PYTHON"  # bot.isolation.STAGE_PYTHON_VARIABLE


@pytest.fixture(scope="session")
def stage_reachable_root():
    """As root, stage children run as `nobody`, who must get through every folder above their files. pytest keeps
    its own temp root at 0700 and puts it back to 0700 whenever a process starts using it (under pytest-xdist:
    any worker, at any time), so these tests keep their folders in a root of their own, 0711 (through, not list)."""
    root = Path(tempfile.mkdtemp(prefix="liger-bot-tests-"))
    os.chmod(root, 0o711)
    yield root
    # removed by a detached `rm`: a worker's root holds every checkout its tests made (GBs; 13 s for 567 MB here),
    # and pytest would wait for it at the end of the last test on that worker
    subprocess.Popen(
        ["rm", "-rf", "--", str(root)], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


@pytest.fixture
def tmp_path(request, tmp_path_factory, stage_reachable_root):
    """pytest's tmp_path, moved under `stage_reachable_root` when stage children run as another user."""
    name = re.sub(r"[^\w.-]", "_", request.node.name)[:30]  # parametrized ids hold "[", "/", spaces
    if os.geteuid() != 0:
        return tmp_path_factory.mktemp(name, numbered=True)
    path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=stage_reachable_root))
    os.chmod(path, 0o711)
    return path


@pytest.fixture(autouse=True, scope="session")
def stage_python(stage_reachable_root):
    """As root, stage children run as `nobody`, who may not reach this interpreter (pyenv under /root, 0700): then
    they run a venv of the system's Python of the same minor version that sees this one's packages."""
    if os.geteuid() != 0 or os.environ.get(STAGE_PYTHON_VARIABLE) or _nobody_can_run(sys.executable):
        yield
        return
    # a checkout in a 0700 folder (`mktemp -d`): nobody must reach this venv's packages and import from the checkout
    # (Python's import lists a sys.path folder, so the checkout's root needs o+rx, not only o+x)
    for folder in Path(sysconfig.get_paths()["purelib"]).parents:
        if str(folder).startswith(tempfile.gettempdir() + os.sep) and folder.stat().st_mode & 0o005 != 0o005:
            os.chmod(folder, folder.stat().st_mode | 0o005)
    venv = stage_reachable_root / "stage-venv"
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
