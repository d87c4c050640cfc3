"""The GitHub forge against the stand-in: every request checked against GitHub's REST description."""

from __future__ import annotations

import hashlib
import logging
import urllib.request

import pytest

from bot.forge.assets import MAX_ASSET_BYTES
from bot.forge.base import AssetRejected
from bot.forge.base import ForgeError
from bot.forge.base import Permission
from bot.forge.base import RateLimited
from bot.forge.github import ASSETS_BRANCH
from bot.forge.github import ASSETS_DIR
from bot.gitops import push_branch
from tests.bot.standin_fixtures import *  # noqa: F401,F403
from tests.bot.standin_fixtures import BOT_BRANCH as BRANCH
from tests.bot.standin_fixtures import STANDIN_MAINTAINER
from tests.bot.standin_fixtures import STANDIN_REPO
from tests.bot.test_assets import png

SECONDARY = {"retry-after": "3"}


@pytest.fixture
def pushed_branch(bot_checkout, github_forge):
    """The bot's branch pushed over HTTP with the installation token."""
    url = github_forge.clone_url(STANDIN_REPO)
    push_branch(bot_checkout, BRANCH, url, github_forge.push_credentials(STANDIN_REPO))
    return bot_checkout


def test_reads_what_the_repository_holds(github_forge, github_standin):
    assert github_forge.default_branch(STANDIN_REPO) == "main"
    assert github_forge.read_file(STANDIN_REPO, "README.md", "main").startswith("# Liger-Kernel")
    assert github_forge.read_file(STANDIN_REPO, ".github/liger-bot.yml", "main") is None
    assert len(github_forge.branch_head(STANDIN_REPO, "main")) == 40
    assert github_forge.branch_head(STANDIN_REPO, BRANCH) is None


def test_permission_comes_from_the_api_not_the_payload(github_forge, github_standin):
    github_standin.repos[STANDIN_REPO.full_name].collaborators["triager"] = "triage"
    github_standin.repos[STANDIN_REPO.full_name].collaborators["owner"] = "admin"
    assert github_forge.permission(STANDIN_REPO, STANDIN_MAINTAINER) is Permission.WRITE
    assert github_forge.permission(STANDIN_REPO, "triager") is Permission.TRIAGE
    assert github_forge.permission(STANDIN_REPO, "owner") is Permission.ADMIN
    assert github_forge.permission(STANDIN_REPO, "passer-by") < Permission.WRITE


def test_reaction_and_status_comment_edited_in_place(github_forge, github_standin):
    number = github_standin.add_issue(STANDIN_REPO.full_name, "Support Nemotron", "", STANDIN_MAINTAINER)
    command = github_standin.add_comment(
        STANDIN_REPO.full_name, number, "/liger autopatch nemotron", STANDIN_MAINTAINER
    )
    github_forge.add_reaction(STANDIN_REPO, command, "eyes")
    github_forge.add_reaction(STANDIN_REPO, command, "eyes")  # GitHub answers 200 the second time
    review = github_standin.add_review_comment(STANDIN_REPO.full_name, number, "/liger set x=1", STANDIN_MAINTAINER)
    github_forge.add_reaction(STANDIN_REPO, review, "rocket", review_comment=True)
    status = github_forge.create_comment(STANDIN_REPO, number, "queued\n<!-- liger-bot:status job=7 -->")
    github_forge.edit_comment(STANDIN_REPO, status, "understanding\n<!-- liger-bot:status job=7 -->")
    # a retried job creates its status comment again: the marker finds the first one
    again = github_forge.create_comment(STANDIN_REPO, number, "queued\n<!-- liger-bot:status job=7 -->")
    assert again == status
    bot_comments = [c for c in github_standin.comments.values() if c["user"].endswith("[bot]")]
    assert [c["body"] for c in bot_comments] == ["understanding\n<!-- liger-bot:status job=7 -->"]
    assert [(r["kind"], r["content"]) for r in github_standin.reactions] == [
        ("issue_comment", "eyes"),
        ("review_comment", "rocket"),
    ]


def test_pull_request_found_again_by_branch_never_a_second(github_forge, github_standin, pushed_branch):
    first = github_forge.ensure_pull_request(STANDIN_REPO, BRANCH, "main", "Autopatch Nemotron", "profile v1")
    assert first.draft and first.head == BRANCH and first.base == "main"
    # a retried job, then a revise: same PR, body updated in place
    second = github_forge.ensure_pull_request(STANDIN_REPO, BRANCH, "main", "Autopatch Nemotron", "profile v2")
    assert second.number == first.number
    assert github_forge.find_pull_request(STANDIN_REPO, BRANCH).number == first.number
    pulls = github_standin.pulls(STANDIN_REPO.full_name)
    assert len(pulls) == 1 and pulls[0]["body"] == "profile v2"
    assert github_standin.count("POST", r"/pulls$") == 1
    assert [p.number for p in github_forge.open_pull_requests(STANDIN_REPO, "liger-bot/")] == [first.number]
    assert github_forge.open_pull_requests(STANDIN_REPO, "renovate/") == []


def test_pull_request_for_a_missing_branch_is_refused_not_retried(github_forge, github_standin):
    with pytest.raises(ForgeError) as raised:
        github_forge.ensure_pull_request(STANDIN_REPO, "liger-bot/never-pushed", "main", "t", "b")
    assert raised.value.status == 422
    assert github_standin.count("POST", r"/pulls$") == 1


def test_get_retried_after_secondary_rate_limit_and_502(github_app, github_forge, github_standin):
    github_standin.fail("GET", r"/contents/README.md$", 403, headers=SECONDARY)
    github_standin.fail("GET", r"/contents/README.md$", 502)
    assert github_forge.read_file(STANDIN_REPO, "README.md", "main").startswith("# Liger-Kernel")
    assert github_standin.count("GET", r"/contents/README.md$") == 3
    assert github_app.retry_sleeps[0] == 3.0  # retry-after honoured
    assert github_app.retry_sleeps[1] > 0  # backoff on the 502


def test_secondary_rate_limit_without_retry_after_waits_a_minute(github_app, github_forge, github_standin):
    github_standin.fail(
        "GET", r"/repos/[^/]+/[^/]+$", 403, body={"message": "You have exceeded a secondary rate limit."}
    )
    assert github_forge.default_branch(STANDIN_REPO) == "main"
    assert github_app.retry_sleeps == [60.0]


def test_long_rate_limit_defers_the_job_instead_of_blocking(github_forge, github_standin):
    github_standin.fail("GET", r"/repos/[^/]+/[^/]+$", 429, headers={"retry-after": "3600"})
    with pytest.raises(RateLimited) as raised:
        github_forge.default_branch(STANDIN_REPO)
    assert raised.value.retry_at > 0


def test_create_pull_answered_502_after_it_landed_is_not_sent_again(github_forge, github_standin, pushed_branch):
    github_standin.fail("POST", r"/pulls$", 502, after=True)
    pull = github_forge.ensure_pull_request(STANDIN_REPO, BRANCH, "main", "Autopatch Nemotron", "body")
    assert github_standin.count("POST", r"/pulls$") == 1
    assert len(github_standin.pulls(STANDIN_REPO.full_name)) == 1
    assert pull.number == github_standin.pulls(STANDIN_REPO.full_name)[0]["number"]


def test_create_pull_rejected_by_rate_limit_is_sent_again_after_lookup(github_forge, github_standin, pushed_branch):
    github_standin.fail("POST", r"/pulls$", 403, headers=SECONDARY)
    github_forge.ensure_pull_request(STANDIN_REPO, BRANCH, "main", "Autopatch Nemotron", "body")
    assert github_standin.count("POST", r"/pulls$") == 2  # the first never landed, so it was sent again
    assert len(github_standin.pulls(STANDIN_REPO.full_name)) == 1


def test_comment_and_issue_answered_502_after_landing_exist_once(github_forge, github_standin):
    number = github_standin.add_issue(STANDIN_REPO.full_name, "thread", "", STANDIN_MAINTAINER)
    github_standin.fail("POST", r"/issues/\d+/comments$", 502, after=True)
    comment = github_forge.create_comment(STANDIN_REPO, number, "queued")  # no marker of its own: one is added
    github_standin.fail("POST", r"/issues$", 502, after=True)
    dashboard = github_forge.create_issue(STANDIN_REPO, "liger-bot dashboard", "- [ ] nemotron")
    assert github_standin.count("POST", r"/issues/\d+/comments$") == 1
    assert [c["id"] for c in github_standin.comments.values() if c["issue"] == number] == [comment]
    assert github_standin.count("POST", r"/issues$") == 1
    assert github_forge.find_issue(STANDIN_REPO, "liger-bot dashboard") == dashboard


def test_installation_token_cached_then_refreshed_before_expiry(github_app, github_forge, github_standin):
    github_forge.default_branch(STANDIN_REPO)
    github_forge.read_file(STANDIN_REPO, "README.md", "main")
    assert github_standin.count("POST", r"/access_tokens$") == 1
    github_app.tokens.margin = github_standin.token_ttl + 1  # now every cached token is "about to expire"
    github_forge.default_branch(STANDIN_REPO)
    assert github_standin.count("POST", r"/access_tokens$") == 2


def test_expired_token_is_refused_by_the_standin(github_app, github_forge, github_standin):
    github_forge.default_branch(STANDIN_REPO)
    github_standin.tokens.clear()  # revoked on GitHub's side; the cache still believes in it
    with pytest.raises(ForgeError) as raised:
        github_forge.default_branch(STANDIN_REPO)
    assert raised.value.status == 401


def test_jwt_signed_by_another_key_is_refused(github_standin, git_remote):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from bot.forge.github import AppCredentials
    from bot.forge.github import GitHubApp
    from bot.forge.github import HttpPolicy
    from tests.bot.standin_fixtures import APP_ID

    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    app = GitHubApp(AppCredentials(str(APP_ID), pem.decode(), github_standin.url), HttpPolicy.for_tests())
    with pytest.raises(ForgeError) as raised:
        app.forge(github_standin.installation_id).default_branch(STANDIN_REPO)
    assert raised.value.status == 401


def test_tokens_never_reach_logs_or_exceptions(github_app, github_forge, github_standin, caplog):
    caplog.set_level(logging.DEBUG)
    github_forge.default_branch(STANDIN_REPO)
    github_standin.fail("GET", r"/repos/[^/]+/[^/]+$", 404)
    with pytest.raises(ForgeError) as raised:
        github_forge.default_branch(STANDIN_REPO)
    tokens = list(github_standin.tokens)
    assert tokens
    text = caplog.text + str(raised.value) + repr(raised.value)
    assert "access_tokens" in caplog.text  # PyGithub did log the token exchange, body included
    for token in tokens:
        assert token not in text


def test_workflow_dispatch_and_report_artifact(github_forge, github_standin, pushed_branch):
    inputs = {"job_id": "7", "pipeline": "autopatch", "target": "nemotron", "runner_labels": '["self-hosted"]'}
    run_id = github_forge.dispatch_workflow(STANDIN_REPO, "liger-bot-verify.yml", BRANCH, inputs)
    (run,) = github_standin.runs.values()
    assert run["title"] == "liger-bot verify 7" and run["ref"] == BRANCH and run_id == run["id"]
    github_standin.complete_run(run["id"], "success", {"liger-bot-report": {"report.json": b"{}"}})
    (latest,) = github_forge.workflow_runs(STANDIN_REPO, "liger-bot-verify.yml", BRANCH)
    assert (latest.id, latest.status, latest.conclusion) == (run["id"], "completed", "success")
    assert (latest.event, latest.actor, latest.head_sha) == ("workflow_dispatch", "liger-bot[bot]", run["sha"])
    assert github_forge.actor_login(STANDIN_REPO) == "liger-bot[bot]"
    archive = github_forge.download_artifact(STANDIN_REPO, run["id"], "liger-bot-report")
    assert archive.startswith(b"PK")
    assert github_forge.download_artifact(STANDIN_REPO, run["id"], "other") is None


def test_dispatch_answered_502_after_landing_is_not_sent_again(github_forge, github_standin, pushed_branch):
    github_standin.fail("POST", r"/dispatches$", 502, after=True)
    inputs = {"job_id": "8", "pipeline": "autopatch", "target": "nemotron"}
    github_forge.dispatch_workflow(STANDIN_REPO, "liger-bot-verify.yml", BRANCH, inputs)
    assert len(github_standin.runs) == 1
    assert github_standin.count("POST", r"/dispatches$") == 1


def test_dispatch_with_an_undeclared_input_is_refused(github_forge, github_standin, pushed_branch):
    with pytest.raises(ForgeError) as raised:
        github_forge.dispatch_workflow(
            STANDIN_REPO, "liger-bot-verify.yml", BRANCH, {"job_id": "1", "pipeline": "a", "target": "b", "evil": "x"}
        )
    assert raised.value.status == 422 and not github_standin.runs


def test_a_request_outside_the_rest_description_fails(github_forge, github_standin):
    """The stand-in's own guard: a body GitHub would reject gets a 4xx and is recorded as a violation."""
    with pytest.raises(ForgeError) as raised:
        github_forge._call(
            "bad",
            lambda: github_forge._api("POST", f"/repos/{STANDIN_REPO.full_name}/issues", body={"body": "no title"}),
        )
    assert raised.value.status == 422
    assert github_standin.violations
    github_standin.violations.clear()  # seen; the fixture would fail the test otherwise


# -- assets: a PR body's plot on the assets branch ---------------------------------------------------------------


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.read()


def test_plot_published_once_on_the_assets_branch_at_a_pinned_link(github_forge, github_standin, git_remote):
    repo = github_standin.repos[STANDIN_REPO.full_name]
    main = repo.ref_sha("heads/main")
    first = png(1)
    link = github_forge.publish_asset(STANDIN_REPO, "benchmark.png", first)

    digest = hashlib.sha256(first).hexdigest()[:16]
    commit = repo.ref_sha(f"heads/{ASSETS_BRANCH}")
    assert (
        link
        == f"{github_standin.url}/{STANDIN_REPO.full_name}/blob/{commit}/{ASSETS_DIR}/{digest}-benchmark.png?raw=true"
    )
    assert fetch(link) == first  # what a PR body's <img> loads
    # an orphan branch of a README and the plot: no copy of the code, so no workflow of the target runs on it
    assert repo.git("rev-list", "--count", commit).stdout.decode().strip() == "2"
    assert (
        repo.git("rev-list", "--max-parents=0", commit).stdout.decode().strip()
        != repo.git("rev-list", "--max-parents=0", main).stdout.decode().strip()
    )
    files = repo.git("ls-tree", "-r", "--name-only", commit).stdout.decode().split()
    assert sorted(files) == sorted(["README.md", f"{ASSETS_DIR}/{digest}-benchmark.png"])
    assert repo.ref_sha("heads/main") == main  # which it never touches

    # the same bytes again (a retried job): no upload, the same link
    assert github_forge.publish_asset(STANDIN_REPO, "benchmark.png", first) == link
    assert github_standin.count("PUT", r"/contents/") == 1 and github_standin.count("POST", r"/git/refs$") == 1

    # a new plot: a new commit on the branch; the old link still shows the old plot
    second = png(2)
    newer = github_forge.publish_asset(STANDIN_REPO, "benchmark.png", second)
    assert newer != link and fetch(newer) == second and fetch(link) == first
    assert github_standin.count("POST", r"/git/refs$") == 1  # the branch existed


def test_plot_upload_answered_502_after_it_landed_is_not_sent_again(github_forge, github_standin, git_remote):
    github_standin.fail("PUT", r"/contents/", 502, after=True)
    link = github_forge.publish_asset(STANDIN_REPO, "benchmark.png", png(3))
    assert fetch(link) == png(3)
    assert github_standin.count("PUT", r"/contents/") == 1


def test_unsafe_or_oversized_assets_are_refused_before_any_request(github_forge, github_standin, git_remote):
    requests_before = len(github_standin.log)
    refused = {
        "../benchmark.png": png(1),
        "plots/benchmark.png": png(1),
        ".benchmark.png": png(1),
        "benchmark.py": png(1),
        "benchmark.png": b"-----BEGIN PRIVATE KEY-----\n",  # not an image, whatever its name says
    }
    for name, data in refused.items():
        with pytest.raises(AssetRejected) as raised:
            github_forge.publish_asset(STANDIN_REPO, name, data)
        assert raised.value.status == 422, name
    too_big = png(1) + bytes(MAX_ASSET_BYTES)
    with pytest.raises(AssetRejected, match="the limit is 5 MiB") as raised:
        github_forge.publish_asset(STANDIN_REPO, "benchmark.png", too_big)
    assert raised.value.status == 413
    assert len(github_standin.log) == requests_before
    assert github_standin.repos[STANDIN_REPO.full_name].ref_sha(f"heads/{ASSETS_BRANCH}") is None


def test_publishing_logs_no_token(github_forge, github_standin, git_remote, caplog):
    caplog.set_level(logging.DEBUG)
    github_forge.publish_asset(STANDIN_REPO, "benchmark.png", png(4))
    assert "/contents/" in caplog.text  # PyGithub logged the upload
    for token in github_standin.tokens:
        assert token not in caplog.text
