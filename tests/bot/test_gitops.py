"""Pushing the bot's branch over smart HTTP with the installation token, and stopping when a person pushed."""

from __future__ import annotations

import subprocess

import pytest

from bot.gitops import PushOutcome
from bot.gitops import credentialed_url
from bot.gitops import push_branch
from pipelines.git import Git
from pipelines.git import GitError
from tests.bot.standin_fixtures import *  # noqa: F401,F403
from tests.bot.standin_fixtures import BOT_BRANCH as BRANCH
from tests.bot.standin_fixtures import STANDIN_REPO


@pytest.fixture
def remote(github_forge):
    return github_forge.clone_url(STANDIN_REPO), github_forge.push_credentials(STANDIN_REPO)


def test_push_over_http_with_credentials_then_up_to_date(bot_checkout, remote, git_remote, github_forge):
    url, credentials = remote
    result = push_branch(bot_checkout, BRANCH, url, credentials)
    assert result.outcome is PushOutcome.PUSHED
    assert github_forge.branch_head(STANDIN_REPO, BRANCH) == Git(bot_checkout).head()
    assert any(user == "x-access-token" and status == 200 for _, _, status, user in git_remote.log)
    assert push_branch(bot_checkout, BRANCH, url, credentials).outcome is PushOutcome.UP_TO_DATE


def test_revise_replaces_the_bots_own_commit(bot_checkout, remote, github_forge):
    url, credentials = remote
    first = push_branch(bot_checkout, BRANCH, url, credentials)
    git = Git(bot_checkout)
    git.run("commit", "-q", "--amend", "-m", "autopatch nemotron (revised)")
    second = push_branch(bot_checkout, BRANCH, url, credentials, last_pushed=first.head)
    assert second.outcome is PushOutcome.PUSHED
    assert github_forge.branch_head(STANDIN_REPO, BRANCH) == git.head() != first.head


def test_human_push_to_the_bot_branch_is_detected_and_left_alone(tmp_path, bot_checkout, remote, github_forge):
    url, credentials = remote
    push_branch(bot_checkout, BRANCH, url, credentials)
    human = tmp_path / "human"
    subprocess.run(["git", "clone", "-q", "-b", BRANCH, str(bot_checkout), str(human)], check=True)
    (human / "fix.py").write_text("y = 2\n")
    ident = ["-c", "user.name=Ada", "-c", "user.email=ada@example.com"]
    subprocess.run(["git", "-C", str(human), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(human), *ident, "commit", "-q", "-m", "human fix"], check=True)
    human_head = push_branch(human, BRANCH, url, credentials).head  # pushed with a token, as a person would

    git = Git(bot_checkout)
    git.run("commit", "-q", "--amend", "-m", "bot revise")
    result = push_branch(bot_checkout, BRANCH, url, credentials)
    assert result.outcome is PushOutcome.HUMAN_PUSHED
    assert "stops rewriting" in result.message
    assert github_forge.branch_head(STANDIN_REPO, BRANCH) == human_head


def test_bad_credentials_fail_without_showing_the_token(bot_checkout, remote):
    url, _ = remote
    secret = "ghs_" + "S3cr3t" * 6
    with pytest.raises(GitError) as raised:
        push_branch(bot_checkout, BRANCH, url, ("x-access-token", secret))
    assert secret not in str(raised.value)
    assert "127.0.0.1" in str(raised.value)


def test_token_is_not_written_to_git_config(bot_checkout, remote):
    url, credentials = remote
    push_branch(bot_checkout, BRANCH, url, credentials)
    config = (bot_checkout / ".git" / "config").read_text()
    assert credentials[1] not in config


# --- red team, finding 3: a hook planted by target code ---------------------------------------------------------

HOOK = """#!/bin/sh
env > "{out}/$(basename "$0").env"
"""


def test_a_hook_planted_in_the_checkout_never_runs_in_the_push(tmp_path, bot_checkout, remote, github_forge):
    url, credentials = remote
    seen = tmp_path / "hook-ran"
    seen.mkdir()
    planted = tmp_path / "planted-hooks"
    planted.mkdir()
    for folder in (bot_checkout / ".git" / "hooks", planted):  # the repo's hooks, and a hooksPath its config names
        for name in ("pre-push", "reference-transaction", "post-checkout", "push-to-checkout"):
            hook = folder / name
            hook.write_text(HOOK.format(out=seen))
            hook.chmod(0o755)
    Git(bot_checkout).run("config", "core.hooksPath", str(planted))
    Git(bot_checkout).run("config", "core.fsmonitor", str(planted / "pre-push"))

    result = push_branch(bot_checkout, BRANCH, url, credentials)
    assert result.outcome is PushOutcome.PUSHED
    assert github_forge.branch_head(STANDIN_REPO, BRANCH) == Git(bot_checkout).head()
    assert list(seen.iterdir()) == []  # no hook ran, so none saw the token in its environment


def test_a_remote_rewrite_planted_in_the_checkout_does_not_redirect_the_push(
    tmp_path, bot_checkout, remote, github_forge
):
    url, credentials = remote
    elsewhere = tmp_path / "elsewhere.git"
    subprocess.run(["git", "init", "-q", "--bare", str(elsewhere)], check=True)
    Git(bot_checkout).run("config", f"url.file://{elsewhere}.insteadOf", credentialed_url(url, credentials))
    result = push_branch(bot_checkout, BRANCH, url, credentials)
    assert result.outcome is PushOutcome.PUSHED
    assert github_forge.branch_head(STANDIN_REPO, BRANCH) == Git(bot_checkout).head()
    assert not list((elsewhere / "refs" / "heads").iterdir())
