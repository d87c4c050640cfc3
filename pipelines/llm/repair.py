"""The bounded repair loop: the model drafts a file, the gates judge it, the failing gate's output goes back.

The loop knows nothing of kernels or sandboxes: `try_draft(code)` writes the draft where the caller decides and runs
the caller's gates (in the App: the stage child's, away from every secret). It stops at the first draft whose hard
gates all pass, after `attempts` drafts, when the ledger refuses another call, or when the API fails; each stop
says why.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

from pipelines.llm import prompts
from pipelines.llm.budget import OverBudget
from pipelines.llm.budget import Spend
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError

_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
TryDraft = Callable[[str], list[GateResult]]


@dataclass(frozen=True)
class Attempt:
    number: int
    gates: list[GateResult]
    spend: Spend

    @property
    def failing(self) -> GateResult | None:
        return next((g for g in self.gates if g.status is GateStatus.FAIL and g.hard), None)


@dataclass
class RepairRun:
    attempts: list[Attempt] = field(default_factory=list)
    stop: str = ""
    code: str = ""  # the last draft (the passing one when ok)
    spend: Spend = field(default_factory=Spend)

    @property
    def ok(self) -> bool:
        return bool(self.attempts) and self.attempts[-1].failing is None

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "stop": self.stop,
            "spend": self.spend.to_json(),
            "attempts": [
                {"number": a.number, "gates": [g.to_json() for g in a.gates], "spend": a.spend.to_json()}
                for a in self.attempts
            ],
        }


def extract_code(answer: str) -> str | None:
    """The answer's one fenced Python block; None when it holds none or several (then it is not a file)."""
    blocks = _CODE_BLOCK.findall(answer)
    return blocks[0] if len(blocks) == 1 else None


def repair_loop(provider, system: str, first_prompt: str, try_draft: TryDraft, attempts: int) -> RepairRun:
    run = RepairRun()
    messages = [{"role": "user", "content": first_prompt}]
    for number in range(1, attempts + 1):
        try:
            answer = provider.ask(system, messages)
        except OverBudget as exc:
            run.stop = f"stopped before draft {number}: {exc}"
            return run
        except PipelineError as exc:  # the API failed: what was spent and tried so far is still reported
            run.stop = f"stopped at draft {number}: {exc.message}"
            return run
        run.spend = run.spend + answer.spend
        code = extract_code(answer.text)
        gates = try_draft(code) if code is not None else [_no_file()]
        run.code = code or run.code
        attempt = Attempt(number, gates, answer.spend)
        run.attempts.append(attempt)
        if attempt.failing is None:
            run.stop = f"draft {number} passed every hard gate"
            return run
        messages += [
            {"role": "assistant", "content": answer.text},
            {"role": "user", "content": prompts.draft_repair(attempt.failing.name, attempt.failing.detail)},
        ]
    run.stop = f"all {attempts} drafts failed a gate (the attempts cap)"
    return run


def _no_file() -> GateResult:
    return GateResult("draft", GateStatus.FAIL, "the answer held no single ```python block: answer with the whole file")
