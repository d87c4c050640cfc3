"""The repair loop with the real anthropic SDK against the Messages stand-in: the caps stop it, a failing gate's output
goes back, an answer without one code block is no file. The whole tier-3 flow through the App, its stage child and
the real gates is tests/bot/test_tier3_flow.py (its scripted drafts live here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.llm import client
from pipelines.llm.budget import MemoryLedger
from pipelines.llm.repair import extract_code
from pipelines.llm.repair import repair_loop
from pipelines.llm.settings import Caps
from pipelines.llm.settings import LlmSettings
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from tests.pipelines.llm.messages_standin import MessagesStandin

# a .txt: our own ruff would sort its imports by our config, not by the target's
RIGHT = (Path(__file__).parent / "drafts" / "centered_right.py.txt").read_text()
WRONG = "import math\n" + RIGHT  # an unused import: the target's ruff refuses it
CENTERED = "import torch\n\n\ndef centered(x):\n    return x - x.mean(0, keepdim=True)\n"


def fenced(code: str) -> str:
    return f"Here is the kernel.\n\n```python\n{code}```\n"


def provider(standin, caps: Caps) -> client.Provider:
    return client.Provider(LlmSettings("anthropic", caps=caps), standin.api_key, MemoryLedger(caps), standin.url)


def failing_gate(_code: str) -> list[GateResult]:
    return [GateResult("unit tests (CPU, TRITON_INTERPRET=1)", GateStatus.FAIL, "AssertionError: mismatch at [0, 3]")]


def test_the_attempts_cap_stops_the_loop():
    with MessagesStandin([fenced(WRONG)] * 5) as standin:
        run = repair_loop(provider(standin, Caps()), "system", "write it", failing_gate, attempts=2)
    assert not run.ok and len(run.attempts) == 2 and len(standin.requests) == 2
    assert "attempts cap" in run.stop
    assert "mismatch at [0, 3]" in standin.requests[1]["messages"][-1]["content"]


@pytest.mark.parametrize(
    ("caps", "stop"),
    [(Caps(job_tokens=600), "job's token cap"), (Caps(job_usd=0.004), "job's cost cap")],
)
def test_the_token_and_cost_caps_stop_the_loop_before_calling_again(caps, stop):
    with MessagesStandin([fenced(WRONG)] * 5) as standin:
        run = repair_loop(provider(standin, caps), "system", "write it", failing_gate, attempts=5)
    assert not run.ok and stop in run.stop and len(run.attempts) == len(standin.requests) < 5
    assert run.spend.tokens >= caps.job_tokens or run.spend.usd >= caps.job_usd


def test_an_answer_without_one_code_block_is_a_failed_draft_not_a_file():
    assert extract_code("no code here") is None
    assert extract_code("```python\na = 1\n```\n```python\nb = 2\n```") is None
    with MessagesStandin(["rm -rf / (no block)", fenced("x = 1\n")]) as standin:
        seen: list[str] = []
        run = repair_loop(provider(standin, Caps()), "s", "p", lambda code: seen.append(code) or [], attempts=2)
    assert seen == ["x = 1\n"] and run.ok and run.attempts[0].failing.name == "draft"


def test_an_api_failure_stops_the_loop_with_the_reason():
    with MessagesStandin(api_key="the-real-one") as standin:
        p = client.Provider(LlmSettings("anthropic"), "a-wrong-one", MemoryLedger(Caps()), standin.url)
        run = repair_loop(p, "s", "p", failing_gate, attempts=3)
    assert not run.ok and run.attempts == [] and "AuthenticationError, HTTP 401" in run.stop
