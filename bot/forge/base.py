"""The one interface every forge implements. Git itself (clone, push) is not here: see `bot/gitops.py`.

Create calls are idempotent by lookup: `ensure_pull_request` finds the PR by its head branch before it
creates one, so a retried job never opens a second PR.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


class Permission(enum.IntEnum):
    """GitHub collaborator permission levels, ordered so that `>= Permission.WRITE` reads naturally."""

    NONE = 0
    READ = 1
    TRIAGE = 2
    WRITE = 3
    MAINTAIN = 4
    ADMIN = 5

    @classmethod
    def parse(cls, text: str | None) -> Permission:
        return cls.__members__.get((text or "none").upper(), cls.NONE)


class ForgeError(RuntimeError):
    """The forge refused or failed a call. The message names the call and the status, never a secret."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class AssetRejected(ForgeError):
    """An asset the bot will not publish (an unsafe name, bytes that are not the image it names, over the size
    limit). Not worth retrying: its status is a 4xx."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message, status=status)


class RateLimited(ForgeError):
    """GitHub asked us to wait longer than a worker should block; run the job again after `retry_at` (epoch s)."""

    def __init__(self, message: str, retry_at: float):
        super().__init__(message, status=429)
        self.retry_at = retry_at


@dataclass(frozen=True)
class RepoRef:
    owner: str
    name: str

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass(frozen=True)
class PullRequest:
    number: int
    head: str
    base: str
    url: str
    draft: bool = True


@dataclass(frozen=True)
class WorkflowRun:
    id: int
    status: str  # queued | in_progress | completed
    conclusion: str | None
    head_branch: str
    # what the run claims about its origin; bot.runners.Dispatch.mismatch checks each against what the App sent
    head_sha: str = ""
    event: str = ""
    actor: str = ""  # login of the run's actor
    triggering_actor: str = ""
    path: str = ""  # .github/workflows/<file>
    head_repository: str = ""  # owner/name the run's commit came from (a fork's name for a fork's run)
    created_at: float = 0.0  # epoch seconds

    @classmethod
    def from_json(cls, run: Mapping) -> WorkflowRun:
        """From GitHub's `workflow-run` object (a webhook's `workflow_run`, or the REST API's)."""

        def login(key: str) -> str:
            return str((run.get(key) or {}).get("login") or "")

        return cls(
            id=int(run["id"]),
            status=str(run.get("status") or ""),
            conclusion=run.get("conclusion"),
            head_branch=str(run.get("head_branch") or ""),
            head_sha=str(run.get("head_sha") or ""),
            event=str(run.get("event") or ""),
            actor=login("actor"),
            triggering_actor=login("triggering_actor"),
            path=str(run.get("path") or "").split("@", 1)[0],
            head_repository=str((run.get("head_repository") or {}).get("full_name") or ""),
            created_at=_epoch(run.get("created_at")),
        )


def _epoch(stamp) -> float:
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


class Forge(Protocol):
    def permission(self, repo: RepoRef, username: str) -> Permission: ...

    def add_reaction(self, repo: RepoRef, comment_id: int, content: str, review_comment: bool = False) -> None:
        """React to an issue comment, or to a PR review comment when `review_comment`."""
        ...

    def create_comment(self, repo: RepoRef, issue_number: int, body: str) -> int:
        """A body holding a hidden marker (`<!-- liger-bot:... -->`) is created once: an existing comment with the
        same marker is returned instead."""
        ...

    def find_comment(self, repo: RepoRef, issue_number: int, marker: str) -> int | None: ...

    def edit_comment(self, repo: RepoRef, comment_id: int, body: str) -> None: ...

    def default_branch(self, repo: RepoRef) -> str: ...

    def read_file(self, repo: RepoRef, path: str, ref: str) -> str | None: ...

    def branch_head(self, repo: RepoRef, branch: str) -> str | None: ...

    def find_pull_request(self, repo: RepoRef, head_branch: str) -> PullRequest | None: ...

    def ensure_pull_request(self, repo: RepoRef, head_branch: str, base: str, title: str, body: str) -> PullRequest: ...

    def add_labels(self, repo: RepoRef, number: int, labels: list[str]) -> None:
        """Labels added to issue or PR `number` (GitHub makes a label that does not exist yet); none removed."""
        ...

    def create_issue(self, repo: RepoRef, title: str, body: str) -> int: ...

    def edit_issue(self, repo: RepoRef, number: int, body: str) -> None: ...

    def find_issue(self, repo: RepoRef, title: str) -> int | None: ...

    def dispatch_workflow(self, repo: RepoRef, workflow: str, ref: str, inputs: dict[str, str]) -> int | None:
        """Dispatch `workflow` on `ref`; the new run's id where GitHub says it (None: learn it from the run)."""
        ...

    def workflow_runs(self, repo: RepoRef, workflow: str, branch: str) -> list[WorkflowRun]:
        """Recent dispatched runs of `workflow` on `branch`, newest first."""
        ...

    def actor_login(self, repo: RepoRef) -> str:
        """The login GitHub names as the actor of what this forge does in `repo` (the App's `<slug>[bot]`)."""
        ...

    def download_artifact(self, repo: RepoRef, run_id: int, name: str) -> bytes | None: ...

    def clone_url(self, repo: RepoRef) -> str: ...

    def push_credentials(self, repo: RepoRef) -> tuple[str, str] | None:
        """(username, password) for pushing over HTTPS to `clone_url`, or None where none are needed."""
        ...

    def open_pull_requests(self, repo: RepoRef, head_prefix: str) -> list[PullRequest]:
        """Open PRs whose head branch (in `repo` itself) starts with `head_prefix`, e.g. "liger-bot/"."""
        ...

    def publish_asset(self, repo: RepoRef, name: str, data: bytes) -> str:
        """Store `data` (a plot) where a PR body of `repo` can show it; returns the link to embed. The stored name
        is content-addressed (`bot.forge.assets`), so the same bytes are stored once and an old link never changes.
        Raises AssetRejected for a bad name, bytes that are not that image, or an oversized file."""
        ...


def pr_labels(verb: str) -> list[str]:
    """What every PR of the bot is labelled with: the bot, and the pipeline that made it (a maintainer's filter)."""
    return ["liger-bot", f"liger-bot:{verb}"]
