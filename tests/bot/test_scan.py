"""`/liger scan`: every causal LM of the installed transformers against the target's real registry, one
dashboard issue edited in place, and ticked boxes starting autopatch within the PR limits."""

from __future__ import annotations

import copy

import pytest

from bot.jobs import JobState
from bot.scan import DASHBOARD_TITLE
from bot.scan import newly_ticked
from pipelines.autopatch.scan import Verdict
from pipelines.autopatch.scan import causal_lms
from pipelines.autopatch.supported import supported_models
from tests.bot.app_fixtures import MAINTAINER
from tests.bot.app_fixtures import comment_payload
from tests.bot.app_fixtures import fixture_payload


def say(server, app, body: str):
    server.deliver("issue_comment", comment_payload(body))
    app.drain()


def dashboard(app) -> tuple[int, str]:
    (issue,) = [i for i in app.forge.state["issues"].values() if i["title"] == DASHBOARD_TITLE]
    return issue["number"], issue["body"]


def tick(body: str, *models: str) -> str:
    for model in models:
        body = body.replace(f"- [ ] `{model}`", f"- [x] `{model}`")
    return body


def edit_dashboard(server, app, before: str, after: str, login: str = MAINTAINER) -> None:
    number, _ = dashboard(app)
    payload = copy.deepcopy(fixture_payload("issues.edited"))
    payload["issue"].update(number=number, title=DASHBOARD_TITLE, body=after)
    payload["changes"] = {"body": {"from": before}}
    payload["sender"].update(login=login, type="User")
    assert server.deliver("issues", payload).status_code == 202
    app.drain()


def test_scan_classifies_every_causal_lm_against_the_registry(server, app, liger_checkout):
    say(server, app, "/liger scan")
    (job,) = app.jobs()
    assert job.job_state is JobState.DONE
    rows = {row["model_type"]: row for row in job.result["rows"]}
    assert set(rows) == set(causal_lms())
    supported = set(supported_models(liger_checkout.monkey_patch))
    assert {m for m, r in rows.items() if r["verdict"] == Verdict.SUPPORTED.value} == supported & set(rows)
    assert rows["llama"]["reason"] == "apply_liger_kernel_to_llama"
    # a decision left for review that act can leave out: a partial patch, saying what is left out and how to add it
    xglm = rows["xglm"]
    assert xglm["verdict"] == "partial" and "Left out: RoPE" in xglm["reason"], xglm
    assert "/liger set rope=standard" in xglm["reason"]
    assert rows["qwen3_next"]["verdict"] == "supported"
    assert rows["bert-generation"]["verdict"] == "refused" and "not a decoder-only" in rows["bert-generation"]["reason"]
    _, body = dashboard(app)
    startable = [r for r in rows.values() if r["verdict"] in ("patchable", "partial")]
    assert startable and all(f"- [ ] `{r['model_type']}` {r['class']}" in body for r in startable)
    assert f"- [ ] `xglm` {xglm['class']}: Left out: RoPE" in body
    assert "- [ ] `llama`" not in body  # supported models get no checkbox
    assert body.count("- [ ] `") == len(startable)

    say(server, app, "/liger scan")  # a second scan edits the same issue
    assert len([i for i in app.forge.state["issues"].values() if i["title"] == DASHBOARD_TITLE]) == 1


@pytest.mark.slow
def test_ticking_boxes_starts_autopatch_within_the_pr_limits(server, app):
    app.forge.set_file(".github/liger-bot.yml", "limits: {prs_per_hour: 1, open_prs: 5}\n")
    say(server, app, "/liger scan")
    _, body = dashboard(app)
    patchable = [line.split("`")[1] for line in body.splitlines() if line.startswith("- [ ] `")]
    first, second = patchable[:2]
    edit_dashboard(server, app, body, tick(body, first, second))
    dashboard_jobs = [job for job in app.jobs() if job.scope]
    assert [(job.target, job.job_state) for job in dashboard_jobs] == [(first, JobState.PR_OPENED)]
    replies = [c["body"] for c in app.forge.comments() if "liger-bot:reply" in c["body"]]
    assert len(replies) == 1 and f"`{second}`" in replies[0] and "PR limits" in replies[0]

    say(server, app, "/liger scan")  # the re-rendered dashboard keeps the started box ticked, with its PR
    _, body = dashboard(app)
    assert f"- [x] `{first}`" in body and "(PR #" in body


def test_dashboard_edits_by_outsiders_or_bots_start_nothing(server, app):
    say(server, app, "/liger scan")
    _, body = dashboard(app)
    model = next(line.split("`")[1] for line in body.splitlines() if line.startswith("- [ ] `"))
    edit_dashboard(server, app, body, tick(body, model), login="curious-reader")
    edit_dashboard(server, app, body, tick(body, model), login="liger-bot[bot]")
    assert [job.verb for job in app.jobs()] == ["scan"]


def test_newly_ticked_compares_before_and_after():
    before = "- [x] `a` A\n- [ ] `b` B\n- [ ] `c` C"
    assert newly_ticked(before, "- [x] `a` A\n- [X] `b` B\n- [ ] `c` C") == ["b"]
    assert newly_ticked(None, "- [x] `a` A") == ["a"]
