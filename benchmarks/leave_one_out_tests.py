"""Leave-one-out, test half: strip each supported text model from a fresh Liger-Kernel checkout, regenerate it with
the autopatch pipeline, then run Liger's *original* instance-patching test for it against the regenerated patch.

    python -m benchmarks.leave_one_out_tests [MODEL ...] [--workdir DIR] [--notes benchmarks/NOTES.md]

Default: every text model (dense and MoE, not VL) in the checkout's MODEL_TYPE_TO_APPLY_LIGER_FN, one after the
other in this process. First it records which of Liger's own tests in test_monkey_patch.py fail on an untouched
checkout against the installed transformers (the baseline, cached in DIR/baseline.json), so each model is compared
like with like. Per model: what the removal found (`removal.read_support`), the pipeline's gates, the original
test's outcome and, when it fails, its first assertion line. Writes DIR/results.json (a run over some models
updates their rows there); `--notes` rewrites this benchmark's section of NOTES.md from all rows.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path

from benchmarks import notes
from pipelines import target
from pipelines.autopatch import act
from pipelines.autopatch import removal
from pipelines.autopatch import verify
from pipelines.autopatch.pipeline import run_pipeline
from pipelines.autopatch.pipeline import understand_model
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError
from pipelines.subprocesses import run_command

# Why a model's original test does not pass on the regenerated patch (or why there is none to run), judged from the
# row's evidence. Categories: "refused by design" (a guard with evidence), "ours conservative" (we leave a kernel
# off that Liger patches), "Liger's test" (it asserts something of Liger's own code, not of the patch's effect),
# "no original test".
EXPLANATIONS: dict[str, str] = {
    "granite": "refused by design: HF's forward divides the logits by config.logits_scaling (modeling_granite.py:489), "
    "which the generated lce_forward would drop (check `logits_transform`); Liger itself raises NotImplementedError "
    "for FLCE on Granite and has no instance test for it",
    "falcon_h1": "refused by design: HF's forward multiplies lm_head's output by model.lm_head_multiplier "
    "(modeling_falcon_h1.py); Liger's hand-written forward folds it into the hidden states, our generator does not "
    "(check `logits_transform`), so Liger's test (which passes on the untouched checkout) is not run",
    "qwen3_next": "Liger's test asserts its own conservative choice: `assert norm.in_place is not gemma` for the "
    "Qwen3-Next-style (offset 1, gemma) norms, i.e. in_place=False; understand proves in_place=True safe (the "
    "in-place backward emulated on the tiny model moves 0 gradients; decisions table: liger-conservative). With "
    "`--set rms_in_place=false` the regenerated patch passes this test (qwen3_next re-run)",
    "qwen3_5_text": "Liger's test asserts its own conservative choice: `assert norm.in_place is not gemma` for the "
    "Qwen3-Next-style (offset 1, gemma) norms, i.e. in_place=False; understand proves in_place=True safe (the "
    "in-place backward emulated on the tiny model moves 0 gradients; decisions table: liger-conservative). With "
    "`--set rms_in_place=false` the regenerated patch passes this test (qwen3_next re-run)",
    "qwen3_5_moe_text": "Liger's test asserts its own conservative choice: `assert norm.in_place is not gemma` for the "
    "Qwen3-Next-style (offset 1, gemma) norms, i.e. in_place=False; understand proves in_place=True safe (the "
    "in-place backward emulated on the tiny model moves 0 gradients; decisions table: liger-conservative). With "
    "`--set rms_in_place=false` the regenerated patch passes this test (qwen3_next re-run)",
    "gpt_oss": "no original test: Liger 0.8.5's test_monkey_patch.py has no instance test for gpt_oss",
}
RESULT_RE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED)\s+(\S+?)(?:\s|$)", re.M)
NOTES_SECTION = "## autopatch leave-one-out (test half)"
NOTES_PREFACE = """Every text model of the 0.8.5 registry (dense and MoE, not VL), one after the other in one process. For
each, `pipelines/autopatch/removal.py` strips its support from a fresh checkout, reading what belongs to it from the
target (the registry's function, the MINI_MODEL_SETUPS entries that patch with it, the revert functions they name):
a try-block guard shared with another model (qwen3 + qwen3_moe) loses only this model's imports, and is renamed
after the model it still guards; a function also registered for a VL model (llama4, qwen3_5, qwen3_5_moe) stays, and
only the text model_type's registry entry goes; model/llama.py's helpers that nemotron.py imports move to
model/llama_helpers.py, so llama is regenerated too. Where Liger's forward lives in a module another model keeps
(gemma3.py, hunyuan_v1.py, llama4.py, qwen3_5*.py), the original test imports the regenerated `lce_forward` under
the name it already uses (`removal.adapt_forward_imports`); nothing else in Liger's tests is changed. The 14
baseline failures are all VL tests (qwen2_vl, qwen2_5_vl, qwen3_vl, glm4v_moe) against transformers 5.24; none is a
text model's. Regenerate the table without re-running: `--table-only`."""
NOTES_COMMAND = "python -m benchmarks.leave_one_out_tests --workdir out/loo --notes benchmarks/NOTES.md"


def pytest_run(checkout: target.Checkout, *node_ids: str) -> tuple[dict[str, str], str]:
    argv = [sys.executable, "-m", "pytest", *node_ids, "-rA", "-q", "--tb=short", "-p", "no:cacheprovider"]
    proc = run_command(argv, cwd=checkout.root, env=verify.target_env(), timeout=900)
    outcomes = {name.split("::", 1)[1]: status for status, name in RESULT_RE.findall(proc.output) if "::" in name}
    return outcomes, proc.output


def status_of(outcomes: dict[str, str], names: tuple[str, ...]) -> str:
    """One status for a test and its parametrized cases: FAILED if any case failed, NOT RUN if none ran."""
    found = [s for test, s in outcomes.items() if test.split("[")[0] in names]
    if not found:
        return "NOT RUN"
    for status in ("ERROR", "FAILED", "SKIPPED"):
        if status in found:
            return status
    return "PASSED"


def first_error(output: str) -> str:
    """The first `E   ...` line pytest printed: the assertion that failed, for the table."""
    found = re.search(r"^E\s+(.+)$", output, re.M)
    return found.group(1).strip()[:240] if found else ""


def leave_one_out(model_type: str, workdir: Path) -> dict:
    for stale in (workdir / model_type, workdir / f"{model_type}.liger-bot"):  # an earlier run's, in our workdir
        shutil.rmtree(stale, ignore_errors=True)
    checkout = target.fetch(workdir / model_type)
    stripped = removal.remove_support(checkout, model_type)
    checkout.git.commit_all(f"Remove {model_type} support (leave-one-out)")
    support = stripped.support
    row = {
        "model": model_type,
        "liger_function": support.apply_fn,
        "shared_function": not support.exclusive,
        "original_tests": list(support.original_tests),
        "relocated": stripped.relocated,
    }
    started = time.monotonic()
    try:
        profile = understand_model(model_type, checkout)
        result = run_pipeline(checkout, profile, lambda _: None, verify.LocalRunner(False))
    except PipelineError as exc:
        return {**row, "pipeline": f"refused: {exc.message}", "original_test": "-"}
    row["seconds"] = round(time.monotonic() - started, 1)
    row["needs_review"] = profile.needs_review()
    row["gates"] = {g.name: g.status.value for g in result.gates}
    if not result.ok:
        failed = next(g for g in result.gates if g.status is GateStatus.FAIL and g.hard)
        return {**row, "pipeline": f"FAILED at {failed.name}", "detail": failed.detail[-600:], "original_test": "-"}
    row["pipeline"] = "OK"
    checkout.git.checkout(result.branch)
    try:
        test_file = removal.write_original_test(checkout, stripped)
        if test_file is None:
            return {**row, "original_test": "no original test"}
        outcomes, output = pytest_run(checkout, str(test_file.relative_to(checkout.root)))
        row["original_test"] = status_of(outcomes, support.original_tests)
        if row["original_test"] != "PASSED":
            row["original_error"] = first_error(output)
        test_file.unlink()
    finally:
        checkout.git.checkout("main")
    return row


def summary(rows: list[dict], baseline_failing: list[str], baseline_total: int) -> str:
    comparable = [r for r in rows if r["baseline"] == "PASSED"]
    passed = [r for r in comparable if r["original_test"] == "PASSED"]
    lines = [
        f"Baseline (untouched checkout): {baseline_total - len(baseline_failing)} of {baseline_total} of Liger's "
        f"own tests in test_monkey_patch.py pass; failing: {', '.join(baseline_failing) or 'none'}.",
        "",
        f"**Liger's original instance test passes on the regenerated patch for {len(passed)} of {len(comparable)}** "
        f"models whose test passes on the untouched checkout ({len(rows)} models tried).",
        "",
        "| model | Liger function | original test | baseline | pipeline | original test on our patch | why |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        shared = " (shared with VL)" if r.get("shared_function") else ""
        tests = ", ".join(t.removeprefix("test_apply_liger_kernel_to_") for t in r.get("original_tests", [])) or "-"
        pipeline = r["pipeline"].split(":", 1)[0]
        error = [r["original_error"]] if r.get("original_error") else r.get("detail", "").strip().splitlines()[-1:]
        error = error or [r["pipeline"]]
        why = "" if r["original_test"] == "PASSED" else EXPLANATIONS.get(r["model"]) or error[0]
        why = why.replace("|", "\\|")
        lines.append(
            f"| {r['model']} | `{r['liger_function']}`{shared} | {tests} | {r['baseline']} | {pipeline} "
            f"| {r['original_test']} | {why[:400]} |"
        )
    return "\n".join(lines)


def write_notes(path: Path, body: str, command: str) -> None:
    """Replace this benchmark's own section of NOTES.md (other sections belong to other benchmarks)."""
    notes.replace_section(path, NOTES_SECTION, f"{NOTES_SECTION}\n\n    {command}\n\n{NOTES_PREFACE}\n\n{body}\n")


def default_models(root: Path) -> list[str]:
    from benchmarks.leave_one_out_decisions import registry
    from benchmarks.leave_one_out_decisions import text_models

    return text_models(registry(root / target.MONKEY_PATCH))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model types (default: every text model in the registry)")
    parser.add_argument("--workdir", type=Path, default=Path(f"out/leave-one-out-{time.strftime('%Y%m%d-%H%M%S')}"))
    parser.add_argument("--notes", type=Path, help="also replace this benchmark's section of a NOTES.md")
    parser.add_argument("--table-only", action="store_true", help="run nothing: the table from DIR/results.json")
    args = parser.parse_args(argv)
    if args.table_only:
        results = json.loads((args.workdir / "results.json").read_text())
        body = summary(results["rows"], results["baseline_failing"], results["baseline_total"])
        print(body)
        if args.notes:
            write_notes(args.notes, body, NOTES_COMMAND)
        return 0
    args.workdir.mkdir(parents=True, exist_ok=True)
    baseline_checkout = (
        target.open_checkout(args.workdir / "baseline") if (args.workdir / "baseline").exists() else None
    )
    baseline_checkout = baseline_checkout or target.fetch(args.workdir / "baseline")
    models = args.models or default_models(baseline_checkout.root)
    for model in models:
        act.validate_model_type(model)
    cached = args.workdir / "baseline.json"  # the untouched checkout's outcomes do not change between runs
    if cached.exists():
        baseline = json.loads(cached.read_text())
    else:
        baseline, _ = pytest_run(baseline_checkout, str(act.INSTANCE_TEST))
        cached.write_text(json.dumps(baseline, indent=2))
    failing = sorted(t for t, s in baseline.items() if s in ("FAILED", "ERROR"))
    print(f"baseline: {len(baseline) - len(failing)} of {len(baseline)} pass; failing: {failing}", flush=True)
    earlier = args.workdir / "results.json"  # a run over some models updates their rows of an earlier full run
    kept = {r["model"]: r for r in json.loads(earlier.read_text())["rows"]} if earlier.exists() else {}
    defaults = default_models(baseline_checkout.root)
    order = list(dict.fromkeys(defaults + list(kept) + list(models)))  # the registry's order, then the rest
    rows = [kept[m] for m in order if m in kept]
    for model in models:
        try:
            row = leave_one_out(model, args.workdir)
        except Exception as exc:  # a crash is a result too; go on with the next model
            row = {"model": model, "liger_function": "?", "pipeline": f"error: {type(exc).__name__}: {exc}"}
            row["original_test"] = "-"
        support_tests = tuple(row.get("original_tests", ()))
        row["baseline"] = status_of(baseline, support_tests) if support_tests else "no test"
        print(json.dumps(row), flush=True)
        kept[model] = row
        rows = [kept[m] for m in order if m in kept]
        results = {"baseline_failing": failing, "baseline_total": len(baseline), "rows": rows}
        earlier.write_text(json.dumps(results, indent=2))  # after each model: a stopped run keeps what it did
    body = summary(rows, failing, len(baseline))
    print("\n" + body)
    if args.notes:
        write_notes(args.notes, body, NOTES_COMMAND)
    comparable = [r for r in rows if r["baseline"] == "PASSED"]
    return 0 if all(r["original_test"] == "PASSED" for r in comparable) else 1


if __name__ == "__main__":
    sys.exit(main())
