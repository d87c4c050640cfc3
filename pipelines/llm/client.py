"""The provider: one `ask` through the official anthropic SDK, streamed, with every call priced and put on the
ledger. It only returns text; nothing here runs, parses or trusts what the model wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pipelines.llm.budget import Ledger
from pipelines.llm.budget import OverBudget
from pipelines.llm.budget import Spend
from pipelines.llm.budget import allowance
from pipelines.llm.settings import LlmSettings
from pipelines.outcome import PipelineError

API_KEY_VARIABLE = "ANTHROPIC_API_KEY"
INSTALL_HINT = "pip install liger-bot[llm]"
TIMEOUT_SECONDS = 300.0


@dataclass(frozen=True)
class Answer:
    text: str
    spend: Spend
    stop_reason: str


def sdk():
    """The anthropic package, or a refusal that says how to install it."""
    try:
        import anthropic
    except ImportError:
        raise PipelineError(
            "the anthropic provider is configured but the anthropic SDK is not installed", hint=INSTALL_HINT
        ) from None
    return anthropic


def enabled(settings: LlmSettings, api_key: str) -> bool:
    """Both switches: the repo's file names the provider, and the App holds a key."""
    return settings.configured and bool(api_key)


class Provider:
    def __init__(self, settings: LlmSettings, api_key: str, ledger: Ledger, base_url: str | None = None):
        anthropic = sdk()
        self.settings, self.ledger = settings, ledger
        # max_retries=0: a retry would spend again without the ledger knowing; the caller's loop decides
        self.client = anthropic.Anthropic(api_key=api_key, base_url=base_url, max_retries=0, timeout=TIMEOUT_SECONDS)

    def price(self, input_tokens: int, output_tokens: int) -> float:
        per_input, per_output = self.settings.price()
        return (input_tokens * per_input + output_tokens * per_output) / 1e6

    def ask(self, system: str, messages: list[Mapping[str, str]], answer_tokens: int | None = None) -> Answer:
        """One streamed answer; raises OverBudget (before calling) once a cap is reached."""
        room = allowance(self.ledger.caps, self.ledger.job_spend(), self.ledger.day_spend(), self.settings.price()[1])
        if room.refusal:
            raise OverBudget(room.refusal)
        max_tokens = min(room.answer_tokens, answer_tokens or room.answer_tokens)
        anthropic = sdk()
        try:
            with self.client.messages.stream(
                model=self.settings.model, max_tokens=max_tokens, system=system, messages=list(messages)
            ) as stream:
                message = stream.get_final_message()
        except anthropic.APIError as exc:  # the SDK's messages carry no key; the status is what a person needs
            status = getattr(exc, "status_code", None)
            raise PipelineError(
                f"the anthropic API call failed ({type(exc).__name__}{f', HTTP {status}' if status else ''})",
                hint="the deterministic engine's answer stands; `/liger retry` asks again",
            ) from None
        usage = message.usage
        spend = Spend(1, usage.input_tokens, usage.output_tokens, self.price(usage.input_tokens, usage.output_tokens))
        self.ledger.record(spend)
        text = "".join(block.text for block in message.content if block.type == "text")
        return Answer(text, spend, message.stop_reason or "")
