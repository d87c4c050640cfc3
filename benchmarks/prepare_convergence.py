"""Prepare the GPU convergence run: every new model's autopatch branch, combined on one branch, checked on the CPU.

    python -m benchmarks.prepare_convergence OUTDIR [MODEL ...]      (benchmarks/prepare_convergence.sh calls this)

1. fetch a fresh Liger-Kernel checkout into OUTDIR/work (the `liger-bot target fetch` of the CLI);
2. run the whole autopatch pipeline for each model: one branch `liger-bot/autopatch-<model>` each;
3. combine them on `liger-bot/convergence-all`: `git merge` of each branch in turn; the branches insert at the same
   alphabetical places of the same files, so when a merge conflicts it is aborted and the models are re-applied
   instead: act (understand -> changeset -> target ruff) for each model in sequence on the one branch, one commit
   per model, each act reading the tree the previous one left;
4. check that branch on the CPU: the import of every apply function, every model's instance test and the
   registry checks in one pytest run, the target's checkstyle, and `--collect-only` of the four convergence
   files with the `-k` expression convergence_gpu.sh will use (every model collected in every file);
5. leave OUTDIR small for the device: a bare clone `OUTDIR/liger-kernel.git` of the checkout (all branches),
   `OUTDIR/models.txt` and `OUTDIR/cpu-checks.json`; the work tree is deleted (`--keep-work` keeps it).

Then, on a GPU host: `benchmarks/convergence_gpu.sh OUTDIR`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from pipelines import target
from pipelines.autopatch import act
from pipelines.autopatch import verify
from pipelines.autopatch.pipeline import branch_name
from pipelines.autopatch.pipeline import run_pipeline
from pipelines.autopatch.pipeline import understand_model
from pipelines.changeset import format_with_target_style
from pipelines.changeset import ruff_argv
from pipelines.git import GitError
from pipelines.outcome import PipelineError
from pipelines.subprocesses import run_command

COMBINED = "liger-bot/convergence-all"
# Passed import, instance patching, CPU numerics and checkstyle here (benchmarks/autopatch_new_models.py); one of
# each shape, so the GPU run (32 mini-model trainings) fits one device call: dense, MoE, MoE with a shared expert,
# hybrid dense/MoE, no RoPE, ReLU^2, Gemma-style norm + GeGLU, LayerNorm.
DEFAULT_MODELS = ("ministral3", "olmoe", "qwen2_moe", "glm4_moe", "ernie4_5", "arcee", "vaultgemma", "stablelm")


def keyword(models: list[str]) -> str:
    """The pytest -k expression selecting exactly these models' mini-model cases."""
    return " or ".join(f"mini_{m}" for m in models)


def autopatch_branches(checkout: target.Checkout, models: list[str], log) -> list[str]:
    """The full pipeline per model; the models whose branch was made (gates passed)."""
    made = []
    for model in models:
        started = time.monotonic()
        try:
            result = run_pipeline(checkout, understand_model(model, checkout), lambda _: None, verify.LocalRunner())
        except PipelineError as exc:
            log(f"{model}: refused: {exc.message}")
            continue
        gates = " ".join(f"{g.name}={g.status.value}" for g in result.gates if not g.name.startswith("Convergence"))
        log(f"{model}: {'OK' if result.ok else 'FAILED'} in {time.monotonic() - started:.0f}s ({gates})")
        made += [model] if result.ok else []
    return made


def merge_branches(checkout: target.Checkout, models: list[str]) -> bool:
    git = checkout.git
    git.checkout(COMBINED, create_from="main")
    for model in models:
        try:
            git.run("merge", "--no-edit", "-q", branch_name(model))
        except GitError:
            git.run("merge", "--abort", check=False)
            return False
    return True


def reapply(checkout: target.Checkout, models: list[str]) -> None:
    """act for each model in sequence on one branch: each reads (and edits) the tree the previous one committed."""
    git = checkout.git
    git.checkout(COMBINED, create_from="main")
    for model in models:
        changeset = act.build_changeset(checkout, understand_model(model, checkout))
        changeset.write(checkout.root)
        format_with_target_style(checkout, changeset.paths)
        git.commit_all(f"Add Liger Kernel support for {model} (liger-bot autopatch, re-applied for convergence)")


def combine(checkout: target.Checkout, models: list[str]) -> str:
    """`liger-bot/convergence-all` holding every model's patch: "merged" or "re-applied"."""
    how = "merged" if merge_branches(checkout, models) else None
    if how is None:
        reapply(checkout, models)
        how = "re-applied"
    checkout.git.checkout("main")
    return how


def cpu_checks(checkout: target.Checkout, models: list[str]) -> dict:
    """On the combined branch: imports, instance tests, checkstyle, and collection of the convergence cases."""
    git, root, env = checkout.git, checkout.root, verify.target_env()
    git.checkout(COMBINED)
    try:
        names = ", ".join(f"apply_liger_kernel_to_{m}" for m in models)
        imports = run_command([sys.executable, "-c", f"from liger_kernel.transformers import {names}"], root, env)
        ids = list(dict.fromkeys(i for m in models for i in verify.instance_test_ids(m)))
        instance = run_command([sys.executable, "-m", "pytest", *ids, "-q", "-p", "no:cacheprovider"], root, env)
        check = run_command(ruff_argv("check", "--output-format=concise", "."), root)
        fmt = run_command(ruff_argv("format", "--check", "."), root)
        files = [str(p) for p in act.CONVERGENCE_FILES]
        argv = [sys.executable, "-m", "pytest", *files, "-k", keyword(models), "--collect-only", "-q"]
        collected = run_command([*argv, "-p", "no:cacheprovider"], root, env)
    finally:
        git.checkout("main")
    per_file = {
        path: {
            m: sum(f"{path}::" in line and f"[mini_{m}-" in line for line in collected.output.splitlines())
            for m in models
        }
        for path in files
    }
    return {
        "import": imports.ok,
        "instance_tests": {"ok": instance.ok, "summary": instance.tail(1)},
        "checkstyle": check.ok and fmt.ok,
        "collected": per_file,
        "collect_ok": collected.ok and all(n > 0 for counts in per_file.values() for n in counts.values()),
    }


def export(checkout: target.Checkout, outdir: Path) -> Path:
    """A bare clone of the checkout (every branch), packed: what travels to the GPU host."""
    bare = outdir / "liger-kernel.git"
    shutil.rmtree(bare, ignore_errors=True)
    cloned = run_command(["git", "clone", "-q", "--bare", str(checkout.root), str(bare)], outdir)
    if not cloned.ok:
        raise PipelineError(f"git clone --bare failed: {cloned.tail(5)}")
    run_command(["git", "gc", "-q", "--prune=now"], bare)
    return bare


def generated_with() -> dict[str, str]:
    """The packages the patches were written against: the generated forwards follow this transformers' output
    fields (5.24 names the cache `cache`, older releases `past_key_values`), so the GPU run must use the same."""
    import transformers

    return {"transformers": transformers.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("models", nargs="*", default=list(DEFAULT_MODELS))
    parser.add_argument("--keep-work", action="store_true", help="keep OUTDIR/work (the full checkout, ~55 MB)")
    args = parser.parse_args(argv)
    for model in args.models:
        act.validate_model_type(model)
    outdir = args.outdir.resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    checkout = target.fetch(outdir / "work")
    made = autopatch_branches(checkout, args.models, lambda line: print(line, flush=True))
    if not made:
        print("no model passed its CPU gates: nothing to combine")
        return 1
    how = combine(checkout, made)
    print(f"{COMBINED}: {len(made)} models {how}: {', '.join(made)}", flush=True)
    checks = {"models": made, "combined": how, "keyword": keyword(made), "generated_with": generated_with()}
    checks |= cpu_checks(checkout, made)
    (outdir / "models.txt").write_text("\n".join(made) + "\n")
    (outdir / "cpu-checks.json").write_text(json.dumps(checks, indent=2))
    print(json.dumps(checks, indent=2))
    bare = export(checkout, outdir)
    if not args.keep_work:
        shutil.rmtree(checkout.root)
    size = sum(p.stat().st_size for p in outdir.rglob("*") if p.is_file()) / 2**20
    print(
        f"{outdir}: {size:.1f} MiB (bare repository {bare.name}); next, on a GPU host: "
        f"benchmarks/convergence_gpu.sh {outdir}"
    )
    ok = checks["import"] and checks["instance_tests"]["ok"] and checks["checkstyle"] and checks["collect_ok"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
