"""A worker killed mid-job (SIGKILL, a real process) and started again: the job resumes, nothing is lost, nothing
is duplicated. And a job whose workers keep dying is failed with a message instead of looping."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bot.forge.base import Permission
from bot.gitops import GitWorkspace
from bot.jobs import JobState
from bot.jobs import Store
from bot.queue import make_queue
from bot.runtime import Runtime
from tests.bot.app_fixtures import MAINTAINER
from tests.bot.app_fixtures import App
from tests.bot.app_fixtures import app_config
from tests.bot.app_fixtures import comment_payload
from tests.bot.fakes import RecordingForge

ROOT = Path(__file__).resolve().parents[2]


def start_worker(tmp_path: Path, remote: Path, state: Path, block: Path) -> subprocess.Popen:
    env = {**os.environ, "SMALL_PIPELINE_BLOCK_FILE": str(block), "PYTHONPATH": str(ROOT)}
    log = open(tmp_path / "worker.log", "a")
    argv = [sys.executable, "-m", "tests.bot.worker_process", str(tmp_path), str(remote), str(state)]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_for(store: Store, job_id: int, states: set[JobState], proc_log: Path, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = store.get(job_id)
        if job is not None and job.job_state in states:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} never reached {states}; log:\n{proc_log.read_text()[-3000:]}")


def deliver(app: App, body: str) -> None:
    """What the webhook route does for a signed delivery: store it, queue its id."""
    delivery_id = str(uuid.uuid4())
    assert app.store.add_delivery(delivery_id, "issue_comment", "created", json.dumps(comment_payload(body)))
    app.runtime.queue.enqueue_delivery(delivery_id)


@pytest.mark.slow
def test_worker_killed_mid_job_resumes_on_restart(tmp_path, bare_remote):
    state, block = tmp_path / "forge.json", tmp_path / "block"
    forge = RecordingForge(bare_remote, state)
    forge.set_permission(MAINTAINER, Permission.WRITE)
    config = app_config(tmp_path, lease_seconds=1.0)
    runtime = Runtime(config, Store(config.database_url), make_queue(sqlite_path=config.queue_path), lambda _id: forge)
    runtime.workspace = GitWorkspace(config.work_dir)
    app = App(runtime, forge)  # the web side: it only stores and queues
    log = tmp_path / "worker.log"

    first = start_worker(tmp_path, bare_remote, state, block)
    try:
        deliver(app, "/liger autopatch nemotron")
        job = wait_for(app.store, 1, {JobState.AWAITING_APPROVAL}, log)
        block.write_text("hold run_pipeline here")
        deliver(app, "/liger approve")
        job = wait_for(app.store, job.id, {JobState.ACTING}, log)
        time.sleep(0.5)  # inside run_pipeline, holding the lease
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    job = app.store.get(job.id)
    assert job.job_state is JobState.ACTING and job.lease_until > 0  # left mid-stage by the dead worker

    block.unlink()
    second = start_worker(tmp_path, bare_remote, state, block)
    try:
        job = wait_for(app.store, job.id, {JobState.PR_OPENED, JobState.FAILED}, log)
    finally:
        second.send_signal(signal.SIGINT)
        try:
            second.wait(10)
        except subprocess.TimeoutExpired:
            second.kill()
    assert job.job_state is JobState.PR_OPENED, job.message
    assert job.attempts == 1
    statuses = [c for c in forge.comments() if "liger-bot:status" in c["body"]]
    assert len(statuses) == 1  # the restarted worker found and edited the same status comment
    assert len(forge.state["pulls"]) == 1
    branch_head = subprocess.run(
        ["git", "rev-parse", job.branch], cwd=bare_remote, capture_output=True, text=True
    ).stdout.strip()
    assert branch_head == job.pushed_sha


def test_a_job_whose_workers_keep_dying_fails_with_a_message(tmp_path, forge):
    config = app_config(tmp_path, lease_seconds=0.01, max_resumes=2)
    runtime = Runtime(config, Store(config.database_url), make_queue(sqlite_path=config.queue_path), lambda _id: forge)
    app = App(runtime, forge)
    created = app.store.create_job(
        repo="Codertocat/Hello-World",
        installation_id=1,
        thread=1,
        verb="autopatch",
        target="nemotron",
        requested_by=MAINTAINER,
    )
    job_id = created.job.id
    app.store.transition(job_id, JobState.UNDERSTANDING)
    for attempt in range(1, 4):
        assert app.store.claim(job_id, f"doomed-{attempt}", lease_seconds=0.01)  # a worker takes it, then dies
        time.sleep(0.03)
        app.worker.sweep()
        job = app.store.get(job_id)
        assert job.attempts == attempt
        if attempt <= 2:
            assert job.job_state is JobState.UNDERSTANDING and "resuming" in job.message
            assert app.runtime.queue.pending() == 1
            app.runtime.queue.huey.flush()
    assert job.job_state is JobState.FAILED
    assert "the worker stopped 3 times while understanding" in job.message and job.next_command == "/liger retry"
    (status,) = [c for c in forge.comments() if "liger-bot:status" in c["body"]]
    assert "Next: `/liger retry`" in status["body"]
