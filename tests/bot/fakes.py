"""The one shared recording fake: an in-memory forge that implements `bot.forge.base.Forge`.

It keeps what GitHub would keep (comments, reactions, issues, PRs by head branch, permissions) and records every
call in `calls`, so tests assert on what the bot did ("one status comment, edited five times"), not on how.
Git is real: `clone_url` is a bare repository on disk and the PR's branch head is read from it with git.

With `state_path`, its state lives in a JSON file (re-read before and written after every call), so a worker in
a subprocess, killed and started again, sees the comments and PRs it made before: nothing is lost in the fake
that GitHub would have kept.
"""

from __future__ import annotations

import fcntl
import json
import subprocess
from contextlib import contextmanager
from pathlib import Path

from bot.forge.base import ForgeError
from bot.forge.base import Permission
from bot.forge.base import PullRequest
from bot.forge.base import RepoRef
from bot.forge.base import WorkflowRun


def _empty_state() -> dict:
    return {
        "comments": {},
        "reactions": [],
        "issues": {},
        "pulls": {},
        "files": {},
        "permissions": {},
        "runs": {},
        "next_id": 1000,
        "calls": [],
    }


class RecordingForge:
    def __init__(self, remote: Path | None = None, state_path: Path | None = None, default_branch: str = "main"):
        self.remote = Path(remote) if remote else None  # a bare git repository standing for the repo
        self.state_path = Path(state_path) if state_path else None
        self._default_branch = default_branch
        self.fail_next: list[ForgeError] = []  # raised, in order, by the next calls (GitHub having a bad minute)
        self._state = _empty_state()
        if self.state_path and not self.state_path.exists():
            self.state_path.write_text(json.dumps(self._state))

    # --- state -------------------------------------------------------------------------------------------

    @contextmanager
    def _call(self, name: str, **args):
        if self.state_path is None:
            self._state["calls"].append([name, args])
            self._fail_if_asked()
            yield self._state
            return
        lock = self.state_path.with_suffix(".lock")
        with open(lock, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            state = json.loads(self.state_path.read_text())
            state["calls"].append([name, args])
            try:
                self._fail_if_asked()
                yield state
            finally:
                self.state_path.write_text(json.dumps(state))

    def _fail_if_asked(self) -> None:
        if self.fail_next:
            raise self.fail_next.pop(0)

    @property
    def state(self) -> dict:
        return json.loads(self.state_path.read_text()) if self.state_path else self._state

    @property
    def calls(self) -> list[tuple[str, dict]]:
        return [(name, args) for name, args in self.state["calls"]]

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def comments(self, issue_number: int | None = None) -> list[dict]:
        found = list(self.state["comments"].values())
        return [c for c in found if issue_number is None or c["issue"] == issue_number]

    def set_permission(self, login: str, permission: Permission) -> None:
        with self._call("(test) set_permission", login=login) as state:
            state["permissions"][login.lower()] = permission.name

    def set_file(self, path: str, text: str) -> None:
        with self._call("(test) set_file", path=path) as state:
            state["files"][path] = text

    @staticmethod
    def _new_id(state: dict) -> int:
        state["next_id"] += 1
        return state["next_id"]

    # --- the Forge protocol ------------------------------------------------------------------------------

    def permission(self, repo: RepoRef, username: str) -> Permission:
        with self._call("permission", username=username) as state:
            return Permission.parse(state["permissions"].get(username.lower(), "read"))

    def add_reaction(self, repo: RepoRef, comment_id: int, content: str, review_comment: bool = False) -> None:
        with self._call("add_reaction", comment_id=comment_id, content=content) as state:
            entry = [comment_id, content, review_comment]
            if entry not in state["reactions"]:
                state["reactions"].append(entry)

    def create_comment(self, repo: RepoRef, issue_number: int, body: str) -> int:
        with self._call("create_comment", issue_number=issue_number) as state:
            comment_id = self._new_id(state)
            state["comments"][str(comment_id)] = {"id": comment_id, "issue": issue_number, "body": body, "edits": 0}
            return comment_id

    def find_comment(self, repo: RepoRef, issue_number: int, marker: str) -> int | None:
        with self._call("find_comment", issue_number=issue_number, marker=marker) as state:
            for comment in state["comments"].values():
                if comment["issue"] == issue_number and marker in comment["body"]:
                    return comment["id"]
            return None

    def edit_comment(self, repo: RepoRef, comment_id: int, body: str) -> None:
        with self._call("edit_comment", comment_id=comment_id) as state:
            comment = state["comments"][str(comment_id)]
            comment["body"] = body
            comment["edits"] += 1

    def default_branch(self, repo: RepoRef) -> str:
        with self._call("default_branch"):
            return self._default_branch

    def read_file(self, repo: RepoRef, path: str, ref: str) -> str | None:
        with self._call("read_file", path=path, ref=ref) as state:
            return state["files"].get(path) if ref == self._default_branch else None

    def branch_head(self, repo: RepoRef, branch: str) -> str | None:
        with self._call("branch_head", branch=branch):
            if self.remote is None:
                return None
            proc = subprocess.run(
                ["git", "rev-parse", "--verify", "-q", f"refs/heads/{branch}"],
                cwd=self.remote,
                capture_output=True,
                text=True,
            )
            return proc.stdout.strip() or None

    def find_pull_request(self, repo: RepoRef, head_branch: str) -> PullRequest | None:
        with self._call("find_pull_request", head_branch=head_branch) as state:
            pull = state["pulls"].get(head_branch)
            return _pull(pull) if pull and pull["state"] == "open" else None

    def ensure_pull_request(self, repo: RepoRef, head_branch: str, base: str, title: str, body: str) -> PullRequest:
        with self._call("ensure_pull_request", head_branch=head_branch, base=base, title=title) as state:
            pull = state["pulls"].get(head_branch)
            if pull and pull["state"] == "open":
                pull.update(title=title, body=body, updates=pull["updates"] + 1)
                return _pull(pull)
            number = self._new_id(state)
            pull = {
                "number": number,
                "head": head_branch,
                "base": base,
                "title": title,
                "body": body,
                "state": "open",
                "updates": 0,
            }
            state["pulls"][head_branch] = pull
            return _pull(pull)

    def add_labels(self, repo: RepoRef, number: int, labels: list[str]) -> None:
        with self._call("add_labels", number=number, labels=list(labels)) as state:
            pull = next(p for p in state["pulls"].values() if p["number"] == number)
            pull["labels"] = list(dict.fromkeys([*pull.get("labels", []), *labels]))

    def open_pull_requests(self, repo: RepoRef, head_prefix: str) -> list[PullRequest]:
        with self._call("open_pull_requests", head_prefix=head_prefix) as state:
            return [
                _pull(p) for p in state["pulls"].values() if p["state"] == "open" and p["head"].startswith(head_prefix)
            ]

    def create_issue(self, repo: RepoRef, title: str, body: str) -> int:
        with self._call("create_issue", title=title) as state:
            number = self._new_id(state)
            state["issues"][str(number)] = {"number": number, "title": title, "body": body}
            return number

    def edit_issue(self, repo: RepoRef, number: int, body: str) -> None:
        with self._call("edit_issue", number=number) as state:
            state["issues"][str(number)]["body"] = body

    def find_issue(self, repo: RepoRef, title: str) -> int | None:
        with self._call("find_issue", title=title) as state:
            return next((i["number"] for i in state["issues"].values() if i["title"] == title), None)

    def dispatch_workflow(self, repo: RepoRef, workflow: str, ref: str, inputs: dict[str, str]) -> int | None:
        with self._call("dispatch_workflow", workflow=workflow, ref=ref, inputs=inputs) as state:
            run_id = self._new_id(state)
            state["runs"][str(run_id)] = {"id": run_id, "workflow": workflow, "branch": ref, "status": "queued"}
            return run_id

    def set_run_status(self, run_id: int, status: str, conclusion: str | None = None) -> None:
        with self._call("(test) set_run_status", run_id=run_id) as state:
            state["runs"][str(run_id)].update(status=status, conclusion=conclusion)

    def workflow_runs(self, repo: RepoRef, workflow: str, branch: str) -> list[WorkflowRun]:
        with self._call("workflow_runs", workflow=workflow, branch=branch) as state:
            runs = [r for r in state["runs"].values() if r["workflow"] == workflow and r["branch"] == branch]
            return [
                WorkflowRun(run["id"], run["status"], run.get("conclusion"), run["branch"])
                for run in sorted(runs, key=lambda r: -r["id"])
            ]

    def actor_login(self, repo: RepoRef) -> str:
        return "liger-bot[bot]"

    def download_artifact(self, repo: RepoRef, run_id: int, name: str) -> bytes | None:
        with self._call("download_artifact", run_id=run_id, name=name):
            return None

    def clone_url(self, repo: RepoRef) -> str:
        with self._call("clone_url"):
            return str(self.remote)

    def push_credentials(self, repo: RepoRef) -> tuple[str, str] | None:
        with self._call("push_credentials"):
            return None


def _pull(data: dict) -> PullRequest:
    return PullRequest(data["number"], data["head"], data["base"], f"https://github.test/pull/{data['number']}", True)
