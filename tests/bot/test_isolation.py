"""Pipeline stages run in a child process with an allow-listed environment: the target's code (a fuse model file,
its tests) sees neither the App's private key nor where it is kept, and its progress still reaches the job."""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import subprocess
import sys
import time

import pytest

from bot.forge import redact
from bot.isolation import StageCrashed
from bot.isolation import isolated
from bot.jobs import JobState
from pipelines.contract import Request
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError
from pipelines.subprocesses import allowed_env
from pipelines.subprocesses import run_command
from pipelines.target import Checkout
from tests.bot.app_fixtures import comment_payload
from tests.bot.stage_probe import PROBE

KEY = "-----BEGIN RSA PRIVATE KEY-----\nnot-a-real-key\n-----END RSA PRIVATE KEY-----\n"
APP_VARIABLES = ("PRIVATE_KEY", "PRIVATE_KEY_PATH", "WEBHOOK_SECRET", "DATABASE_URL", "APP_ID", "GITHUB_TOKEN")

# What a hostile model file does at import: print what it can see of the App's secrets (its environment, the
# worker's /proc/<pid>/environ, the key file) into the error the stage reports, which reaches the status comment.
PROBE_MODEL = """
import json
import os


def attempt(path):
    try:
        with open(path, "rb") as handle:
            return "READ " + handle.read(300).decode(errors="replace")
    except OSError as error:
        return error.__class__.__name__


seen = {
    "uid": os.getuid(),
    "environ": sorted(os.environ),
    "worker_environ": attempt(f"/proc/{os.getppid()}/environ"),
    "key_file": attempt(KEY_PATH),
    "database": attempt(DATABASE),
    "queue": attempt(QUEUE),
}
raise RuntimeError("PROBE " + json.dumps(seen) + " END")
"""


@pytest.fixture
def app_secrets(monkeypatch, tmp_path):
    """The worker's environment as the App runs it: its key inline and on disk, its secret and a token."""
    key_file = tmp_path / "app.private-key.pem"
    key_file.write_text(KEY)
    values = {"PRIVATE_KEY": KEY, "PRIVATE_KEY_PATH": str(key_file), "WEBHOOK_SECRET": "s3cret"}
    values |= {"DATABASE_URL": "postgres://bot:pw@db/bot", "APP_ID": "12345", "GITHUB_TOKEN": "ghs_installation"}
    values |= {"TRITON_INTERPRET": "1", "TRITON_SECRET_TOKEN": "no"}  # a token under an allowed prefix stays out
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def push_file(remote, tmp_path, path: str, text: str) -> None:
    clone = tmp_path / "pusher"
    subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True)
    (clone / path).parent.mkdir(parents=True, exist_ok=True)
    (clone / path).write_text(text)
    subprocess.run(["git", "add", "-A"], cwd=clone, check=True)
    subprocess.run(["git", "commit", "-qm", f"add {path}"], cwd=clone, check=True)
    subprocess.run(["git", "push", "-q", "origin", "HEAD:main"], cwd=clone, check=True)


def test_probe_a_model_file_finds_nothing_to_steal_and_its_report_nothing_to_redact(server, app, app_secrets, tmp_path):
    key_file = tmp_path / "app.private-key.pem"
    key_file.chmod(0o400)
    config = app.runtime.config
    probe = PROBE_MODEL.replace("KEY_PATH", repr(str(key_file))).replace("QUEUE", repr(config.queue_path))
    probe = probe.replace("DATABASE", repr(config.database_url.removeprefix("sqlite:///")))
    push_file(app.forge.remote, tmp_path, "examples/probe.py", probe)
    answer = server.deliver("issue_comment", comment_payload("/liger fuse examples/probe.py:make_model"))
    assert answer.status_code in (200, 202), answer.text
    app.drain()

    (job,) = app.jobs()
    assert job.verb == "fuse" and job.job_state is JobState.FAILED  # the probe raised, at import, in the child
    (status,) = [c["body"] for c in app.forge.comments() if "liger-bot:status" in c["body"]]
    assert "PROBE " in status, status
    seen = json.loads(status.split("PROBE ", 1)[1].split(" END", 1)[0])
    print("the stage child's view:", json.dumps(seen, indent=1))  # the figure of the closing note
    assert not set(APP_VARIABLES) & set(seen["environ"]) and "TRITON_SECRET_TOKEN" not in seen["environ"]
    assert "PATH" in seen["environ"] and "TRITON_INTERPRET" in seen["environ"]
    assert redact.redact(status) == status  # nothing in the comment that the redactor would have had to remove
    assert KEY.splitlines()[1] not in status and "s3cret" not in status
    if os.geteuid() == 0:  # the worker is root: the child ran as `nobody` and could read neither
        assert seen["uid"] == pwd.getpwnam("nobody").pw_uid
        assert seen["worker_environ"] == "PermissionError" and seen["key_file"] == "PermissionError"
        assert seen["database"] == "PermissionError" and seen["queue"] == "PermissionError"
    assert os.environ["PRIVATE_KEY"] == KEY  # the worker itself still holds it


@pytest.fixture
def request_here(tmp_path) -> Request:
    return Request(Checkout(tmp_path.resolve()), "probe", ("rope=standard",), {"name": "x"}, tmp_path / "out")


def test_act_verify_runs_in_a_child_and_forwards_progress_and_gates(request_here, app_secrets):
    events = []
    outcome = isolated(PROBE, "tests.bot.stage_probe:PROBE").act_verify(request_here, events.append)
    assert events == [
        "act: line one\nline two",
        GateResult("probe gate", GateStatus.SKIP, "needs GPU runner", hard=False),
    ]
    assert outcome.gates == [events[1]] and outcome.files == ["a.py"] and outcome.verify_target == "probe"
    assert outcome.profile["pid"] != os.getpid() and outcome.profile["cwd"] == str(request_here.checkout.root)
    assert not set(APP_VARIABLES) & set(outcome.profile["environ"])


def test_understand_in_a_child(request_here):
    understood = isolated(PROBE, "tests.bot.stage_probe:PROBE").understand(request_here)
    assert understood.branch == "liger-bot/probe" and understood.needs_review == ("rope",)
    assert understood.profile["pid"] != os.getpid()


def test_a_refusal_and_a_crash_in_the_child_reach_the_worker(request_here):
    adapter = isolated(PROBE, "tests.bot.stage_probe:PROBE")
    with pytest.raises(PipelineError) as refused:
        adapter.act_verify(dataclasses.replace(request_here, target="refuse"), lambda _e: None)
    assert (refused.value.message, refused.value.hint) == ("the probe refuses this", "ask for something else")
    with pytest.raises(StageCrashed, match="ValueError: the probe broke"):
        adapter.act_verify(dataclasses.replace(request_here, target="crash"), lambda _e: None)


def test_a_callback_that_raises_stops_the_child_at_once(request_here):
    class Cancelled(Exception):
        pass

    seen = []

    def cancel(event):
        seen.append(event)
        raise Cancelled()

    started = time.monotonic()
    with pytest.raises(Cancelled):
        isolated(PROBE, "tests.bot.stage_probe:PROBE").act_verify(
            dataclasses.replace(request_here, target="wait"), cancel
        )
    assert time.monotonic() - started < 20  # the child sleeps 60 s unless killed
    child = int(seen[0].rsplit(" ", 1)[1])
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left sleeping
        os.kill(child, 0)


def test_run_command_gives_target_code_the_allow_list_plus_what_the_caller_names(tmp_path, app_secrets):
    dump = "import json, os; print(json.dumps(dict(os.environ)))"
    result = run_command([sys.executable, "-c", dump], tmp_path, env={"PYTHONPATH": "src", "EXTRA": "1"})
    seen = json.loads(result.output)
    assert not set(APP_VARIABLES) & set(seen) and "TRITON_SECRET_TOKEN" not in seen
    assert seen["PYTHONPATH"] == "src" and seen["EXTRA"] == "1" and seen["TRITON_INTERPRET"] == "1"
    assert seen["PATH"] == os.environ["PATH"]
    assert allowed_env({"HOME": "/h", "PRIVATE_KEY": KEY, "HF_TOKEN": "hf_x", "HF_HUB_OFFLINE": "1"}) == {
        "HOME": "/h",
        "HF_HUB_OFFLINE": "1",
    }
