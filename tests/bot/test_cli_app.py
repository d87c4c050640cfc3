"""`liger-bot serve | replay | scan` through the CLI's testable `program`."""

from __future__ import annotations

import copy
import io
import json
import os
import signal
import socket
import subprocess
import time

import pytest
import requests

from bot.cli import program
from pipelines.outcome import ExitStatus
from tests.bot.app_fixtures import fixture_payload
from tests.bot.standin_fixtures import STANDIN_MAINTAINER
from tests.bot.standin_fixtures import STANDIN_REPO
from tests.bot.standin_fixtures import app_key_pair  # noqa: F401
from tests.bot.standin_fixtures import git_remote  # noqa: F401
from tests.bot.standin_fixtures import github_standin  # noqa: F401


def run(argv: list[str], env: dict) -> tuple[ExitStatus, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = program(argv, env, out, err)
    return status, out.getvalue(), err.getvalue()


def test_serve_refuses_to_start_without_a_webhook_secret():
    status, _, err = run(["serve", "--port", "0"], {})
    assert status is ExitStatus.REFUSED and "WEBHOOK_SECRET is not set" in err


def test_serve_stops_cleanly_on_ctrl_c(tmp_path, liger_bot_exe):
    """The installed `liger-bot serve` in its own process, as a terminal runs it; SIGINT is what Ctrl-C sends it."""
    with socket.socket() as probe:  # a free port: --port 0 would mean "the default"
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "WEBHOOK_SECRET": "s", "DATABASE_URL": f"sqlite:///{tmp_path / 'db'}"}
    env["QUEUE_PATH"] = str(tmp_path / "q")
    argv = [liger_bot_exe, "serve", "--host", "127.0.0.1", "--port", str(port)]
    # a shell's background job (CI under nohup) ignores SIGINT and a child inherits that: a terminal's does not
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    server = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint
    )
    try:
        for _ in range(400):
            try:
                requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except requests.ConnectionError:
                time.sleep(0.05)
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    finally:
        server.kill()
    assert server.returncode == ExitStatus.OK and "stopped" in err and "error" not in err


def test_replay_an_event_nobody_handles(tmp_path):
    path = tmp_path / "check_run.created.json"
    path.write_text(json.dumps(fixture_payload("check_run.created")))
    status, out, _ = run(["replay", str(path)], {})
    assert status is ExitStatus.OK and "check_run.created: no handler" in out


def test_replay_bad_file_is_refused(tmp_path):
    path = tmp_path / "issue_comment.json"
    path.write_text("[1, 2]")
    status, _, err = run(["replay", str(path)], {"DATABASE_URL": f"sqlite:///{tmp_path / 'db'}"})
    assert status is ExitStatus.REFUSED and "holds no webhook payload" in err


def test_replay_runs_the_same_handlers_against_the_github_standin(tmp_path, github_standin, git_remote, app_key_pair):  # noqa: F811
    repo = STANDIN_REPO.full_name
    issue = github_standin.add_issue(repo, "Support Nemotron", "please", STANDIN_MAINTAINER)
    comment_id = github_standin.add_comment(repo, issue, "/liger help", STANDIN_MAINTAINER)
    payload = copy.deepcopy(fixture_payload("issue_comment.created"))
    payload["repository"]["owner"]["login"], payload["repository"]["name"] = STANDIN_REPO.owner, STANDIN_REPO.name
    payload["installation"]["id"] = github_standin.installation_id
    payload["issue"]["number"], payload["comment"]["id"], payload["comment"]["body"] = issue, comment_id, "/liger help"
    payload["sender"]["login"] = STANDIN_MAINTAINER
    path = tmp_path / "issue_comment.created.json"
    path.write_text(json.dumps(payload))
    env = {
        "APP_ID": str(github_standin.app_id),
        "PRIVATE_KEY": app_key_pair[0],
        "GITHUB_API_URL": github_standin.url,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'bot.db'}",
        "QUEUE_PATH": str(tmp_path / "queue.db"),
    }
    status, out, err = run(["replay", str(path)], env)
    assert status is ExitStatus.OK, err
    assert "issue_comment.created: handled (0 job(s) started, 0 moved on)" in out
    replies = [
        c["body"] for c in github_standin.comments.values() if c["issue"] == issue and "liger-bot commands" in c["body"]
    ]
    assert len(replies) == 1


@pytest.mark.slow
def test_scan_json_on_a_real_checkout(liger_checkout):
    status, out, err = run(["scan", "--repo", str(liger_checkout.root), "--only", "llama,bert", "--json"], {})
    assert status is ExitStatus.OK, err
    result = json.loads(out)
    verdicts = {row["model_type"]: row["verdict"] for row in result["models"]}
    assert verdicts == {"llama": "supported", "bert": "refused"}
    assert result["counts"]["supported"] == 1


def test_scan_refuses_names_that_are_not_causal_lms(liger_checkout):
    status, _, err = run(["scan", "--repo", str(liger_checkout.root), "--only", "t5-encoder"], {})
    assert status is ExitStatus.REFUSED and "not causal LMs" in err


@pytest.mark.slow
def test_scan_in_two_processes_then_from_its_cache(liger_checkout):
    argv = ["scan", "--repo", str(liger_checkout.root), "--only", "llama,bert,gpt2", "--jobs", "2", "--json"]
    status, out, err = run(argv, {})
    assert status is ExitStatus.OK, err
    verdicts = {row["model_type"]: row["verdict"] for row in json.loads(out)["models"]}
    assert verdicts["llama"] == "supported" and verdicts["bert"] == "refused" and verdicts["gpt2"] != "refused"
    assert [row["model_type"] for row in json.loads(out)["models"]] == ["bert", "gpt2", "llama"]
    cache = liger_checkout.beside("scan-cache.json")
    data = json.loads(cache.read_text())
    assert set(data["rows"]) == {"llama", "bert", "gpt2"} and liger_checkout.git.head() in data["key"]
    data["rows"]["bert"]["reason"] = "read from the cache"  # a second scan takes the rows made for this commit
    cache.write_text(json.dumps(data))
    _, out, _ = run(argv, {})
    assert {r["model_type"]: r["reason"] for r in json.loads(out)["models"]}["bert"] == "read from the cache"
    # whether a row is taken from the cache does not depend on --jobs (iter_scan reads it before the pool): the two
    # runs that classify again do it in this process, which has transformers imported, not in two spawned ones
    in_process = [*argv[: argv.index("--jobs")], "--jobs", "1", "--json"]
    _, out, _ = run([*in_process, "--no-cache"], {})
    assert {r["model_type"]: r["reason"] for r in json.loads(out)["models"]}["bert"] != "read from the cache"
    data["key"] = data["key"].replace(liger_checkout.git.head(), "0" * 40)  # made for another commit: not used
    cache.write_text(json.dumps(data))
    _, out, _ = run(in_process, {})
    assert {r["model_type"]: r["reason"] for r in json.loads(out)["models"]}["bert"] != "read from the cache"


def test_an_interrupted_scan_prints_what_it_classified_and_exits_130(liger_checkout, monkeypatch):
    from pipelines.autopatch import scan
    from pipelines.autopatch.scan import Row
    from pipelines.autopatch.scan import Verdict

    def interrupted(*_args, **_kwargs):
        yield Row("llama", "LlamaForCausalLM", Verdict.SUPPORTED, "apply_liger_kernel_to_llama")
        raise KeyboardInterrupt

    monkeypatch.setattr(scan, "iter_scan", interrupted)
    status, out, err = run(["scan", "--repo", str(liger_checkout.root), "--json"], {})
    assert status == ExitStatus.INTERRUPTED == 130 and "interrupted" in err
    result = json.loads(out)
    assert result["partial"] is True and [r["model_type"] for r in result["models"]] == ["llama"]
