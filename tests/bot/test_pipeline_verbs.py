"""The kernel and fuse verbs through the server, the queue and the worker: each starts a job of its own pipeline
and goes through the same flow (understand -> checkpoint -> ...). The kernel pipeline's understand is the real one,
on the worker's real checkout of Liger-Kernel 0.8.5."""

from __future__ import annotations

import subprocess

import pytest

from bot.jobs import JobState
from tests.bot.test_handlers import remote_branch
from tests.bot.test_handlers import replies
from tests.bot.test_handlers import say
from tests.bot.test_handlers import status_comments
from tests.pipelines.fuse import tiny_model


def test_help_lists_the_kernel_and_fuse_verbs(server, app):
    say(server, app, "/liger help")
    (reply,) = replies(app)
    assert "`/liger kernel SPEC [--name NAME] [--force]`" in reply and "`/liger fuse path/in/repo.py:Factory`" in reply


def test_a_kernel_comment_starts_a_kernel_job_that_stops_at_the_checkpoint(server, app):
    say(server, app, "/liger kernel relu6")
    (job,) = app.jobs()
    assert (job.verb, job.target, job.options) == ("kernel", "relu6", {})
    assert job.job_state is JobState.AWAITING_APPROVAL, job.message
    assert job.branch == "liger-bot/kernel-relu6" and job.profile["module_class_name"] == "LigerReLU6"
    (comment,) = status_comments(app)
    assert "| operation_name | `relu6` |" in comment["body"] and "| tier | `1` |" in comment["body"]
    assert "Check the profile, then approve." in comment["body"]  # kernel takes no `/liger set`


@pytest.mark.slow
def test_a_kernel_name_that_exists_fails_with_the_command_to_run_next_and_retry_keeps_it(server, app):
    say(server, app, "/liger kernel relu6 --name relu_squared")
    (job,) = app.jobs()
    assert job.options == {"name": "relu_squared"}
    assert job.job_state is JobState.FAILED
    assert "a kernel named 'relu_squared' exists already" in job.message
    assert job.next_command == "/liger kernel relu6 --name relu_squared"

    say(server, app, "/liger retry")
    first, again = app.jobs()
    assert (again.verb, again.target, again.options) == ("kernel", "relu6", {"name": "relu_squared"})
    assert again.job_state is JobState.FAILED


def test_a_fuse_comment_naming_no_file_of_the_repository_fails_before_anything_runs(server, app):
    say(server, app, "/liger fuse models/absent.py:make_model")
    (job,) = app.jobs()
    assert job.verb == "fuse" and job.job_state is JobState.FAILED
    assert "`models/absent.py` is not a file of this repository's default branch" in job.message
    assert app.forge.state["pulls"] == {}


def commit_to_default_branch(app, tmp_path, path: str, text: str) -> None:
    work = tmp_path / "maintainer"
    subprocess.run(["git", "clone", "-q", str(app.forge.remote), str(work)], check=True)
    (work / path).parent.mkdir(parents=True, exist_ok=True)
    (work / path).write_text(text)
    git = ["git", "-C", str(work), "-c", "user.name=Maintainer", "-c", "user.email=m@example.com"]
    subprocess.run([*git, "add", path], check=True)
    subprocess.run([*git, "commit", "-q", "-m", f"add {path}"], check=True)
    subprocess.run([*git, "push", "-q", "origin", "HEAD:main"], check=True)


@pytest.mark.slow
def test_a_fuse_comment_runs_the_real_fuse_pipeline_to_a_draft_pr(server, app, tmp_path):
    commit_to_default_branch(app, tmp_path, "models/tiny.py", tiny_model.SOURCE)
    app.forge.set_file(".github/liger-bot.yml", "autonomous: true\n")
    say(server, app, "/liger fuse models/tiny.py:make")
    (job,) = app.jobs()
    assert job.job_state is JobState.PR_OPENED, job.message
    assert job.branch == "liger-bot/fuse-fused-mul-add-tanh"
    (pull,) = app.forge.state["pulls"].values()
    assert pull["head"] == job.branch and "| numerics vs eager | PASS |" in pull["body"]
    assert pull["body"].count("| unmatched chain 0 |") == 1 and "`mul → add → tanh`" in pull["body"]
    assert remote_branch(app, job.branch) == job.pushed_sha
