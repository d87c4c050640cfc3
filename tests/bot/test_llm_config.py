"""The provider's switches and secrets: the repo's `llm:` block (parsed like the rest of the file), the App's
ANTHROPIC_API_KEY held in its config, redacted, dropped from the environment and never passed to a stage child."""

from __future__ import annotations

from bot.config import hide_secrets_from_children
from bot.config import load_config
from bot.config import parse_repo_config
from bot.forge import redact
from pipelines.llm.settings import Caps
from pipelines.subprocesses import allowed_env

KEY = "sk-ant-api03-standin-key-0123456789"


def test_the_llm_block_and_its_caps():
    config = parse_repo_config(
        "llm:\n  provider: anthropic\n  model: claude-opus-4-5\n  explain: false\n"
        "  budget: {attempts: 2, job_usd: 0.5, day_tokens: 1000}\n"
    )
    assert config.problems == ()
    assert config.llm.configured and config.llm.model == "claude-opus-4-5" and not config.llm.explain
    assert config.llm.caps == Caps(attempts=2, job_usd=0.5, day_tokens=1000)
    assert config.llm.price() == (5.0, 25.0)


def test_a_bad_llm_block_leaves_the_provider_off_or_the_defaults_with_the_problems_listed():
    assert not parse_repo_config("autonomous: true\n").llm.configured  # absent: off
    off = parse_repo_config("llm:\n  provider: openai\n")
    assert not off.llm.configured and "llm.provider must be one of anthropic" in off.problems[0]
    odd = parse_repo_config("llm:\n  provider: anthropic\n  budget: {attempts: -1, day_usd: lots, shell: 1}\n")
    assert odd.llm.configured and odd.llm.caps == Caps()
    assert len(odd.problems) == 3 and any("unknown key ignored: shell" in p for p in odd.problems)
    assert parse_repo_config("llm:\n  provider: anthropic\n  model: unheard-of\n").llm.price() == (15.0, 75.0)


def test_the_key_is_held_redacted_hidden_from_the_environment_and_never_allow_listed():
    env = {"WEBHOOK_SECRET": "s" * 20, "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}
    config = load_config(env)
    assert config.anthropic_api_key == KEY and config.anthropic_base_url == "http://127.0.0.1:9"
    assert KEY not in repr(config)
    assert KEY not in redact.redact(f"the API said: bad key {KEY}")
    environ = dict(env)
    assert "ANTHROPIC_API_KEY" in hide_secrets_from_children(environ) and "ANTHROPIC_API_KEY" not in environ
    assert "ANTHROPIC_API_KEY" not in allowed_env(env)  # a stage child's environment, from the allow-list
