"""The anthropic provider for one repository of the App: on only when the repo's `.github/liger-bot.yml` names it
(read from the default branch) AND the App's environment holds ANTHROPIC_API_KEY; every call on the database's
ledger. With either switch off this returns None and the bot behaves exactly as without the provider.
"""

from __future__ import annotations

from bot.config import RepoConfig
from bot.llm_usage import StoreLedger


def provider_for(runtime, repo: str, config: RepoConfig, job_id: int | None = None, purpose: str = "draft"):
    """A `pipelines.llm.client.Provider`, or None when the provider is off. Raises PipelineError (its hint names
    `pip install liger-bot[llm]`) when it is switched on but the SDK is missing."""
    from pipelines.llm import client

    if not client.enabled(config.llm, runtime.config.anthropic_api_key):
        return None
    ledger = StoreLedger(runtime.store, repo, config.llm.caps, job_id=job_id, purpose=purpose)
    base_url = runtime.config.anthropic_base_url or None
    return client.Provider(config.llm, runtime.config.anthropic_api_key, ledger, base_url=base_url)
