"""A pipeline added by its folder and one line of pipelines.registry runs through the App like the shipped ones:
`/liger toy NAME` -> checkpoint (its profile table) -> approve -> its stages in the child (bot.isolation) -> push
-> draft PR, with nothing in bot/ naming it (the toy: tests/pipelines/toy/job.py)."""

from __future__ import annotations

from bot.jobs import JobState
from pipelines import registry
from tests.bot.test_handlers import remote_branch
from tests.bot.test_handlers import say
from tests.bot.test_handlers import status_comments
from tests.pipelines.toy import job as toy


def test_a_registered_toy_pipeline_runs_the_whole_app_flow(server, app, monkeypatch):
    monkeypatch.setitem(registry.PIPELINES, "toy", toy.LOCATION)  # the one registry line
    say(server, app, "/liger toy hello_world")
    (job,) = app.jobs()
    assert job.verb == "toy" and job.job_state is JobState.AWAITING_APPROVAL, job.message
    (comment,) = status_comments(app)
    assert "| greeting | `hello from the toy pipeline` |" in comment["body"]

    say(server, app, "/liger approve")
    job = app.store.get(job.id)
    assert job.job_state is JobState.PR_OPENED, job.message
    (pull,) = app.forge.state["pulls"].values()
    assert pull["head"] == "liger-bot/toy-hello_world" and pull["title"] == "toy: hello_world"
    assert "A toy file for `hello_world`." in pull["body"] and "| toy file | PASS |" in pull["body"]
    assert remote_branch(app, pull["head"]) == job.pushed_sha
