"""Scan: every causal LM of the installed transformers against the target's registry, one dashboard issue.

Each model is classified as autopatch would treat it: supported (already in `MODEL_TYPE_TO_APPLY_LIGER_FN`),
patchable (act's plan applies every kernel the model has), partial (act's plan leaves kernels out: which, why and
the command that would add each), needs review (a decision the generated forward depends on is not settled:
which) or refused (understand or act refuses: why). The dashboard is one issue, found by its title and edited in
place; a checkbox per patchable or partial model starts `/liger autopatch` for it when ticked, within the repo's
PR limits.
"""

from __future__ import annotations

import ast
import enum
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipelines.autopatch.job import call_understand
from pipelines.contract import BRANCH_PREFIX
from pipelines.outcome import PipelineError

DASHBOARD_TITLE = "liger-bot dashboard"
DASHBOARD_MARKER = "<!-- liger-bot:dashboard -->"
REGISTRY_NAME = "MODEL_TYPE_TO_APPLY_LIGER_FN"
_CHECKBOX_RE = re.compile(r"^- \[(?P<mark>[ xX])\] `(?P<model>[A-Za-z0-9._-]+)`", re.MULTILINE)


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


def target_registry(monkey_patch: Path) -> set[str]:
    """The model types the target checkout already patches (keys of its registry dict, read with ast)."""
    tree = ast.parse(monkey_patch.read_text())
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == REGISTRY_NAME for t in targets) and isinstance(node.value, ast.Dict):
            return {k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    raise PipelineError(f"{monkey_patch} has no {REGISTRY_NAME} dict", hint="is this a Liger-Kernel checkout?")


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
    supported = target_registry(checkout.monkey_patch)
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


# --- the dashboard issue ----------------------------------------------------------------------------------


def ticked(body: str | None) -> set[str]:
    return {m["model"] for m in _CHECKBOX_RE.finditer(body or "") if m["mark"] in "xX"}


def newly_ticked(before: str | None, after: str | None) -> list[str]:
    """Models whose box is ticked in `after` and was not in `before` (in the order they appear)."""
    was = ticked(before)
    return [m["model"] for m in _CHECKBOX_RE.finditer(after or "") if m["mark"] in "xX" and m["model"] not in was]


def _escape(text: str, limit: int = 300) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:limit]


def render_dashboard(
    rows: list[Row], started: dict[str, str], limits: tuple[int, int], when: float | None = None
) -> str:
    """`started`: model -> a note ("job 4", "PR #12") for models whose box was ticked and acted on."""
    per_hour, max_open = limits
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(when or time.time()))
    summary = ", ".join(f"{n} {verdict}" for verdict, n in counts(rows).items())
    lines = [DASHBOARD_MARKER, f"## {DASHBOARD_TITLE}", "", f"Scanned {stamp}: {summary}.", ""]
    lines += [
        f"Tick a box to start `/liger autopatch` for that model (at most {per_hour} new PRs per hour and "
        f"{max_open} open at once; the rest wait for the next scan).",
        "",
    ]
    headings = {
        Verdict.PATCHABLE: "Patchable (every kernel the model has)",
        Verdict.PARTIAL: "Partial (kernels left out: why, and the command that adds each)",
    }
    for verdict in STARTABLE:
        lines += [f"### {headings[verdict]}", ""]
        for row in (r for r in rows if r.verdict is verdict):
            note = started.get(row.model_type)
            line = f"- [{'x' if note else ' '}] `{row.model_type}` {row.causal_lm_class}" + (
                f" ({note})" if note else ""
            )
            lines.append(line + (f": {_escape(row.reason, 600)}" if verdict is Verdict.PARTIAL else ""))
        lines.append("")
    for verdict, heading in ((Verdict.NEEDS_REVIEW, "Needs review"), (Verdict.REFUSED, "Refused")):
        chosen = [r for r in rows if r.verdict is verdict]
        lines += ["", f"### {heading} ({len(chosen)})", "", "| model | class | reason |", "|---|---|---|"]
        lines += [f"| `{r.model_type}` | {r.causal_lm_class} | {_escape(r.reason)} |" for r in chosen]
    supported = [f"`{r.model_type}`" for r in rows if r.verdict is Verdict.SUPPORTED]
    lines += [
        "",
        f"<details><summary>Supported already ({len(supported)})</summary>",
        "",
        ", ".join(supported),
        "</details>",
    ]
    return "\n".join(lines) + "\n"


def pr_budget(store, forge, repo, config, active_dashboard_jobs: int) -> int:
    """How many more autopatch PRs may start now: N per hour and M open at once (`.github/liger-bot.yml`)."""
    opened_last_hour = store.prs_opened_since(repo.full_name, time.time() - 3600)
    open_now = len(forge.open_pull_requests(repo, BRANCH_PREFIX))
    return max(0, min(config.prs_per_hour - opened_last_hour, config.max_open_prs - open_now) - active_dashboard_jobs)
