"""The scan's classification: every causal LM of the installed transformers against the target's registry, as
autopatch would treat it: supported (already in the target's `MODEL_TYPE_TO_APPLY_LIGER_FN`), patchable (act's plan
applies every kernel the model has), partial (act's plan leaves kernels out: which, why and the command that would add
each), needs review (a decision the generated forward depends on is not settled: which) or refused (understand or act
refuses: why). The dashboard issue that shows the rows is the bot's (bot/scan.py).
"""

from __future__ import annotations

import enum
import json
import multiprocessing
import os
from collections.abc import Callable
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import as_completed
from dataclasses import dataclass
from pathlib import Path

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


def _models(only: list[str] | None) -> dict[str, str]:
    models = causal_lms()
    if not only:
        return models
    unknown = sorted(set(only) - set(models))
    if unknown:
        raise PipelineError(f"not causal LMs of the installed transformers: {', '.join(unknown)}")
    return {m: models[m] for m in only}


def iter_scan(
    checkout,
    understand: Callable | None = None,
    only: list[str] | None = None,
    progress=None,
    jobs: int = 1,
    cache: ScanCache | None = None,
) -> Iterator[Row]:
    """Each model's row as it is classified (so an interrupted scan keeps what it did): from the cache where it holds
    the model for this exact target, transformers and liger-bot, else classified here or in `jobs` processes."""
    understand = understand or _default_understand()
    supported = set(supported_models(checkout.monkey_patch))
    models = _models(only)
    known = cache.load() if cache else {}
    todo = {m: c for m, c in models.items() if m not in known}
    done = 0

    def finished(row: Row) -> Row:
        nonlocal done
        done += 1
        if progress:
            progress(f"[{done}/{len(models)}] {row.model_type}: {row.verdict.value}")
        if cache and row.model_type in todo:
            cache.add(row)
        return row

    for model_type in (m for m in models if m in known):
        yield finished(known[model_type])
    if jobs <= 1:
        for model_type, class_name in todo.items():
            yield finished(classify(model_type, class_name, supported, checkout, understand))
        return
    # each model's understand builds it: processes, not threads; spawned, since forking a process that runs threads
    # (the App's worker, a test runner) can copy a held lock into the child, which then never finishes
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(classify, m, c, supported, checkout, understand) for m, c in todo.items()]
        try:
            for future in as_completed(futures):
                yield finished(future.result())
        finally:  # interrupted: drop what has not started, so the pool's exit waits only for the running ones
            for future in futures:
                future.cancel()


def scan(checkout, understand: Callable | None = None, only: list[str] | None = None, progress=None, **options):
    """Every row, by model type (the order `causal_lms` gives)."""
    return sorted(iter_scan(checkout, understand, only, progress, **options), key=lambda row: row.model_type)


@dataclass
class ScanCache:
    """Rows already classified, in a JSON file beside the checkout, valid only for the `key` they were made under
    (the target's commit, transformers and liger-bot versions); written after every row, so nothing is lost."""

    path: Path
    key: str
    rows: dict[str, dict] | None = None  # as read once from the file, then as written

    def load(self) -> dict[str, Row]:
        if self.rows is None:
            try:
                data = json.loads(self.path.read_text())
            except (OSError, ValueError):
                data = {}
            self.rows = data.get("rows", {}) if data.get("key") == self.key else {}
        return {m: Row.from_json(row) for m, row in self.rows.items()}

    def add(self, row: Row) -> None:
        self.load()
        self.rows[row.model_type] = row.to_json()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        temporary.write_text(json.dumps({"key": self.key, "rows": self.rows}, indent=1))
        os.replace(temporary, self.path)


def cache_for(checkout) -> ScanCache | None:
    """The checkout's scan cache, or None where the rows could not be trusted again (uncommitted changes)."""
    from pipelines.pull_request import installed_versions

    if checkout.git.dirty_paths():
        return None
    versions = installed_versions()
    key = f"target {checkout.git.head()}; transformers {versions['transformers']}; liger-bot {versions['liger-bot']}"
    return ScanCache(checkout.beside("scan-cache.json"), key)


def counts(rows: list[Row]) -> dict[str, int]:
    return {verdict.value: sum(1 for r in rows if r.verdict is verdict) for verdict in Verdict}
