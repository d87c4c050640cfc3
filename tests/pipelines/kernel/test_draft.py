"""Tier 3 with the provider: the real anthropic SDK against the Messages stand-in, scripted drafts, the real gates
(the target's ruff, the bot's test under TRITON_INTERPRET=1) on a real Liger-Kernel checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.kernel import draft
from pipelines.kernel import spec as spec_mod
from pipelines.kernel import understand as understand_mod
from pipelines.llm import client
from pipelines.llm.budget import MemoryLedger
from pipelines.llm.repair import extract_code
from pipelines.llm.repair import repair_loop
from pipelines.llm.settings import Caps
from pipelines.llm.settings import LlmSettings
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from tests.pipelines.llm.messages_standin import MessagesStandin

RIGHT = (Path(__file__).parent / "drafts" / "centered_right.py").read_text()
WRONG = "import math\n" + RIGHT  # an unused import: the target's ruff refuses it
CENTERED = "import torch\n\n\ndef centered(x):\n    return x - x.mean(0, keepdim=True)\n"


def fenced(code: str) -> str:
    return f"Here is the kernel.\n\n```python\n{code}```\n"


def provider(standin, caps: Caps) -> client.Provider:
    return client.Provider(LlmSettings("anthropic", caps=caps), standin.api_key, MemoryLedger(caps), standin.url)


def test_a_wrong_draft_fails_a_gate_its_output_goes_back_and_the_repaired_one_is_committed(liger_checkout):
    op = liger_checkout.root.parent / "centered.py"
    op.write_text(CENTERED)
    spec = spec_mod.resolve(f"{op}:centered", liger_checkout.root, None)
    u = understand_mod.understand(spec, liger_checkout.root)
    assert u.tier == understand_mod.Tier.COMPLEX
    lines: list[str] = []
    with MessagesStandin([fenced(WRONG), fenced(RIGHT)]) as standin:
        p = provider(standin, Caps(attempts=3))
        run, branch = draft.run(liger_checkout, u, p, attempts=3, progress=lines.append)
    standin.check()
    assert run.ok and [a.number for a in run.attempts] == [1, 2], run.to_json()
    first, second = run.attempts
    assert first.failing.name == "checkstyle" and "F401" in first.failing.detail
    assert {g.name: g.status for g in second.gates}["unit tests (CPU, TRITON_INTERPRET=1)"] is GateStatus.PASS
    ask, repair = standin.requests
    assert "x.mean(0, keepdim=True)" in ask["messages"][0]["content"]
    assert "only the last dimension is row-wise" in ask["messages"][0]["content"]  # the refusal's reason
    assert ask["system"].startswith("You write Triton kernels for Liger-Kernel")
    assert "`checkstyle` failed" in repair["messages"][-1]["content"] and "F401" in repair["messages"][-1]["content"]
    assert repair["messages"][1]["role"] == "assistant"  # the failing draft, so the model repairs its own file
    assert run.spend == p.ledger.job_spend() and run.spend.calls == 2 and run.spend.usd > 0
    assert branch == "liger-bot/kernel-centered" and liger_checkout.git.current_branch() == branch
    assert liger_checkout.git.dirty_paths() == []
    assert liger_checkout.path("src/liger_kernel/ops/centered.py").read_text() == RIGHT
    assert any("unit tests (CPU, TRITON_INTERPRET=1): PASS" in line for line in lines)


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
