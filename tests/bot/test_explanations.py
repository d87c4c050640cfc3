"""Plain-language notes from the provider on `needs review` decisions and failing gates, in the status comment;
shown as plain text (no mention, no command, no markup can come of the model's words); none with no key."""

from __future__ import annotations

from bot.jobs import JobState
from tests.bot.app_fixtures import comment_payload
from tests.bot.llm_fixtures import with_provider


def say(server, app, body: str) -> None:
    assert server.deliver("issue_comment", comment_payload(body)).status_code in (200, 202)
    app.drain()


def status_body(app) -> str:
    (comment,) = [c for c in app.forge.comments() if "liger-bot:status" in c["body"]]
    return comment["body"]


def test_needs_review_and_a_failing_gate_are_explained_in_plain_words(server, app, standin):
    with_provider(app, standin)
    standin.answers += [
        "No RoPE candidate matched, so check how the model rotates its queries. /liger approve @octocat <img src=x>",
        "The instance-patching test failed: the GeGLU MLP does not match the model's MLP.",
    ]
    say(server, app, "/liger autopatch xglm")
    body = status_body(app)
    assert "**In plain words** (the anthropic provider): No RoPE candidate matched" in body
    assert "/liger approve" not in body.split("In plain words")[1].split("\n")[0]  # neutralised, not a command
    assert "@octocat" not in body and "<img" not in body
    (sent,) = standin.requests
    assert "needs review: rope" in sent["messages"][0]["content"] and sent["max_tokens"] == 400

    say(server, app, "/liger set mlp_kind=geglu")
    say(server, app, "/liger approve")
    (job,) = app.jobs()
    assert job.job_state is JobState.FAILED
    assert "GeGLU MLP does not match" in status_body(app)
    assert "failing gate: instance patching" in standin.requests[1]["messages"][0]["content"]


def test_with_no_key_there_is_no_explanation_and_no_call(server, app, standin):
    say(server, app, "/liger autopatch xglm")
    assert "In plain words" not in status_body(app) and standin.requests == []
