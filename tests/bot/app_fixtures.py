"""Fixtures for the App's tests: a runtime on a real SQLite file and queue in tmp_path, the recording forge over
a real bare git repository, and the Flask server on 127.0.0.1 with helpers that send signed deliveries.
"""

from __future__ import annotations

import copy
import json
import subprocess
import threading
import uuid
from pathlib import Path

import pytest
import requests

from bot.app import create_app
from bot.config import AppConfig
from bot.forge.base import Permission
from bot.gitops import GitWorkspace
from bot.jobs import Store
from bot.queue import make_queue
from bot.runtime import Runtime
from bot.server import make_server
from bot.server import shutdown
from bot.webhook import signature
from bot.worker import Worker
from pipelines.autopatch.job import autopatch_pipeline
from tests.bot import small_pipeline
from tests.bot.fakes import RecordingForge

SECRET = "test-webhook-secret"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "webhooks"
MAINTAINER = "Codertocat"  # the sender of the published examples; given write access in the fake
OUTSIDER = "curious-reader"
ISSUE = 1  # the issue number of issue_comment.created.json


def fixture_payload(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def comment_payload(
    body: str, login: str = MAINTAINER, user_type: str = "User", comment_id: int | None = None, issue: int = ISSUE
) -> dict:
    payload = copy.deepcopy(fixture_payload("issue_comment.created"))
    payload["comment"]["body"] = body
    payload["comment"]["id"] = comment_id or uuid.uuid4().int % 10**9
    payload["issue"]["number"] = issue
    for user in (payload["comment"]["user"], payload["sender"]):
        user["login"], user["type"] = login, user_type
    return payload


def app_config(tmp_path: Path, **overrides) -> AppConfig:
    fields = dict(
        webhook_secret=SECRET,
        database_url=f"sqlite:///{tmp_path / 'bot.db'}",
        queue_path=str(tmp_path / "queue.db"),
        work_dir=str(tmp_path / "work"),
        lease_seconds=30.0,
    )
    return AppConfig(**{**fields, **overrides})


@pytest.fixture(scope="session")
def packed_template(liger_template, tmp_path_factory) -> Path:
    """The target template as one pack (as a fetched repository has it), so per-test copies hardlink one file."""
    packed = tmp_path_factory.mktemp("packed") / "liger-kernel.git"
    subprocess.run(["git", "clone", "-q", "--bare", "--no-local", str(liger_template), str(packed)], check=True)
    return packed


@pytest.fixture
def bare_remote(packed_template, tmp_path) -> Path:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(packed_template), str(remote)], check=True)
    return remote


@pytest.fixture
def forge(bare_remote) -> RecordingForge:
    fake = RecordingForge(bare_remote)
    fake.set_permission(MAINTAINER, Permission.WRITE)
    return fake


class App:
    """A runtime, its worker (pipelines replaced at the boundary) and a helper to run what is queued."""

    def __init__(self, runtime: Runtime, forge: RecordingForge):
        self.runtime, self.forge, self.store = runtime, forge, runtime.store
        self.worker = Worker(runtime, name="test-worker")
        self.worker.pipelines["autopatch"] = autopatch_pipeline(small_pipeline.understand, small_pipeline.run_pipeline)
        self.worker.scan_understand = small_pipeline.understand
        runtime.queue.bind(self.worker.handle_delivery, self.worker.advance)

    def drain(self, limit: int = 50) -> int:
        return self.runtime.queue.run_pending(limit)

    def jobs(self):
        return self.store.jobs()


@pytest.fixture
def app(tmp_path, forge) -> App:
    config = app_config(tmp_path)
    runtime = Runtime(config, Store(config.database_url), make_queue(sqlite_path=config.queue_path), lambda _id: forge)
    runtime.workspace = GitWorkspace(config.work_dir)
    warm_mirror(config.work_dir, forge.remote)
    return App(runtime, forge)


def warm_mirror(work_dir: str, remote: Path) -> None:
    """Seed the workspace's mirror with a hardlinked copy of the remote, as a long-running worker has it: the
    worker's fetch then transfers nothing (the cold first fetch is exercised by the worker-process test)."""
    mirror = Path(work_dir) / "mirrors" / "Codertocat__Hello-World.git"
    mirror.parent.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", "--bare", "--local", str(remote), str(mirror)], check=True)


class Server:
    def __init__(self, url: str, path: str):
        self.url, self.path = url, path

    def deliver(
        self, event: str, payload: dict | bytes, delivery_id: str | None = None, secret: str | None = SECRET, **kw
    ):
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        headers = {
            "Content-Type": "application/json",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
        }
        if secret is not None:
            headers["X-Hub-Signature-256"] = signature(secret, body)
        headers.update(kw.pop("headers", {}))
        return requests.post(self.url + self.path, data=body, headers=headers, timeout=30, **kw)


@pytest.fixture
def server(app) -> Server:
    httpd = make_server(create_app(app.runtime), "127.0.0.1", 0, app.runtime.config.server_limits)  # production's
    thread = threading.Thread(target=httpd.run, daemon=True)
    thread.start()
    yield Server(f"http://127.0.0.1:{httpd.effective_port}", app.runtime.config.webhook_path)
    shutdown(httpd)
