"""The target repository: a Liger-Kernel git checkout, made from the liger-kernel sdist on PyPI.

`fetch` downloads the sdist once into a cache and keeps a committed template repository there, so tests and
the demo clone it locally instead of downloading again. `open_checkout` is the guard every other command
goes through: it refuses a directory that is not a Liger-Kernel checkout or that has uncommitted changes.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pipelines.git import Git
from pipelines.outcome import PipelineError

DEFAULT_VERSION = "0.8.5"
MONKEY_PATCH = Path("src/liger_kernel/transformers/monkey_patch.py")
_VERSION_RE = re.compile(r"^\d+(\.\d+){1,3}([a-z]+\d+)?(\.dev\d+)?$")


def cache_dir() -> Path:
    root = os.environ.get("LIGER_BOT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "liger-bot"
    )
    return Path(root)


@dataclass(frozen=True)
class Checkout:
    """A validated Liger-Kernel checkout. Paths inside it are derived, never typed twice."""

    root: Path

    @property
    def git(self) -> Git:
        return Git(self.root)

    @property
    def src(self) -> Path:
        return self.root / "src" / "liger_kernel"

    @property
    def monkey_patch(self) -> Path:
        return self.root / MONKEY_PATCH

    def path(self, relative: str | Path) -> Path:
        return self.root / relative

    def beside(self, name: str) -> Path:
        """A pipeline's own output (PR body, tables): next to the checkout, never inside it, so it stays clean."""
        return self.root.parent / f"{self.root.name}.liger-bot" / name

    def output_dir(self, given: str | Path | None, name: str) -> Path:
        """`--out` as given, else `beside(name)`; refused inside the checkout (the next command would find it dirty)."""
        out_dir = Path(given or self.beside(name)).resolve()
        if out_dir.is_relative_to(self.root):
            raise PipelineError(f"--out {out_dir} is inside the target checkout", hint="choose a folder outside it")
        return out_dir


def open_checkout(directory: str | Path, require_clean: bool = True) -> Checkout:
    root = Path(directory).expanduser()
    if not root.is_dir():
        raise PipelineError(f"{root} is not a directory", hint=f"liger-bot target fetch {root}")
    root = root.resolve()
    if not (root / MONKEY_PATCH).is_file():
        raise PipelineError(
            f"{root} is not a Liger-Kernel checkout (no {MONKEY_PATCH})",
            hint=f"make one with: liger-bot target fetch {root.parent / 'liger-kernel'}",
        )
    if not Git(root).is_repo():
        raise PipelineError(f"{root} is not the top of a git repository", hint="run `git init` there and commit")
    dirty = Git(root).dirty_paths()
    if require_clean and dirty:
        shown = ", ".join(dirty[:5]) + (" ..." if len(dirty) > 5 else "")
        raise PipelineError(
            f"{root} has uncommitted changes ({shown}); liger-bot works on a branch from a clean checkout",
            hint="commit or stash them first (git stash -u)",
        )
    return Checkout(root)


def validate_version(version: str) -> str:
    if not _VERSION_RE.match(version):
        raise PipelineError(f"{version!r} is not a liger-kernel version", hint="for example --version 0.8.5")
    return version


def download_sdist(version: str) -> Path:
    """The sdist tarball for `version`, downloaded once into the cache."""
    target = cache_dir() / "sdist"
    found = sorted(target.glob(f"liger_kernel-{version}.tar.gz"))
    if found:
        return found[0]
    target.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "--no-build-isolation"]
    argv += ["-q", "-d", str(target), f"liger-kernel=={version}"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    found = sorted(target.glob(f"liger_kernel-{version}.tar.gz"))
    if proc.returncode != 0 or not found:
        raise PipelineError(
            f"could not download the liger-kernel {version} sdist from PyPI: {proc.stderr.strip()[-400:]}",
            hint="check the version exists (pip index versions liger-kernel) and that PyPI is reachable",
        )
    return found[0]


def template_repository(version: str) -> Path:
    """A committed git repository of the sdist's tree, built once per version and cloned from then on."""
    repo = cache_dir() / "checkouts" / f"liger-kernel-{version}"
    if (repo / ".git").is_dir() and (repo / MONKEY_PATCH).is_file():
        return repo
    repo.parent.mkdir(parents=True, exist_ok=True)
    # two processes at once (two CLI runs, parallel test workers): one builds, the other waits and clones it
    with open(repo.parent / f".liger-kernel-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (repo / ".git").is_dir() and (repo / MONKEY_PATCH).is_file():
            return repo
        return _build_template(repo, version)


def _build_template(repo: Path, version: str) -> Path:
    tarball = download_sdist(version)
    with tempfile.TemporaryDirectory(dir=repo.parent) as tmp:
        with tarfile.open(tarball) as tar:
            tar.extractall(tmp, filter="data")
        (extracted,) = Path(tmp).iterdir()
        git = Git(extracted)
        git.run("init", "-q", "-b", "main")
        git.commit_all(f"liger-kernel {version} (from the PyPI sdist)")
        shutil.rmtree(repo, ignore_errors=True)
        extracted.rename(repo)
    return repo


def fetch(dest: str | Path, version: str = DEFAULT_VERSION) -> Checkout:
    dest = Path(dest).expanduser()
    validate_version(version)
    if dest.exists() and any(dest.iterdir()):
        raise PipelineError(f"{dest} exists and is not empty", hint="choose a new directory")
    source = template_repository(version)
    subprocess.run(["git", "clone", "-q", str(source), str(dest)], check=True, capture_output=True)
    Git(dest).run("remote", "remove", "origin")
    return open_checkout(dest)
