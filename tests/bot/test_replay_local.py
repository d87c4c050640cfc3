"""`liger-bot replay --local DIR`: a webhook payload through the App's handlers and worker, offline, with the local
forge on a real checkout standing for GitHub (no APP_ID, no network): the embedded default goes through the seam the
App uses (issue 15, points 4 and 8)."""

from __future__ import annotations

import io
import json

import pytest

from bot.cli import program
from pipelines.outcome import ExitStatus
from tests.bot.app_fixtures import comment_payload


def _replay(tmp_path, checkout, body: str) -> tuple[ExitStatus, str, str]:
    payload = tmp_path / "comment.json"
    payload.write_text(json.dumps(comment_payload(body)))
    env = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'bot.db'}",
        "QUEUE_PATH": str(tmp_path / "queue.db"),
        "WORK_DIR": str(tmp_path / "work"),
    }
    out, err = io.StringIO(), io.StringIO()
    argv = ["replay", str(payload), "--event", "issue_comment", "--inline", "--local", str(checkout.root)]
    return program(argv, env, out, err), out.getvalue(), err.getvalue()


@pytest.mark.slow
def test_a_replayed_command_opens_its_draft_pr_on_the_local_forge(tmp_path, liger_checkout):
    status, out, err = _replay(tmp_path, liger_checkout, "/liger kernel relu2 --force")
    assert status is ExitStatus.OK, err
    assert "job 1: kernel relu2" in out and "awaiting_approval" in out, out  # the profile checkpoint, as on GitHub
    status, out, err = _replay(tmp_path, liger_checkout, "/liger approve")  # the same database: the job goes on
    assert status is ExitStatus.OK, err
    assert "pr_opened" in out or "pr opened" in out, out
    branch = "liger-bot/kernel-relu2"
    git = liger_checkout.git
    assert git.current_branch() == "main" and git.dirty_paths() == []  # the user's tree as they left it
    assert git.run("rev-list", "--count", f"main..{branch}").strip() == "1"  # the worker's push, into the checkout
    state = liger_checkout.beside("")
    (pull,) = [r for r in map(json.loads, (p.read_text() for p in (state / "issues").glob("*.json"))) if "head" in r]
    assert (pull["head"], pull["base"], pull["draft"]) == (branch, "main", True)
    assert "| checkstyle | PASS |" in pull["body"]
    comments = [json.loads(p.read_text())["body"] for p in (state / "comments").glob("*.json")]
    assert any("liger-bot kernel `relu2`" in c and "PR" in c for c in comments), comments
    assert (state / "reactions.jsonl").read_text().count('"content"') >= 1  # the command was acknowledged


def test_replay_local_refuses_a_folder_that_is_not_a_checkout(tmp_path):
    class NotACheckout:
        root = tmp_path

    status, _, err = _replay(tmp_path, NotACheckout, "/liger kernel relu2")
    assert status is ExitStatus.REFUSED and "not a Liger-Kernel checkout" in err
