"""Scan: one dashboard issue for every causal LM of the installed transformers, classified as autopatch would treat
it (pipelines/autopatch/scan.py: supported, patchable, partial, needs review, refused). The dashboard is found by its
title and edited in place; a checkbox per patchable or partial model starts `/liger autopatch` for it when ticked,
within the repo's PR limits.
"""

from __future__ import annotations

import re
import time

from pipelines.autopatch.scan import STARTABLE
from pipelines.autopatch.scan import Row
from pipelines.autopatch.scan import Verdict
from pipelines.autopatch.scan import counts
from pipelines.contract import BRANCH_PREFIX

DASHBOARD_TITLE = "liger-bot dashboard"
DASHBOARD_MARKER = "<!-- liger-bot:dashboard -->"
_CHECKBOX_RE = re.compile(r"^- \[(?P<mark>[ xX])\] `(?P<model>[A-Za-z0-9._-]+)`", re.MULTILINE)


# --- the dashboard issue ----------------------------------------------------------------------------------


def ticked(body: str | None) -> set[str]:
    return {m["model"] for m in _CHECKBOX_RE.finditer(body or "") if m["mark"] in "xX"}


def newly_ticked(before: str | None, after: str | None) -> list[str]:
    """Models whose box is ticked in `after` and was not in `before` (in the order they appear)."""
    was = ticked(before)
    return [m["model"] for m in _CHECKBOX_RE.finditer(after or "") if m["mark"] in "xX" and m["model"] not in was]


def _escape(text: str, limit: int = 300) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:limit]


def render_dashboard(
    rows: list[Row], started: dict[str, str], limits: tuple[int, int], when: float | None = None
) -> str:
    """`started`: model -> a note ("job 4", "PR #12") for models whose box was ticked and acted on."""
    per_hour, max_open = limits
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(when or time.time()))
    summary = ", ".join(f"{n} {verdict}" for verdict, n in counts(rows).items())
    lines = [DASHBOARD_MARKER, f"## {DASHBOARD_TITLE}", "", f"Scanned {stamp}: {summary}.", ""]
    lines += [
        f"Tick a box to start `/liger autopatch` for that model (at most {per_hour} new PRs per hour and "
        f"{max_open} open at once; the rest wait for the next scan).",
        "",
    ]
    headings = {
        Verdict.PATCHABLE: "Patchable (every kernel the model has)",
        Verdict.PARTIAL: "Partial (kernels left out: why, and the command that adds each)",
    }
    for verdict in STARTABLE:
        lines += [f"### {headings[verdict]}", ""]
        for row in (r for r in rows if r.verdict is verdict):
            note = started.get(row.model_type)
            line = f"- [{'x' if note else ' '}] `{row.model_type}` {row.causal_lm_class}" + (
                f" ({note})" if note else ""
            )
            lines.append(line + (f": {_escape(row.reason, 600)}" if verdict is Verdict.PARTIAL else ""))
        lines.append("")
    for verdict, heading in ((Verdict.NEEDS_REVIEW, "Needs review"), (Verdict.REFUSED, "Refused")):
        chosen = [r for r in rows if r.verdict is verdict]
        lines += ["", f"### {heading} ({len(chosen)})", "", "| model | class | reason |", "|---|---|---|"]
        lines += [f"| `{r.model_type}` | {r.causal_lm_class} | {_escape(r.reason)} |" for r in chosen]
    supported = [f"`{r.model_type}`" for r in rows if r.verdict is Verdict.SUPPORTED]
    lines += [
        "",
        f"<details><summary>Supported already ({len(supported)})</summary>",
        "",
        ", ".join(supported),
        "</details>",
    ]
    return "\n".join(lines) + "\n"


def pr_budget(store, forge, repo, config, active_dashboard_jobs: int) -> int:
    """How many more autopatch PRs may start now: N per hour and M open at once (`.github/liger-bot.yml`)."""
    opened_last_hour = store.prs_opened_since(repo.full_name, time.time() - 3600)
    open_now = len(forge.open_pull_requests(repo, BRANCH_PREFIX))
    return max(0, min(config.prs_per_hour - opened_last_hour, config.max_open_prs - open_now) - active_dashboard_jobs)
