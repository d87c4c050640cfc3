"""Git operations on a local checkout, kept apart from any forge API (they fail and are tested differently)."""

from __future__ import annotations

import subprocess
from pathlib import Path

BOT_IDENTITY = ("liger-bot", "liger-bot@users.noreply.github.com")


class GitError(RuntimeError):
    pass


class Git:
    def __init__(self, root: Path):
        self.root = Path(root)

    def run(self, *args: str, check: bool = True) -> str:
        name, email = BOT_IDENTITY
        argv = ["git", "-c", f"user.name={name}", "-c", f"user.email={email}", "-c", "commit.gpgsign=false"]
        argv += ["-c", "core.hooksPath=/dev/null", *args]  # a hook the target's code planted never runs
        proc = subprocess.run(argv, cwd=self.root, capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise GitError(f"git {' '.join(args)} failed in {self.root}: {proc.stderr.strip()}")
        return proc.stdout

    def is_repo(self) -> bool:
        proc = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=self.root, capture_output=True, text=True)
        return proc.returncode == 0 and Path(proc.stdout.strip()).resolve() == self.root.resolve()

    def dirty_paths(self) -> list[str]:
        return [line[3:] for line in self.run("status", "--porcelain", "--untracked-files=all").splitlines()]

    def head(self) -> str:
        return self.run("rev-parse", "HEAD").strip()

    def current_branch(self) -> str:
        return self.run("rev-parse", "--abbrev-ref", "HEAD").strip()

    def branch_exists(self, name: str) -> bool:
        return bool(self.run("branch", "--list", name).strip())

    def checkout(self, name: str, create_from: str | None = None) -> None:
        if create_from is None:
            self.run("checkout", "-q", name)
        else:
            self.run("checkout", "-q", "-B", name, create_from)

    def commit_all(self, message: str) -> str:
        self.run("add", "-A")
        self.run("commit", "-q", "-m", message)
        return self.head()

    def discard_changes(self) -> None:
        """Back to HEAD exactly: tracked edits reverted, new files removed."""
        self.run("reset", "-q", "--hard")
        self.run("clean", "-q", "-fd")

    def changed_files(self, base: str, head: str = "HEAD") -> list[str]:
        return self.run("diff", "--name-only", base, head).split()
