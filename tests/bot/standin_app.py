"""The App wired to the GitHub stand-in: a Flask server on 127.0.0.1, the real `GitHubForge` (App JWT ->
installation token), the smart-HTTP git remote and a worker in the test's process that drains the real SQLite
queue. `seed_target` puts a real Liger-Kernel checkout (plus our workflow templates and, optionally, a repo
config) on the stand-in as TARGET.

Use with `from tests.bot.standin_fixtures import *` (the stand-in, the remote, the App's key and client).
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from bot.app import create_app
from bot.forge.base import RepoRef
from bot.gitops import GitWorkspace
from bot.jobs import Store
from bot.queue import make_queue
from bot.runtime import Runtime
from bot.server import make_server
from bot.server import shutdown
from bot.worker import Worker
from tests.bot.app_fixtures import Server
from tests.bot.app_fixtures import app_config
from tests.bot.app_fixtures import fixture_payload
from tests.bot.standin_fixtures import STANDIN_MAINTAINER
from tests.bot.standin_fixtures import WORKFLOWS
from tests.bot.standin_fixtures import seed_repository

TARGET = RepoRef("linkedin", "liger-kernel-e2e")


class Bot:
    """The App as deployed, minus the processes: server thread, runtime, worker; `drain` runs what is queued."""

    def __init__(self, standin, remote, runtime: Runtime, server: Server):
        self.standin, self.remote, self.runtime, self.server = standin, remote, runtime, server
        self.store = runtime.store
        self.worker = Worker(runtime, name="e2e-worker")
        runtime.queue.bind(self.worker.handle_delivery, self.worker.advance)

    def drain(self, limit: int = 50) -> int:
        return self.runtime.queue.run_pending(limit)

    def say(self, issue: int, body: str, login: str = STANDIN_MAINTAINER) -> dict:
        """A comment made on the stand-in, and its signed `issue_comment.created` payload (the published example's
        shape, pointed at this repository, issue and comment)."""
        comment_id = self.standin.add_comment(TARGET.full_name, issue, body, login)
        payload = copy.deepcopy(fixture_payload("issue_comment.created"))
        payload["repository"]["owner"]["login"], payload["repository"]["name"] = TARGET.owner, TARGET.name
        payload["repository"]["full_name"] = TARGET.full_name
        payload["installation"]["id"] = self.standin.installation_id
        payload["issue"]["number"] = issue
        payload["comment"].update(id=comment_id, body=body)
        for user in (payload["comment"]["user"], payload["sender"]):
            user["login"], user["type"] = login, "User"
        return payload

    def deliver(self, event: str, payload: dict, delivery_id: str | None = None) -> int:
        answer = self.server.deliver(event, payload, delivery_id=delivery_id)
        assert answer.status_code in (200, 202), answer.text
        return answer.status_code

    def comments(self, issue: int, marker: str = "") -> list[dict]:
        return [
            c
            for c in self.standin.comments.values()
            if c["repo"] == TARGET.full_name and c["issue"] == issue
            if marker in (c["body"] or "")
        ]

    def warm_mirror(self) -> None:
        """Seed the worker's mirror with a hardlinked copy of the target, as a long-running worker has it: its
        fetches over HTTP then carry only what changed (the cold first fetch is what test_end_to_end exercises)."""
        mirror = Path(self.runtime.config.work_dir) / "mirrors" / f"{TARGET.owner}__{TARGET.name}.git"
        mirror.parent.mkdir(parents=True, exist_ok=True)
        bare = self.remote.bare_path(TARGET.owner, TARGET.name)
        subprocess.run(["git", "clone", "-q", "--bare", "--local", str(bare), str(mirror)], check=True)

    def _remote_git(self, *argv: str) -> str:
        bare = str(self.remote.bare_path(TARGET.owner, TARGET.name))
        return subprocess.run(["git", "--git-dir", bare, *argv], capture_output=True, text=True).stdout

    def remote_head(self, branch: str) -> str | None:
        return self._remote_git("rev-parse", "-q", "--verify", f"refs/heads/{branch}").strip() or None

    def remote_files(self, branch: str) -> list[str]:
        return self._remote_git("ls-tree", "-r", "--name-only", branch).split()


def seed_target(standin, remote, checkout_root: Path, repo_config: str | None = None) -> None:
    """The target repository: the Liger-Kernel checkout with our workflow templates (and a repo config) on main."""
    workflows = checkout_root / ".github" / "workflows"
    workflows.mkdir(parents=True, exist_ok=True)
    for name in ("liger-bot-verify.yml", "liger-bot-scan.yml"):
        shutil.copy(WORKFLOWS / name, workflows / name)
    if repo_config is not None:
        (checkout_root / ".github" / "liger-bot.yml").write_text(repo_config)
    git = ["git", "-C", str(checkout_root), "-c", "user.name=Maintainer", "-c", "user.email=m@example.com"]
    subprocess.run([*git, "add", "-A", ".github"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "ship the liger-bot workflows"], check=True)
    seed_repository(standin, remote, TARGET.owner, TARGET.name, checkout_root)
    standin.repos[TARGET.full_name].collaborators[STANDIN_MAINTAINER] = "write"


@pytest.fixture(name="bot")
def bot_fixture(github_standin, git_remote, github_app, tmp_path):
    config = app_config(tmp_path, github_api_url=github_standin.url)
    runtime = Runtime(config, Store(config.database_url), make_queue(sqlite_path=config.queue_path), github_app.forge)
    runtime.workspace = GitWorkspace(config.work_dir)
    httpd = make_server(create_app(runtime), "127.0.0.1", 0)  # the production server
    thread = threading.Thread(target=httpd.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{httpd.effective_port}"
    yield Bot(github_standin, git_remote, runtime, Server(url, config.webhook_path))
    shutdown(httpd)
