"""The `local` forge: GitHub's objects as files in a folder beside the target checkout (Renovate's local platform).

For the CLI and the demo, with no network and no account. `<checkout>.liger-bot/` holds

    issues/<n>.json + issues/<n>.md       issues and PRs share numbers, as on GitHub; a PR's title and body
                                          are written out as markdown beside its JSON record
    comments/<id>.json + comments/<id>.md
    reactions.jsonl                       one reaction per line
    assets/<sha256 prefix>-<name>         published plots; a PR's markdown links them as `../assets/<file>`

Branches are the checkout's own branches: `branch_head` and `read_file` read git, and `clone_url` is the
checkout, so a push is a no-op. The local user is the admin of their own checkout.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
from contextlib import contextmanager
from pathlib import Path

from bot.forge import assets
from bot.forge.base import ForgeError
from bot.forge.base import Permission
from bot.forge.base import PullRequest
from bot.forge.base import RepoRef
from bot.forge.base import WorkflowRun

MARKER_RE = re.compile(r"<!-- liger-bot:[^>]*? -->")


def state_dir_for(checkout: Path) -> Path:
    checkout = Path(checkout).resolve()
    return checkout.parent / f"{checkout.name}.liger-bot"


class LocalForge:
    def __init__(self, checkout: Path, state_dir: Path | None = None, default_branch: str | None = None):
        self.checkout = Path(checkout).resolve()
        self.root = Path(state_dir) if state_dir else state_dir_for(self.checkout)
        for folder in ("issues", "comments"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        self._default_branch = default_branch

    # -- storage ----------------------------------------------------------------------------------------------------

    @contextmanager
    def _locked(self):
        with open(self.root / ".lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def _next_id(self, counter: str) -> int:
        path = self.root / f".{counter}"
        value = int(path.read_text()) + 1 if path.exists() else 1
        _write(path, str(value))
        return value

    def _records(self, folder: str) -> list[dict]:
        return [
            json.loads(p.read_text()) for p in sorted((self.root / folder).glob("*.json"), key=lambda p: int(p.stem))
        ]

    def _save(self, folder: str, record: dict, markdown: str) -> None:
        _write(self.root / folder / f"{record['id']}.json", json.dumps(record, indent=2) + "\n")
        _write(self.root / folder / f"{record['id']}.md", markdown)

    def _load(self, folder: str, record_id: int) -> dict:
        path = self.root / folder / f"{int(record_id)}.json"
        if not path.exists():
            raise ForgeError(f"no {folder[:-1]} {record_id} in {self.root}", status=404)
        return json.loads(path.read_text())

    def _git(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=self.checkout, capture_output=True, text=True)

    # -- Forge ----------------------------------------------------------------------------------------------------

    def permission(self, repo: RepoRef, username: str) -> Permission:
        return Permission.ADMIN

    def add_reaction(self, repo: RepoRef, comment_id: int, content: str, review_comment: bool = False) -> None:
        line = json.dumps({"comment": comment_id, "content": content, "review_comment": review_comment})
        with self._locked(), open(self.root / "reactions.jsonl", "a") as handle:
            handle.write(line + "\n")

    def create_comment(self, repo: RepoRef, issue_number: int, body: str) -> int:
        with self._locked():
            marker = MARKER_RE.search(body)
            existing = self.find_comment(repo, issue_number, marker.group(0)) if marker else None
            if existing is not None:
                return existing
            record = {"id": self._next_id("comment"), "issue": issue_number, "body": body}
            self._save("comments", record, body + "\n")
            return record["id"]

    def find_comment(self, repo: RepoRef, issue_number: int, marker: str) -> int | None:
        found = [c["id"] for c in self._records("comments") if c["issue"] == issue_number and marker in c["body"]]
        return found[0] if found else None

    def edit_comment(self, repo: RepoRef, comment_id: int, body: str) -> None:
        with self._locked():
            record = {**self._load("comments", comment_id), "body": body}
            self._save("comments", record, body + "\n")

    def default_branch(self, repo: RepoRef) -> str:
        if self._default_branch:
            return self._default_branch
        for name in ("main", "master"):
            if self._git("rev-parse", "--verify", "-q", f"refs/heads/{name}").returncode == 0:
                return name
        return self._git("rev-parse", "--abbrev-ref", "HEAD").stdout.strip()

    def read_file(self, repo: RepoRef, path: str, ref: str) -> str | None:
        proc = self._git("show", f"{ref}:{path}")
        return proc.stdout if proc.returncode == 0 else None

    def branch_head(self, repo: RepoRef, branch: str) -> str | None:
        proc = self._git("rev-parse", "--verify", "-q", f"refs/heads/{branch}")
        return proc.stdout.strip() if proc.returncode == 0 else None

    def find_pull_request(self, repo: RepoRef, head_branch: str) -> PullRequest | None:
        for record in self._records("issues"):
            if record.get("head") == head_branch and record["state"] == "open":
                return self._pull(record)
        return None

    def open_pull_requests(self, repo: RepoRef, head_prefix: str) -> list[PullRequest]:
        records = self._records("issues")
        return [self._pull(r) for r in records if r.get("head", "").startswith(head_prefix) and r["state"] == "open"]

    def ensure_pull_request(self, repo: RepoRef, head_branch: str, base: str, title: str, body: str) -> PullRequest:
        with self._locked():
            found = self.find_pull_request(repo, head_branch)
            record = self._load("issues", found.number) if found else {"id": self._next_id("issue"), "state": "open"}
            record.update(title=title, body=body, head=head_branch, base=base, draft=True)
            self._save("issues", record, _pull_markdown(record))
            return self._pull(record)

    def add_labels(self, repo: RepoRef, number: int, labels: list[str]) -> None:
        with self._locked():
            record = self._load("issues", number)
            record["labels"] = sorted(set(record.get("labels", [])) | set(labels))
            markdown = _pull_markdown(record) if "head" in record else f"# {record['title']}\n\n{record['body']}\n"
            self._save("issues", record, markdown)

    def create_issue(self, repo: RepoRef, title: str, body: str) -> int:
        with self._locked():
            record = {"id": self._next_id("issue"), "state": "open", "title": title, "body": body}
            self._save("issues", record, f"# {title}\n\n{body}\n")
            return record["id"]

    def edit_issue(self, repo: RepoRef, number: int, body: str) -> None:
        with self._locked():
            record = {**self._load("issues", number), "body": body}
            self._save("issues", record, f"# {record['title']}\n\n{body}\n")

    def find_issue(self, repo: RepoRef, title: str) -> int | None:
        found = [
            r["id"] for r in self._records("issues") if "head" not in r and r["title"] == title and r["state"] == "open"
        ]
        return found[0] if found else None

    def dispatch_workflow(self, repo: RepoRef, workflow: str, ref: str, inputs: dict[str, str]) -> int | None:
        raise ForgeError("the local forge runs no workflows: use the local runner (runner: local)")

    def workflow_runs(self, repo: RepoRef, workflow: str, branch: str) -> list[WorkflowRun]:
        return []  # the local forge runs no workflows: its runner is always `local`

    def actor_login(self, repo: RepoRef) -> str:
        return "liger-bot[bot]"

    def download_artifact(self, repo: RepoRef, run_id: int, name: str) -> bytes | None:
        return None

    def clone_url(self, repo: RepoRef) -> str:
        return str(self.checkout)

    def push_credentials(self, repo: RepoRef) -> None:
        return None

    def publish_asset(self, repo: RepoRef, name: str, data: bytes) -> str:
        """Copied into `assets/`; the link is relative to the PR's markdown file (issues/<n>.md) that shows it."""
        stored = assets.stored_name(name, data)
        path = self.root / "assets" / stored
        with self._locked():
            if not path.exists():  # content-addressed: the same bytes are there already
                path.parent.mkdir(exist_ok=True)
                _write(path, data)
        return f"../assets/{stored}"

    def _pull(self, record: dict) -> PullRequest:
        path = self.root / "issues" / f"{record['id']}.md"
        return PullRequest(record["id"], record["head"], record["base"], path.as_uri(), record["draft"])


def _pull_markdown(record: dict) -> str:
    labels = "".join(f" `{label}`" for label in record.get("labels", []))
    head = f"`{record['head']}` -> `{record['base']}` (draft)" + (f", labels:{labels}" if labels else "")
    return f"# {record['title']}\n\n{head}\n\n{record['body']}\n"


def _write(path: Path, content: str | bytes) -> None:
    """Whole or not at all: a reader never sees half a record."""
    temporary = path.with_name(f".{path.name}.tmp")
    if isinstance(content, bytes):
        temporary.write_bytes(content)
    else:
        temporary.write_text(content)
    os.replace(temporary, path)
