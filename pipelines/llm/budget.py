"""What the provider has spent, and whether it may ask again: per job and per repository per UTC day.

The ledger is an interface: `MemoryLedger` for the CLI and tests, the App's `bot.llm_usage.StoreLedger` on its
database (the day's totals must outlive a worker and be shared by every worker). Before each call the provider asks
`allowance()`: how many answer tokens may still be spent, or why none may.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pipelines.llm.settings import Caps


@dataclass(frozen=True)
class Spend:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Spend) -> Spend:
        return Spend(
            self.calls + other.calls,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.usd + other.usd,
        )

    def to_json(self) -> dict:
        return {**self.__dict__, "usd": round(self.usd, 6)}

    @classmethod
    def from_json(cls, data: dict | None) -> Spend:
        data = data or {}
        return cls(*(data.get(k, 0) for k in ("calls", "input_tokens", "output_tokens")), float(data.get("usd", 0.0)))


class OverBudget(RuntimeError):
    """A cap is reached: `str()` names which, for the status comment."""


@dataclass(frozen=True)
class Allowance:
    answer_tokens: int  # the most the next answer may be
    refusal: str = ""  # non-empty: no call may be made, and why


def allowance(caps: Caps, job: Spend, day: Spend, output_price: float) -> Allowance:
    """Refuse once any cap is reached; else bound the next answer so it cannot overshoot a cap by itself."""
    for spent, cap, what in (
        (job.tokens, caps.job_tokens, f"the job's token cap ({caps.job_tokens:,})"),
        (job.usd, caps.job_usd, f"the job's cost cap (${caps.job_usd:.2f})"),
        (day.tokens, caps.day_tokens, f"the repository's daily token cap ({caps.day_tokens:,})"),
        (day.usd, caps.day_usd, f"the repository's daily cost cap (${caps.day_usd:.2f})"),
    ):
        if spent >= cap:
            return Allowance(0, f"{what} is reached")
    by_usd = min(caps.job_usd - job.usd, caps.day_usd - day.usd) / output_price * 1e6
    tokens = min(caps.answer_tokens, caps.job_tokens - job.tokens, caps.day_tokens - day.tokens, int(by_usd))
    if tokens < 1:
        return Allowance(0, "the remaining budget does not cover one more answer")
    return Allowance(tokens)


class Ledger(Protocol):
    caps: Caps

    def job_spend(self) -> Spend: ...

    def day_spend(self) -> Spend: ...

    def record(self, spend: Spend) -> None: ...


class MemoryLedger:
    """One job's ledger in memory (the CLI, tests); its day is the job."""

    def __init__(self, caps: Caps, day: Spend | None = None):
        self.caps = caps
        self.spent = Spend()
        self.before_today = day or Spend()

    def job_spend(self) -> Spend:
        return self.spent

    def day_spend(self) -> Spend:
        return self.before_today + self.spent

    def record(self, spend: Spend) -> None:
        self.spent = self.spent + spend
