"""The one status comment of a job: rendered from the job row alone, edited in place as the job moves.

Its hidden marker lets a restarted worker find the comment it already posted, so a crash between "comment
created" and "id saved" never leads to a second status comment.
"""

from __future__ import annotations

import json

from bot.config import REPO_CONFIG_PATH
from bot.forge import redact
from bot.forge.base import Forge
from bot.forge.base import RepoRef
from bot.jobs import Job
from bot.jobs import JobState
from bot.runtime import marker
from pipelines.outcome import Report

STEPS = (
    (JobState.QUEUED, "queued"),
    (JobState.UNDERSTANDING, "understanding"),
    (JobState.AWAITING_APPROVAL, "waiting for approval"),
    (JobState.ACTING, "acting"),
    (JobState.VERIFYING, "verifying"),
    (JobState.PR_OPENED, "PR opened"),
)
HEADLINES = {
    JobState.QUEUED: "queued",
    JobState.UNDERSTANDING: "understanding the model",
    JobState.AWAITING_APPROVAL: "waiting for approval",
    JobState.ACTING: "writing the patch",
    JobState.VERIFYING: "verifying",
    JobState.PR_OPENED: "draft PR opened",
    JobState.DONE: "done",
    JobState.FAILED: "failed",
    JobState.CANCELLED: "cancelled",
}


def status_marker(job: Job) -> str:
    return marker("status", job.id)


def _cell(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("|", "\\|").replace("\n", " ")[:120]


def profile_table(profile: dict, pipeline: str = "autopatch") -> str:
    """The profile as its pipeline tabulates it (autopatch: the 12 decisions)."""
    from pipelines import registry

    return registry.profile_table(pipeline, profile)


def gate_table(gates: list[dict]) -> str:
    """The job's gate records as the one gate table (pipelines.outcome.Report)."""
    return Report.from_records(gates).table()


def _progress(job: Job, state: JobState) -> str:
    """Done steps ticked, the current one bold, a step the job went around (the checkpoint of an autonomous
    repo) struck through."""
    order = [s for s, _ in STEPS]
    reached = order.index(state) if state in order else -1
    skipped = {JobState.AWAITING_APPROVAL} if (job.result or {}).get("approval") == "skipped" else set()
    marks = []
    for index, (step, words) in enumerate(STEPS):
        if step in skipped and index < reached:
            marks.append(f"~~{words}~~")
        elif index < reached:
            marks.append(f"✓ {words}")
        else:
            marks.append(f"**{words}**" if index == reached else words)
    return " → ".join(marks)


def _details(job: Job, state: JobState) -> list[str]:
    parts: list[str] = []
    result = job.result or {}
    if job.profile and state in (JobState.AWAITING_APPROVAL, JobState.ACTING, JobState.VERIFYING, JobState.PR_OPENED):
        review = job.profile.get("needs_review") or []
        table = profile_table(job.profile, job.verb)
        parts.append("<details open><summary>profile</summary>\n\n" + table + "\n\n</details>")
        if review:
            parts.append("Needs review: " + ", ".join(f"`{k}`" for k in review))
    if job.overrides:
        parts.append("Overrides: " + ", ".join(f"`{o}`" for o in job.overrides))
    if result.get("config_problems"):
        shown = "; ".join(f"`{_code(p)}`" for p in result["config_problems"])
        parts.append(f"`{REPO_CONFIG_PATH}` has problems, so defaults are used for them: {shown}")
    if result.get("gates"):
        parts.append(gate_table(result["gates"]))
    if result.get("llm"):
        parts.append(llm_report(result["llm"]))
    if result.get("explanation"):
        parts.append(explanation(result["explanation"]))
    if result.get("summary"):
        parts.append(result["summary"])
    if state is JobState.PR_OPENED and job.pr_number:
        parts.append(f"Draft PR #{job.pr_number} ({job.pr_url}) from `{job.branch}`.")
    if job.message:
        parts.append(job.message)
    if job.next_command:
        parts.append(f"Next: `{job.next_command}`")
    return parts


def llm_report(report: dict) -> str:
    """What the anthropic provider did for the job and what it cost, against the caps (the job's, the repo's day)."""
    caps, spend, day = report.get("caps") or {}, report.get("spend") or {}, report.get("day") or {}
    drafts = []
    for attempt in report.get("attempts") or []:
        failing = next((g for g in attempt["gates"] if g["status"] == "FAIL"), None)
        drafts.append(f"draft {attempt['number']}: " + (f"{_cell(failing['name'])} FAIL" if failing else "passed"))
    tokens = spend.get("input_tokens", 0) + spend.get("output_tokens", 0)
    day_tokens = day.get("input_tokens", 0) + day.get("output_tokens", 0)
    return (
        f"**anthropic provider** (`{_code(report.get('model', ''))}`): {'; '.join(drafts) or 'no draft'}. "
        f"{_code(report.get('stop', ''))}.\n\n"
        f"Cost: {spend.get('calls', 0)} calls, {tokens:,} tokens ({spend.get('input_tokens', 0):,} in, "
        f"{spend.get('output_tokens', 0):,} out), ${spend.get('usd', 0):.4f}; caps per job: {caps.get('attempts')} drafts, "
        f"{caps.get('job_tokens', 0):,} tokens, ${caps.get('job_usd', 0):.2f}. This repository today: "
        f"{day_tokens:,} of {caps.get('day_tokens', 0):,} tokens, ${day.get('usd', 0):.4f} of ${caps.get('day_usd', 0):.2f}."
    )


def explanation(text: str) -> str:
    return f"**In plain words** (the anthropic provider): {_plain(text)}"


def _plain(text: str) -> str:
    """The model's explanation as plain text: no markup, no mention, no command can come of it."""
    text = " ".join(str(text).split())[:1200]
    return text.replace("`", "'").replace("@", "@\u200b").replace("<", "&lt;").replace("/liger", "/\u200bliger")


def _code(text: str) -> str:
    """Text from the target repository shown as inline code: no backtick or line break can end it early."""
    return str(text).replace("`", "'").replace("\n", " ")[:200]


def note_config_problems(store, job: Job, problems) -> Job:
    """Keep the repo config's problems on the job: its status comment shows them once, however often it is read."""
    problems = list(problems)
    if list((job.result or {}).get("config_problems") or []) == problems:
        return job
    return store.update(job.id, result={**(job.result or {}), "config_problems": problems})


def render(job: Job) -> str:
    state = JobState(job.state)
    title = f"### liger-bot {job.verb}" + (f" `{job.target}`" if job.target else "") + f": {HEADLINES[state]}"
    lines = [title, "", _progress(job, state) if state in dict(STEPS) else f"**{state.value}**", ""]
    lines += [part + "\n" for part in _details(job, state)]
    lines.append(f"<sub>job {job.id} · requested by @{job.requested_by}</sub>")
    lines.append(status_marker(job))
    return "\n".join(lines)


def publish(forge: Forge, store, job: Job) -> int:
    """Create or edit the job's one status comment; returns its id (saved on the job)."""
    repo = RepoRef(*job.repo.split("/", 1))
    body = redact.redact(render(job))  # a stage's error text is the target's output: never a secret in it
    comment_id = job.status_comment_id or forge.find_comment(repo, job.thread, status_marker(job))
    if comment_id is None:
        comment_id = forge.create_comment(repo, job.thread, body)
    else:
        forge.edit_comment(repo, comment_id, body)
    if comment_id != job.status_comment_id:
        store.update(job.id, status_comment_id=comment_id)
        job.status_comment_id = comment_id
    return comment_id
