"""The `llm:` block of `.github/liger-bot.yml`: which provider and model, and the caps that bound what it spends.

Parsed like the rest of the file: a bad value never stops the bot, it falls back to the default and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field

PROVIDERS = ("anthropic",)
DEFAULT_MODEL = "claude-sonnet-4-5"
# USD per million (input, output) tokens, from Anthropic's price list. A model not listed is priced at the dearest
# rate here, so a cap in dollars is never reached later than it should be.
PRICES = {
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-opus-4-5": (5.0, 25.0),
    "claude-opus-4-1": (15.0, 75.0),
}
DEAREST = max(PRICES.values(), key=lambda price: price[1])
MAX_CAP_TOKENS = 100_000_000
MAX_CAP_USD = 10_000.0


@dataclass(frozen=True)
class Caps:
    attempts: int = 3  # tier-3 drafts per job: the first and its repairs
    job_tokens: int = 300_000  # input + output, per job
    job_usd: float = 3.0
    day_tokens: int = 3_000_000  # per repository per UTC day, every job and proposal together
    day_usd: float = 30.0
    answer_tokens: int = 8_192  # the most one answer may be

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class LlmSettings:
    provider: str = ""  # "": off
    model: str = DEFAULT_MODEL
    caps: Caps = field(default_factory=Caps)
    explain: bool = True  # plain-language notes on `needs review` decisions and failing gates

    @property
    def configured(self) -> bool:
        return self.provider in PROVIDERS

    def price(self) -> tuple[float, float]:
        return PRICES.get(self.model, DEAREST)


# key in the file -> (Caps field, type, upper bound)
_CAP_KEYS = {
    "attempts": ("attempts", int, 20),
    "job_tokens": ("job_tokens", int, MAX_CAP_TOKENS),
    "job_usd": ("job_usd", float, MAX_CAP_USD),
    "day_tokens": ("day_tokens", int, MAX_CAP_TOKENS),
    "day_usd": ("day_usd", float, MAX_CAP_USD),
    "answer_tokens": ("answer_tokens", int, 64_000),
}


def _number(value, kind: type, upper: float) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if kind is int and not isinstance(value, int):
        return None
    return kind(value) if 0 <= value <= upper else None


def _caps(budget, problems: list[str]) -> Caps:
    if budget is None:
        return Caps()
    if not isinstance(budget, dict):
        problems.append("llm.budget must be a mapping (" + ", ".join(_CAP_KEYS) + ")")
        return Caps()
    values = {}
    for key, value in budget.items():
        if key not in _CAP_KEYS:
            problems.append(f"llm.budget: unknown key ignored: {str(key)[:40]}")
            continue
        attr, kind, upper = _CAP_KEYS[key]
        number = _number(value, kind, upper)
        if number is None:
            problems.append(f"llm.budget.{key} must be a {'whole ' if kind is int else ''}number from 0 to {upper}")
            continue
        values[attr] = number
    return Caps(**values)


def parse_llm(data, problems: list[str]) -> LlmSettings:
    """`llm: {provider: anthropic, model: ..., explain: true, budget: {...}}` -> LlmSettings (off when absent)."""
    if data is None:
        return LlmSettings()
    if not isinstance(data, dict):
        problems.append("llm must be a mapping (provider, model, explain, budget)")
        return LlmSettings()
    provider = data.get("provider", "")
    if provider not in PROVIDERS:
        problems.append(f"llm.provider must be one of {', '.join(PROVIDERS)}; the provider stays off")
        return LlmSettings()
    model = data.get("model", DEFAULT_MODEL)
    if not isinstance(model, str) or not model.strip() or len(model) > 100:
        problems.append(f"llm.model must be a model name; {DEFAULT_MODEL} is used")
        model = DEFAULT_MODEL
    explain = data.get("explain", True)
    if not isinstance(explain, bool):
        problems.append("llm.explain must be true or false")
        explain = True
    unknown = sorted(str(k)[:40] for k in data if k not in ("provider", "model", "explain", "budget"))
    if unknown:
        problems.append("llm: unknown keys ignored: " + ", ".join(unknown[:10]))
    return LlmSettings(provider, model.strip(), _caps(data.get("budget"), problems), explain)
