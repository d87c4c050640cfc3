"""The scan's classification: every causal LM of the installed transformers against the target's registry, as
autopatch would treat it: supported (already in the target's `MODEL_TYPE_TO_APPLY_LIGER_FN`), patchable (act's plan
applies every kernel the model has), partial (act's plan leaves kernels out: which, why and the command that would add
each), needs review (a decision the generated forward depends on is not settled: which) or refused (understand or act
refuses: why). The dashboard issue that shows the rows is the bot's (bot/scan.py).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from pipelines.autopatch.job import call_understand
from pipelines.autopatch.supported import supported_models
from pipelines.outcome import PipelineError


class Verdict(str, enum.Enum):
    SUPPORTED = "supported"
    PATCHABLE = "patchable"
    PARTIAL = "partial"
    NEEDS_REVIEW = "needs review"
    REFUSED = "refused"


STARTABLE = (Verdict.PATCHABLE, Verdict.PARTIAL)  # a ticked box starts autopatch for these


@dataclass(frozen=True)
class Row:
    model_type: str
    causal_lm_class: str
    verdict: Verdict
    reason: str = ""

    def to_json(self) -> dict:
        return {
            "model_type": self.model_type,
            "class": self.causal_lm_class,
            "verdict": self.verdict.value,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: dict) -> Row:
        return cls(data["model_type"], data["class"], Verdict(data["verdict"]), data.get("reason", ""))


def causal_lms() -> dict[str, str]:
    """model_type -> causal-LM class name, for every causal LM the installed transformers registers."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return dict(sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()))


def _default_understand():
    from pipelines.autopatch.understand import understand

    return understand


def classify(model_type: str, class_name: str, supported: set[str], checkout, understand: Callable) -> Row:
    if model_type in supported:
        return Row(model_type, class_name, Verdict.SUPPORTED, f"apply_liger_kernel_to_{model_type}")
    try:
        profile = call_understand(understand, model_type, checkout)
    except PipelineError as exc:
        return Row(model_type, class_name, Verdict.REFUSED, exc.message)
    except Exception as exc:  # one broken modeling file must not stop the scan of the other models
        why = f"understand failed: {exc.__class__.__name__}: {exc}"[:300]
        return Row(model_type, class_name, Verdict.REFUSED, why)
    return classify_plan(model_type, class_name, profile)


def classify_plan(model_type: str, class_name: str, profile) -> Row:
    """What act would make of the profile: every kernel applied, some left out (the notes say which), or a
    refusal; a refusal that names a `--set` is a decision for a reviewer, not a dead end."""
    from pipelines.autopatch import act

    try:
        plan = act.plan(profile)
    except PipelineError as exc:
        verdict = Verdict.NEEDS_REVIEW if "--set" in (exc.hint or "") else Verdict.REFUSED
        return Row(model_type, class_name, verdict, exc.message)
    left_out = [note for note in plan.notes if note.startswith(act.LEFT_OUT)]
    if left_out:
        return Row(model_type, class_name, Verdict.PARTIAL, " ".join(left_out))
    return Row(model_type, class_name, Verdict.PATCHABLE, f"patches {plan.operations}")


def scan(checkout, understand: Callable | None = None, only: list[str] | None = None, progress=None) -> list[Row]:
    understand = understand or _default_understand()
    supported = set(supported_models(checkout.monkey_patch))
    models = causal_lms()
    if only:
        unknown = sorted(set(only) - set(models))
        if unknown:
            raise PipelineError(f"not causal LMs of the installed transformers: {', '.join(unknown)}")
        models = {m: models[m] for m in only}
    rows = []
    for index, (model_type, class_name) in enumerate(models.items(), 1):
        if progress:
            progress(f"[{index}/{len(models)}] {model_type}")
        rows.append(classify(model_type, class_name, supported, checkout, understand))
    return rows


def counts(rows: list[Row]) -> dict[str, int]:
    return {verdict.value: sum(1 for r in rows if r.verdict is verdict) for verdict in Verdict}
