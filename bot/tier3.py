"""`/liger kernel` past the deterministic engine: the provider drafts a tier-3 kernel, the stage child judges it.

The loop runs in the worker, which holds ANTHROPIC_API_KEY; the model's code crosses to the stage child as a
Request option and is written and verified there (pipelines.kernel.job.draft_attempt), with no secret in reach.
Each failing draft's gate output goes back to the model, within the repo's caps (attempts, tokens and dollars per
job and per repository per day: bot.llm_usage). The spend and the attempts are kept on the job for its status
comment. With the provider off nothing here changes the kernel flow: understand refuses tier 3 as before.
"""

from __future__ import annotations

import dataclasses

from bot.provider import provider_for
from bot.status import llm_report
from pipelines.contract import DRAFT
from pipelines.contract import TIER3_DRAFTS
from pipelines.contract import Outcome
from pipelines.contract import Pipeline
from pipelines.contract import Request
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.pull_request import BodyParts


def is_draft_job(job) -> bool:
    return job.verb == "kernel" and bool((job.profile or {}).get("drafted_by"))


def allow_drafts(worker, job, request: Request) -> Request:
    """Understand may hand tier 3 to the provider only where the provider is on for this repo."""
    if job.verb != "kernel" or not worker.runtime.config.anthropic_api_key:
        return request
    if not worker.repo_config(job).llm.configured:
        return request
    return dataclasses.replace(request, options={**request.options, TIER3_DRAFTS: "on"})


def act_verify(worker, job, pipeline: Pipeline, request: Request, progress) -> Outcome:
    if not is_draft_job(job):
        return pipeline.act_verify(request, progress)
    from pipelines.kernel.spec import pascal
    from pipelines.llm import prompts
    from pipelines.llm.repair import repair_loop

    config = worker.repo_config(job)
    provider = provider_for(worker.runtime, job.repo, config, job_id=job.id, purpose="draft")
    if provider is None:  # switched off since understand: say so rather than draft without a budget
        return _refused(job, "the provider is off now (no ANTHROPIC_API_KEY, or no `llm:` in the repo's config)")
    outcomes: list[Outcome] = []

    def try_draft(code: str) -> list[GateResult]:
        outcome = pipeline.act_verify(dataclasses.replace(request, options={**request.options, DRAFT: code}), progress)
        outcomes.append(outcome)
        return list(outcome.gates)

    profile = job.profile
    name = profile["operation_name"]
    system = prompts.draft_system(name, pascal(name))
    first = prompts.draft_first(profile["reference_code"], profile["refusal"], name)
    run = repair_loop(provider, system, first, try_draft, config.llm.caps.attempts)
    report = {**run.to_json(), "model": config.llm.model, "caps": config.llm.caps.to_json()}
    report["day"] = provider.ledger.day_spend().to_json()
    worker.store.update(job.id, result={**(worker.store.get(job.id).result or {}), "llm": report})
    if not outcomes:
        return _refused(job, run.stop)
    last = outcomes[-1]
    pr = dataclasses.replace(last.pr or BodyParts(""), summary=pr_summary(job, report))
    return dataclasses.replace(last, ok=run.ok, profile=profile, pr=pr)


def pr_summary(job, report: dict) -> str:
    """What a reviewer of the PR needs first: the engine refused this op, a model drafted it, the bot tested it."""
    profile = job.profile
    return (
        f"A tier-3 kernel for `{job.target}`, which liger-bot's deterministic engine refuses: "
        f"{profile['refusal']}\n\nThe ops file (`src/liger_kernel/ops/{profile['operation_name']}.py`) was drafted by "
        "the anthropic provider and repaired against the failing gates' output; the test is liger-bot's (the traced "
        "reference, forward and backward). Review the kernel as you would a contributor's.\n\n" + llm_report(report)
    )


def _refused(job, why: str) -> Outcome:
    gate = GateResult("tier-3 draft", GateStatus.FAIL, why)
    return Outcome("", [gate], [], "", None, False, profile=job.profile)
