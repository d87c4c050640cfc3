"""The provider through the real anthropic SDK against the Messages stand-in: streamed answers, priced, on the
ledger; the caps refuse before calling; a missing SDK names the install command."""

from __future__ import annotations

import builtins

import pytest

from pipelines.llm import client
from pipelines.llm.budget import MemoryLedger
from pipelines.llm.budget import OverBudget
from pipelines.llm.budget import Spend
from pipelines.llm.settings import Caps
from pipelines.llm.settings import LlmSettings
from pipelines.outcome import PipelineError
from tests.pipelines.llm.messages_standin import MessagesStandin
from tests.pipelines.llm.messages_standin import validate

SETTINGS = LlmSettings("anthropic", "claude-sonnet-4-5")
DEFAULT_CAPS = Caps()


def provider(standin, caps: Caps = DEFAULT_CAPS, day: Spend | None = None) -> client.Provider:
    settings = LlmSettings("anthropic", "claude-sonnet-4-5", caps)
    return client.Provider(settings, standin.api_key, MemoryLedger(caps, day), base_url=standin.url)


def test_a_streamed_answer_is_read_priced_and_recorded():
    long_answer = "a kernel " * 30  # several text deltas
    with MessagesStandin([long_answer]) as standin:
        p = provider(standin)
        answer = p.ask("you are terse", [{"role": "user", "content": "hello"}])
    standin.check()
    assert answer.text == long_answer and answer.stop_reason == "end_turn"
    assert answer.spend.calls == 1 and answer.spend.output_tokens == len(long_answer) // 4
    assert answer.spend.usd == pytest.approx((answer.spend.input_tokens * 3 + answer.spend.output_tokens * 15) / 1e6)
    assert p.ledger.job_spend() == answer.spend
    (sent,) = standin.requests
    assert sent["stream"] is True and sent["model"] == "claude-sonnet-4-5" and sent["system"] == "you are terse"


def test_the_standin_refuses_what_the_sdk_would_not_send():
    assert validate({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}) == ""
    assert "unknown keys" in validate({"model": "m", "max_tokens": 5, "messages": [], "shell": "rm -rf /"})
    assert "missing keys" in validate({"model": "m", "messages": []})
    assert validate({"model": "m", "max_tokens": "many", "messages": []})  # wrong type


def test_a_wrong_key_is_an_error_a_person_can_act_on():
    with MessagesStandin(api_key="right") as standin:
        p = client.Provider(SETTINGS, "wrong", MemoryLedger(Caps()), base_url=standin.url)
        with pytest.raises(PipelineError, match="AuthenticationError, HTTP 401"):
            p.ask("s", [{"role": "user", "content": "x"}])


def test_caps_refuse_before_any_call_and_bound_the_answer():
    caps = Caps(job_tokens=1_000, answer_tokens=500, day_usd=1.0)
    with MessagesStandin(["ok", "ok"]) as standin:
        p = provider(standin, caps)
        p.ask("s", [{"role": "user", "content": "x"}])
        assert standin.requests[0]["max_tokens"] == 500
        p.ledger.record(Spend(1, 990 - p.ledger.job_spend().tokens, 0, 0.0))  # 10 tokens left in the job
        p.ask("s", [{"role": "user", "content": "x"}])
        assert standin.requests[1]["max_tokens"] == 10
        with pytest.raises(OverBudget, match="job's token cap"):
            p.ask("s", [{"role": "user", "content": "x"}])
    assert len(standin.requests) == 2
    with MessagesStandin(["ok"]) as standin:  # the day's dollars were spent by other jobs of the repo
        with pytest.raises(OverBudget, match="daily cost cap"):
            provider(standin, caps, day=Spend(9, 0, 0, 1.0)).ask("s", [{"role": "user", "content": "x"}])
    assert standin.requests == []


def test_both_switches_are_needed():
    assert client.enabled(SETTINGS, "sk-test")
    assert not client.enabled(SETTINGS, "")
    assert not client.enabled(LlmSettings(), "sk-test")


def test_a_missing_sdk_names_the_install_command(monkeypatch):
    real_import = builtins.__import__

    def no_anthropic(name, *args, **kwargs):
        if name == "anthropic":
            raise ImportError("No module named 'anthropic'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_anthropic)
    with pytest.raises(PipelineError) as error:
        client.sdk()
    assert error.value.hint == "pip install liger-bot[llm]"
