"""Plain-language notes from the anthropic provider: what a `needs review` decision or a failing gate means, kept
on the job (`result["explanation"]`) for its status comment and PR body.

Optional in every way: off with the provider, off with `llm.explain: false`, and a refusal of the API or a spent
budget only means no note (the job goes on as it would without one). The note is shown as plain text
(bot.status._plain), never as markup or a command.
"""

from __future__ import annotations

import json
import logging

from bot.provider import provider_for
from pipelines.llm.budget import OverBudget
from pipelines.outcome import GateResult
from pipelines.outcome import PipelineError

EXPLANATION_TOKENS = 400
log = logging.getLogger(__name__)


def _needs_review(profile: dict | None) -> dict[str, str]:
    profile = profile or {}
    decisions = profile.get("decisions") or {}
    return {
        str(key): json.dumps(decisions.get(key, profile.get(key, "")))[:600]
        for key in profile.get("needs_review") or []
    }


def explain(worker, job, failing: tuple[GateResult, ...] = ()):
    """The job with an explanation added where the provider is on and there is something to explain."""
    needs = _needs_review(job.profile)
    gates = {gate.name: gate.detail for gate in failing}
    if not (needs or gates) or not worker.runtime.config.anthropic_api_key:
        return job
    config = worker.repo_config(job)
    if not config.llm.explain:
        return job
    from pipelines.llm import prompts

    try:
        provider = provider_for(worker.runtime, job.repo, config, job_id=job.id, purpose="explain")
        if provider is None:
            return job
        answer = provider.ask(prompts.EXPLAIN_SYSTEM, prompts.explain_messages(needs, gates), EXPLANATION_TOKENS)
    except (OverBudget, PipelineError) as exc:
        log.info("job %s: no explanation: %s", job.id, exc)
        return job
    current = worker.store.get(job.id)
    return worker.store.update(job.id, result={**(current.result or {}), "explanation": answer.text})
