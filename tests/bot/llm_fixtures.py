"""The anthropic provider switched on for the App under test: the Messages stand-in, the App's key and base URL,
and the repo's `llm:` config on the default branch. Use with `from tests.bot.llm_fixtures import standin`."""

from __future__ import annotations

import dataclasses

import pytest

from bot.config import REPO_CONFIG_PATH
from tests.pipelines.llm.messages_standin import MessagesStandin

LLM_CONFIG = "llm:\n  provider: anthropic\n  model: claude-haiku-4-5\n  budget: {day_usd: 5}\n"


@pytest.fixture
def standin():
    with MessagesStandin() as running:
        yield running
    running.check()


def with_provider(app, standin, config: str | None = LLM_CONFIG) -> None:
    runtime = app.runtime
    runtime.config = dataclasses.replace(
        runtime.config, anthropic_api_key=standin.api_key, anthropic_base_url=standin.url
    )
    if config is not None:
        app.forge.set_file(REPO_CONFIG_PATH, config)
