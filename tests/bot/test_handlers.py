"""Commands end to end through the server, the real SQLite queue and the worker: who may do what, what is
refused, and the job as the user sees it (one status comment, edited in place; one PR, found by branch)."""

from __future__ import annotations

import copy
import subprocess

import pytest

from bot.forge.base import ForgeError
from bot.forge.base import Permission
from bot.jobs import JobState
from tests.bot.app_fixtures import ISSUE
from tests.bot.app_fixtures import MAINTAINER
from tests.bot.app_fixtures import OUTSIDER
from tests.bot.app_fixtures import comment_payload
from tests.bot.app_fixtures import fixture_payload


def say(server, app, body: str, **kw):
    answer = server.deliver("issue_comment", comment_payload(body, **kw))
    assert answer.status_code in (200, 202), answer.text
    app.drain()
    return answer


def replies(app) -> list[str]:
    return [c["body"] for c in app.forge.comments() if "liger-bot:reply" in c["body"]]


def status_comments(app) -> list[dict]:
    return [c for c in app.forge.comments() if "liger-bot:status" in c["body"]]


def remote_branch(app, branch: str) -> str | None:
    proc = subprocess.run(
        ["git", "rev-parse", "-q", "--verify", f"refs/heads/{branch}"],
        cwd=app.forge.remote,
        capture_output=True,
        text=True,
    )
    return proc.stdout.strip() or None


def test_unprivileged_commenter_gets_a_polite_reply_and_no_job(server, app):
    say(server, app, "/liger autopatch nemotron", login=OUTSIDER)
    assert app.jobs() == []
    (reply,) = replies(app)
    assert f"@{OUTSIDER}" in reply and "write access" in reply and "(yours: read)" in reply
    assert ("permission", {"username": OUTSIDER}) in app.forge.calls  # asked the API, not author_association


def test_author_association_is_not_trusted(server, app):
    payload = comment_payload("/liger autopatch nemotron", login=OUTSIDER)
    payload["comment"]["author_association"] = "OWNER"
    server.deliver("issue_comment", payload)
    app.drain()
    assert app.jobs() == []


def test_bot_commenter_is_ignored_without_a_reply(server, app):
    say(server, app, "/liger autopatch nemotron", login="other-app[bot]", user_type="Bot")
    assert app.jobs() == [] and app.forge.comments() == []
    assert "permission" not in app.forge.names()


@pytest.mark.parametrize(
    "body",
    [
        "> /liger autopatch nemotron",
        "```\n/liger autopatch nemotron\n```",
        "~~~sh\n/liger autopatch nemotron\n~~~",
        "`/liger autopatch nemotron`",
        "    /liger autopatch nemotron",
        "try typing /liger autopatch nemotron next time",
    ],
)
def test_command_in_quote_or_code_is_not_a_command(server, app, body):
    say(server, app, body)
    assert app.jobs() == [] and app.forge.comments() == []


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("../../etc/passwd", "is not a model name"),
        ("nemotron;rm", "is not a model name"),
        ("'$(touch /tmp/pwned)'", "is not a model name"),
        ("'a|b'", "is not a model name"),
        ("llama..", "is not a model name"),
        ("n" * 10_000, "is too long"),
    ],
)
def test_bad_model_names_are_refused_with_a_message(server, app, name, expected):
    say(server, app, f"/liger autopatch {name}")
    assert app.jobs() == []
    (reply,) = replies(app)
    assert expected in reply
    assert len(reply) < 600  # a 10,000-character name is not echoed back


def test_unknown_set_field_is_refused_by_the_pipeline_table(server, app):
    say(server, app, "/liger autopatch nemotron --set colour=blue")
    assert app.jobs() == []
    assert "unknown field 'colour'" in replies(app)[0]


def test_full_flow_one_status_comment_then_a_draft_pr(server, app):
    say(server, app, "/liger autopatch nemotron")
    (job,) = app.jobs()
    assert job.job_state is JobState.AWAITING_APPROVAL
    assert [r[:2] for r in app.forge.state["reactions"]] == [[job.trigger_comment_id, "eyes"]]
    (comment,) = status_comments(app)
    assert "waiting for approval" in comment["body"] and "| `rms_casting_mode` | `llama` |" in comment["body"]
    assert "Next: `/liger approve`" in comment["body"]

    say(server, app, "/liger approve")
    job = app.store.get(job.id)
    assert job.job_state is JobState.PR_OPENED, job.message
    (comment,) = status_comments(app)  # still one, edited in place
    assert comment["edits"] >= 4
    assert "draft PR opened" in comment["body"] and "| convergence | SKIP | needs GPU runner |" in comment["body"]
    (pull,) = app.forge.state["pulls"].values()
    assert pull["head"] == "liger-bot/autopatch-nemotron" and pull["base"] == "main"
    assert "| import | PASS |" in pull["body"] and "| decision |" in pull["body"]
    assert remote_branch(app, pull["head"]) == job.pushed_sha


def test_autonomous_repo_skips_the_checkpoint(server, app):
    app.forge.set_file(".github/liger-bot.yml", "autonomous: true\n")
    say(server, app, "/liger autopatch nemotron")
    (job,) = app.jobs()
    assert job.job_state is JobState.PR_OPENED


def test_a_decision_needing_review_stops_even_an_autonomous_repo(server, app):
    app.forge.set_file(".github/liger-bot.yml", "autonomous: true\n")
    say(server, app, "/liger autopatch reviewme")
    (job,) = app.jobs()
    assert job.job_state is JobState.AWAITING_APPROVAL
    assert "needs review: rope" in status_comments(app)[0]["body"]


def test_approvers_from_the_default_branch_config(server, app):
    app.forge.set_file(".github/liger-bot.yml", "approvers: [lead]\n")
    say(server, app, "/liger autopatch nemotron")
    say(server, app, "/liger approve")
    assert app.jobs()[0].job_state is JobState.AWAITING_APPROVAL
    assert "only @lead may approve" in replies(app)[0]
    assert ("read_file", {"path": ".github/liger-bot.yml", "ref": "main"}) in app.forge.calls


def test_one_active_job_per_repo_thread_verb(server, app):
    say(server, app, "/liger autopatch nemotron")
    say(server, app, "/liger autopatch olmo")
    assert [job.target for job in app.jobs()] == ["nemotron"]
    assert "already active here" in replies(app)[0]
    say(server, app, "/liger autopatch olmo", issue=ISSUE + 1)  # another thread is another slot
    assert sorted(job.target for job in app.jobs()) == ["nemotron", "olmo"]


def test_cancel_then_retry(server, app):
    say(server, app, "/liger autopatch nemotron --set rms_offset=1.0")
    say(server, app, "/liger cancel")
    (job,) = app.jobs()
    assert job.job_state is JobState.CANCELLED
    assert "Next: `/liger retry`" in status_comments(app)[0]["body"]
    say(server, app, "/liger retry")
    first, second = app.jobs()
    assert second.job_state is JobState.AWAITING_APPROVAL and second.overrides == ["rms_offset=1.0"]


def test_set_before_approval_then_verify_failure_names_the_next_command(server, app):
    say(server, app, "/liger autopatch nemotron")
    say(server, app, "/liger set mlp_kind=geglu")
    say(server, app, "/liger approve")
    (job,) = app.jobs()
    assert job.job_state is JobState.FAILED
    assert "verify failed: instance patching" in job.message
    assert "Next: `/liger autopatch nemotron --set mlp_kind=geglu`" in status_comments(app)[0]["body"]
    assert app.forge.state["pulls"] == {} and remote_branch(app, "liger-bot/autopatch-nemotron") is None


def test_help_is_rendered_from_the_verb_table(server, app):
    say(server, app, "/liger help")
    (reply,) = replies(app)
    assert "`/liger autopatch MODEL [--set field=value ...]`" in reply and "`/liger scan`" in reply


def _open_pr(server, app):
    say(server, app, "/liger autopatch nemotron")
    say(server, app, "/liger approve")
    (job,) = app.jobs()
    assert job.job_state is JobState.PR_OPENED
    return job


def review_comment(body: str, pr_number: int, branch: str) -> dict:
    payload = copy.deepcopy(fixture_payload("pull_request_review_comment.created"))
    payload["comment"]["body"] = body
    payload["pull_request"]["number"] = pr_number
    payload["pull_request"]["head"]["ref"] = branch
    for user in (payload["comment"]["user"], payload["sender"]):
        user["login"], user["type"] = MAINTAINER, "User"
    return payload


def test_review_comment_set_revises_the_same_pr(server, app):
    job = _open_pr(server, app)
    first_sha = job.pushed_sha
    server.deliver(
        "pull_request_review_comment", review_comment("/liger set rms_offset=1.0", job.pr_number, job.branch)
    )
    app.drain()
    job = app.store.get(job.id)
    assert job.job_state is JobState.PR_OPENED, job.message
    assert job.pushed_sha != first_sha and remote_branch(app, job.branch) == job.pushed_sha
    (pull,) = app.forge.state["pulls"].values()  # updated, not recreated
    assert pull["updates"] == 1
    content = subprocess.run(
        ["git", "show", f"{job.branch}:src/liger_kernel/transformers/model/nemotron.py"],
        cwd=app.forge.remote,
        capture_output=True,
        text=True,
    ).stdout
    assert "'rms_offset': 1.0" in content
    assert [r[1:] for r in app.forge.state["reactions"]][-1] == ["eyes", True]


def test_review_body_set_works_too(server, app):
    job = _open_pr(server, app)
    payload = copy.deepcopy(fixture_payload("pull_request_review.submitted"))
    payload["review"]["body"] = "Looks close.\n\n/liger set rope=none"
    payload["pull_request"]["number"] = job.pr_number
    payload["sender"]["login"] = MAINTAINER
    server.deliver("pull_request_review", payload)
    app.drain()
    job = app.store.get(job.id)
    assert job.overrides == ["rope=none"] and job.job_state is JobState.PR_OPENED


@pytest.mark.slow
def test_human_push_stops_the_bot_rewriting_the_branch(server, app, tmp_path):
    job = _open_pr(server, app)
    human = tmp_path / "human"
    subprocess.run(["git", "clone", "-q", "-b", job.branch, str(app.forge.remote), str(human)], check=True)
    (human / "NOTE.md").write_text("a reviewer's fix\n")
    env = ["-c", "user.name=Reviewer", "-c", "user.email=reviewer@example.com"]
    subprocess.run(["git", *env, "add", "-A"], cwd=human, check=True)
    subprocess.run(["git", *env, "commit", "-qm", "reviewer fix"], cwd=human, check=True)
    subprocess.run(["git", "push", "-q", "origin", job.branch], cwd=human, check=True)
    human_sha = remote_branch(app, job.branch)

    server.deliver(
        "pull_request_review_comment", review_comment("/liger set rms_offset=1.0", job.pr_number, job.branch)
    )
    app.drain()
    job = app.store.get(job.id)
    assert job.job_state is JobState.FAILED
    assert "stops rewriting it" in job.message
    assert remote_branch(app, job.branch) == human_sha


def test_github_502_and_secondary_rate_limit_lose_nothing(server, app):
    app.forge.fail_next = [ForgeError("GitHub answered 502", status=502)]
    server.deliver("issue_comment", comment_payload("/liger autopatch nemotron", comment_id=4242))
    app.drain()
    assert app.jobs() == []  # the delivery stays unhandled; the sweep queues it again
    (delivery_id,) = app.store.unhandled_deliveries(older_than=2**40)
    app.runtime.queue.enqueue_delivery(delivery_id)
    app.drain()
    (job,) = app.jobs()
    assert job.job_state is JobState.AWAITING_APPROVAL

    app.forge.fail_next = [ForgeError("403 secondary rate limit", status=403)]
    say(server, app, "/liger approve")  # the approve handler itself fails once, then is retried
    (delivery_id,) = app.store.unhandled_deliveries(older_than=2**40)
    app.runtime.queue.enqueue_delivery(delivery_id)
    app.drain()
    job = app.store.get(job.id)
    assert job.job_state is JobState.PR_OPENED
    assert len(status_comments(app)) == 1 and len(app.forge.state["pulls"]) == 1


def test_permission_is_asked_per_command_and_read_access_may_ask_status(server, app):
    app.forge.set_permission(OUTSIDER, Permission.READ)
    say(server, app, "/liger autopatch nemotron")
    say(server, app, "/liger status", login=OUTSIDER)
    say(server, app, "/liger cancel", login=OUTSIDER)
    (job,) = app.jobs()
    assert job.job_state is JobState.AWAITING_APPROVAL
    assert len(replies(app)) == 1 and "write access" in replies(app)[0]


def test_a_stage_hitting_a_502_is_deferred_then_finishes(server, app):
    say(server, app, "/liger autopatch nemotron")
    (job,) = app.jobs()
    say(server, app, "/liger approve")  # (runs to the end; now re-run the revise path with a failure inside it)
    app.forge.fail_next = []
    job = app.store.transition(job.id, JobState.ACTING, overrides=["rms_offset=1.0"])
    calls_before = len(app.forge.calls)
    app.forge.fail_next = [ForgeError("GitHub answered 502", status=502)]
    app.worker.advance(job.id)  # the first forge call of the stage fails: the job is deferred, not failed
    job = app.store.get(job.id)
    assert job.job_state is JobState.ACTING and "trying again in 30s" in job.message
    assert len(app.forge.calls) == calls_before + 1
    app.worker.advance(job.id)  # the scheduled retry
    job = app.store.get(job.id)
    assert job.job_state is JobState.PR_OPENED and len(app.forge.state["pulls"]) == 1


def test_a_permanent_github_refusal_fails_the_job_with_a_message(server, app):
    say(server, app, "/liger autopatch nemotron")
    (job,) = app.jobs()
    say(server, app, "/liger approve")
    job = app.store.transition(job.id, JobState.ACTING, overrides=["rope=none"])
    app.forge.fail_next = [ForgeError("GitHub answered 404: Not Found", status=404)]
    app.worker.advance(job.id)
    job = app.store.get(job.id)
    assert job.job_state is JobState.FAILED and "GitHub refused a call" in job.message
    assert "Next: `/liger retry`" in status_comments(app)[0]["body"]


def test_a_bad_repo_config_is_shown_once_on_the_status_comment_and_in_liger_status(server, app):
    app.forge.set_file(".github/liger-bot.yml", "autonomous: " + "[" * 5000 + "]" * 5000 + "\ncolour: blue\n")
    say(server, app, "/liger autopatch nemotron")
    (job,) = app.jobs()
    assert job.job_state is JobState.AWAITING_APPROVAL, job.message  # defaults: the job still runs, and waits
    (comment,) = status_comments(app)
    assert comment["body"].count("has problems") == 1 and "could not be read (RecursionError)" in comment["body"]

    app.forge.set_file(".github/liger-bot.yml", "colour: blue\n")  # fixed in part; /liger status reads it again
    say(server, app, "/liger status")
    (comment,) = status_comments(app)
    assert comment["body"].count("has problems") == 1 and "unknown keys ignored: colour" in comment["body"]
    assert "RecursionError" not in comment["body"] and replies(app) == []
