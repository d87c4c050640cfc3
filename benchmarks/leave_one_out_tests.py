"""Leave-one-out, test half: strip a supported text model from a fresh Liger-Kernel checkout, regenerate it with
the autopatch pipeline, then run Liger's *original* instance-patching test for it against the regenerated patch.

    python benchmarks/leave_one_out_tests.py [--models mistral qwen2 ...] [--workdir DIR] [--hand-profiles]

First it records which of Liger's own tests in test_monkey_patch.py fail on an untouched checkout (against the
installed transformers), so a regenerated model is compared like with like. Profiles come from
`pipelines.autopatch.understand` when it is importable; `--hand-profiles` (or its absence) uses the hand-written
profiles in tests/pipelines/autopatch/hand_profiles.py.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines import target  # noqa: E402
from pipelines.autopatch import act  # noqa: E402
from pipelines.autopatch import removal  # noqa: E402
from pipelines.autopatch import verify  # noqa: E402
from pipelines.autopatch.pipeline import run_pipeline  # noqa: E402
from pipelines.autopatch.pipeline import understand_model  # noqa: E402
from pipelines.commands import run_command  # noqa: E402
from pipelines.outcome import PipelineError  # noqa: E402

# Text models whose support is self-contained. llama is left out: model/llama.py also hosts helpers
# (lce_maybe_trainable_lm_head) that other models' forwards import, so it cannot be removed alone.
DEFAULT_MODELS = ("mistral", "qwen2", "qwen3", "gemma", "mixtral", "qwen3_moe", "nemotron")
RESULT_RE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED)\s+(\S+?)(?:\s|$)", re.M)


def pytest_outcomes(checkout: target.Checkout, path: str) -> dict[str, str]:
    argv = [sys.executable, "-m", "pytest", path, "-rA", "-q", "-p", "no:cacheprovider"]
    proc = run_command(argv, cwd=checkout.root, env=verify.target_env(), timeout=900)
    return {name.split("::", 1)[1]: status for status, name in RESULT_RE.findall(proc.output) if "::" in name}


def profile_for(model_type: str, checkout: target.Checkout, hand: bool):
    if not hand:
        try:
            return understand_model(model_type, checkout), "understand"
        except ImportError:
            pass
    from tests.pipelines.autopatch.hand_profiles import hand_profile

    return hand_profile(model_type), "hand"


def leave_one_out(model_type: str, workdir: Path, hand: bool) -> dict:
    checkout = target.fetch(workdir / model_type)
    stripped = removal.remove_support(checkout, model_type)
    checkout.git.commit_all(f"Remove {model_type} support (leave-one-out)")
    profile, source = profile_for(model_type, checkout, hand)
    started = time.monotonic()
    try:
        result = run_pipeline(checkout, profile, lambda _: None, verify.LocalRunner(False))
    except PipelineError as exc:
        return {"model": model_type, "profiles": source, "pipeline": f"refused: {exc.message}", "original_test": "-"}
    seconds = round(time.monotonic() - started, 1)
    gates = {g.name: g.status.value for g in result.gates}
    if not result.ok:
        return {"model": model_type, "profiles": source, "pipeline": "FAILED", "gates": gates, "original_test": "-"}
    checkout.git.checkout(result.branch)
    test_file = removal.write_original_test(checkout, stripped)
    outcomes = pytest_outcomes(checkout, str(test_file.relative_to(checkout.root)))
    name = f"test_apply_liger_kernel_to_instance_for_{model_type}"
    status = next((s for test, s in outcomes.items() if test.split("[")[0] == name), "NOT RUN")
    test_file.unlink()
    checkout.git.checkout("main")
    return {
        "model": model_type,
        "profiles": source,
        "pipeline": "OK",
        "seconds": seconds,
        "gates": gates,
        "original_test": status,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument("--workdir", type=Path, default=Path(f"out/leave-one-out-{time.strftime('%Y%m%d-%H%M%S')}"))
    parser.add_argument("--hand-profiles", action="store_true", help="do not use understand, even if importable")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    for model in args.models:
        act.validate_model_type(model)

    baseline_checkout = target.fetch(args.workdir / "baseline")
    baseline = pytest_outcomes(baseline_checkout, str(act.INSTANCE_TEST))
    failing = sorted(t for t, s in baseline.items() if s in ("FAILED", "ERROR"))
    print(f"baseline: {len(baseline) - len(failing)} of {len(baseline)} of Liger's own tests pass; failing: {failing}")

    rows = []
    for model in args.models:
        row = leave_one_out(model, args.workdir, args.hand_profiles)
        test = f"test_apply_liger_kernel_to_instance_for_{model}"
        row["baseline"] = next((s for t, s in baseline.items() if t.split("[")[0] == test), "NOT RUN")
        rows.append(row)
        print(json.dumps(row))
    comparable = [r for r in rows if r["baseline"] == "PASSED"]
    passed = [r for r in comparable if r["original_test"] == "PASSED"]
    print(
        f"\nLiger's original instance test passes on the regenerated patch for {len(passed)} of {len(comparable)} "
        f"models whose test passes on the untouched checkout ({len(rows)} models tried)"
    )
    for r in rows:
        print(
            f"  {r['model']:<12} baseline {r['baseline']:<8} pipeline {r['pipeline']:<8} original test {r['original_test']}"
        )
    (args.workdir / "results.json").write_text(json.dumps({"baseline_failing": failing, "rows": rows}, indent=2))
    return 0 if len(passed) == len(comparable) else 1


if __name__ == "__main__":
    sys.exit(main())
