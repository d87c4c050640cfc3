"""How every `liger-bot` command that writes a branch ends (issue 15, points 4 and 8): the user's branch checked out
again and clean, the bot's branch kept with its commit, and its draft PR recorded by the local forge beside the
checkout (`<checkout>.liger-bot/issues/N.md`): the same `ensure_pull_request` the App calls on GitHub, so the embedded
default goes through the seam the App uses (Renovate's `local` platform)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bot.forge.base import PullRequest
from bot.forge.base import RepoRef
from bot.forge.base import pr_labels
from bot.forge.local import LocalForge
from pipelines.target import open_checkout


@dataclass
class Start:
    root: Path  # the checkout's resolved root
    branch: str  # the branch the user had checked out


@contextmanager
def back_on_users_branch(repo) -> Iterator[Start]:
    """Whatever the run does or raises (a refusal, a failed gate, Ctrl-C), the user's branch is checked out after it;
    what the run left uncommitted on the bot's branch is discarded (the tree was clean when it started)."""
    checkout = open_checkout(repo, require_clean=False)
    git = checkout.git
    start = Start(checkout.root, git.current_branch())
    try:
        yield start
    finally:
        if git.current_branch() != start.branch:
            git.discard_changes()
            git.checkout(start.branch)


def record_pull_request(start: Start, verb: str, branch: str, title: str, body: str) -> PullRequest:
    """The draft PR of `branch` into the user's branch, found by its branch on a second run (updated, not doubled),
    labelled as the App labels it."""
    forge, repo = LocalForge(start.root), RepoRef("local", start.root.name)
    pr = forge.ensure_pull_request(repo, branch, start.branch, title, body)
    forge.add_labels(repo, pr.number, pr_labels(verb))
    return pr


def announce(ui, pr: PullRequest) -> None:
    ui.progress(f"draft PR #{pr.number} recorded by the local forge: {pr.url}")
