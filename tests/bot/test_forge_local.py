"""The local forge: PRs, comments and issues as files beside a real checkout."""

from __future__ import annotations

import json
import subprocess

import pytest

from bot.forge.assets import MAX_ASSET_BYTES
from bot.forge.base import AssetRejected
from bot.forge.base import ForgeError
from bot.forge.base import Permission
from bot.forge.base import RepoRef
from bot.forge.local import LocalForge
from pipelines.git import Git
from tests.bot.test_assets import png

REPO = RepoRef("local", "liger-kernel")
BRANCH = "liger-bot/autopatch-nemotron"


@pytest.fixture
def checkout(tmp_path):
    path = tmp_path / "liger-kernel"
    path.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    (path / "README.md").write_text("# Liger\n")
    git = Git(path)
    git.commit_all("initial")
    git.checkout(BRANCH, create_from="main")
    (path / "patch.py").write_text("x = 1\n")
    git.commit_all("autopatch")
    return path


def test_pull_request_written_out_and_found_again_by_branch(checkout):
    forge = LocalForge(checkout)
    first = forge.ensure_pull_request(REPO, BRANCH, "main", "Autopatch Nemotron", "| gate | PASS |")
    second = forge.ensure_pull_request(REPO, BRANCH, "main", "Autopatch Nemotron", "| gate | FAIL |")
    assert first.number == second.number and second.draft
    markdown = (checkout.parent / "liger-kernel.liger-bot" / "issues" / f"{first.number}.md").read_text()
    assert markdown.startswith("# Autopatch Nemotron") and "| gate | FAIL |" in markdown
    assert forge.find_pull_request(REPO, BRANCH) == second
    assert forge.find_pull_request(REPO, "liger-bot/other") is None
    assert forge.open_pull_requests(REPO, "liger-bot/") == [second]
    assert forge.open_pull_requests(REPO, "renovate/") == []


def test_comments_issues_and_reactions_are_files(checkout):
    forge = LocalForge(checkout)
    issue = forge.create_issue(REPO, "liger-bot dashboard", "- [ ] nemotron")
    pull = forge.ensure_pull_request(REPO, BRANCH, "main", "t", "b")
    assert pull.number != issue  # shared numbering, as on GitHub
    comment = forge.create_comment(REPO, issue, "queued <!-- liger-bot:status job=1 -->")
    assert forge.create_comment(REPO, issue, "again <!-- liger-bot:status job=1 -->") == comment
    forge.edit_comment(REPO, comment, "done <!-- liger-bot:status job=1 -->")
    forge.edit_issue(REPO, issue, "- [x] nemotron")
    forge.add_reaction(REPO, comment, "eyes")
    state = checkout.parent / "liger-kernel.liger-bot"
    assert (state / "comments" / f"{comment}.md").read_text().startswith("done")
    assert forge.find_issue(REPO, "liger-bot dashboard") == issue
    assert "[x]" in (state / "issues" / f"{issue}.md").read_text()
    assert json.loads((state / "reactions.jsonl").read_text()) == {
        "comment": comment,
        "content": "eyes",
        "review_comment": False,
    }
    with pytest.raises(ForgeError):
        forge.edit_comment(REPO, 999, "x")


def test_git_facts_come_from_the_checkout(checkout):
    forge = LocalForge(checkout)
    assert forge.permission(REPO, "anyone") is Permission.ADMIN
    assert forge.default_branch(REPO) == "main"
    assert forge.branch_head(REPO, BRANCH) == Git(checkout).head()
    assert forge.branch_head(REPO, "nope") is None
    assert forge.read_file(REPO, "patch.py", BRANCH) == "x = 1\n"
    assert forge.read_file(REPO, "patch.py", "main") is None
    assert forge.push_credentials(REPO) is None
    assert forge.clone_url(REPO) == str(checkout.resolve())
    with pytest.raises(ForgeError):
        forge.dispatch_workflow(REPO, "liger-bot-verify.yml", BRANCH, {})


def test_a_published_plot_is_a_file_the_pr_markdown_links(checkout):
    forge = LocalForge(checkout)
    link = forge.publish_asset(REPO, "benchmark.png", png(1))
    pull = forge.ensure_pull_request(REPO, BRANCH, "main", "Add LigerReLU2", f"![benchmark]({link})")
    markdown = checkout.parent / "liger-kernel.liger-bot" / "issues" / f"{pull.number}.md"
    assert f"![benchmark]({link})" in markdown.read_text()
    assert (markdown.parent / link).resolve().read_bytes() == png(1)
    assert forge.publish_asset(REPO, "benchmark.png", png(1)) == link  # content-addressed: stored once
    assert forge.publish_asset(REPO, "benchmark.png", png(2)) != link
    assert len(list((checkout.parent / "liger-kernel.liger-bot" / "assets").iterdir())) == 2
    with pytest.raises(AssetRejected):
        forge.publish_asset(REPO, "../../escape.png", png(1))
    with pytest.raises(AssetRejected):
        forge.publish_asset(REPO, "benchmark.png", png(1) + bytes(MAX_ASSET_BYTES))
    assert not (checkout.parent / "escape.png").exists()
