"""Autopatch models liger-kernel 0.8.5 does not support, each on its own branch of one fresh checkout (CPU gates).

    python -m benchmarks.autopatch_new_models [MODEL ...] [--workdir DIR] [--timing MODEL]

Prints one row per model (result, seconds, gates) as a markdown table, leaves the branches in DIR/liger-kernel,
and times `understand` for `--timing MODEL` in this process (the first, cold call, then the median of 5 more).
For the GPU convergence run, benchmarks/prepare_convergence.sh combines the passing branches.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from pipelines import target
from pipelines.autopatch import verify
from pipelines.autopatch.pipeline import run_pipeline
from pipelines.autopatch.pipeline import understand_model
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError

# The six that passed before, flex_olmo and glm4_moe, hyperclovax (now refused: its forward scales the logits),
# and more text causal LMs of transformers 5.24 of the shapes Liger covers (dense, MoE, LayerNorm, ReLU^2, Gemma).
CANDIDATES = (
    "hyperclovax",
    "olmoe",
    "ministral3",
    "qwen2_moe",
    "helium",
    "ernie4_5",
    "flex_olmo",
    "glm4_moe",
    "seed_oss",
    "arcee",
    "vaultgemma",
    "minimax",
    "exaone_moe",
    "solar_open",
    "stablelm",
)
CPU_GATES = (verify.CHECKSTYLE, "Import", "Instance patching", verify.WHOLE_MODEL, verify.CPU_NUMERICS)


def run_one(checkout: target.Checkout, model: str) -> dict:
    started = time.monotonic()
    try:
        profile = understand_model(model, checkout)
        result = run_pipeline(checkout, profile, lambda _: None, verify.LocalRunner(False))
    except PipelineError as exc:
        return {"model": model, "result": "refused", "seconds": time.monotonic() - started, "why": exc.message}
    except Exception as exc:  # understand or the model's own code crashed: report it, go on with the next
        return {"model": model, "result": "error", "seconds": time.monotonic() - started, "why": repr(exc)[:200]}
    gates = {g.name: g.status.value for g in result.gates}
    failed = [g for g in result.gates if g.status is GateStatus.FAIL]
    return {
        "model": model,
        "result": "OK" if result.ok else "FAILED",
        "seconds": time.monotonic() - started,
        "gates": gates,
        "why": failed[0].detail.splitlines()[-1][:200] if failed else "",
        "notes": conservative_choices(result.pr_body),
    }


def conservative_choices(pr_body: str) -> list[str]:
    """The PR body's "Conservative choices" bullets: the kernels act left unpatched, and why."""
    section = pr_body.split("### Conservative choices", 1)[1:]
    text = section[0].split("\n### ", 1)[0] if section else ""
    return [line[2:] for line in text.splitlines() if line.startswith("- ")]


def table(rows: list[dict]) -> str:
    lines = [
        "| model | result | s | " + " | ".join(CPU_GATES) + " | why / notes |",
        "|---|---|---|" + "---|" * len(CPU_GATES) + "---|",
    ]
    for r in rows:
        gates = " | ".join(r.get("gates", {}).get(g, "-") for g in CPU_GATES)
        notes = " ".join(r.get("notes", []))
        why = (r.get("why") or notes).replace("|", "\\|")[:220]
        lines.append(f"| {r['model']} | {r['result']} | {r['seconds']:.1f} | {gates} | {why} |")
    return "\n".join(lines)


def time_understand(model: str, repeats: int = 5) -> tuple[float, float]:
    """(first call, median of `repeats` more) of `understand` in this process, interpreter start excluded."""
    from pipelines.autopatch.understand import understand

    started = time.perf_counter()
    understand(model)
    first = time.perf_counter() - started
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        understand(model)
        times.append(time.perf_counter() - started)
    return first, statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(CANDIDATES))
    parser.add_argument("--workdir", type=Path, default=Path(f"out/new-models-{time.strftime('%Y%m%d-%H%M%S')}"))
    parser.add_argument("--timing", help="time understand for this model (in process, median of 5)")
    args = parser.parse_args(argv)
    if args.timing:
        first, median = time_understand(args.timing)
        print(f"understand {args.timing}: first call {first:.2f}s, then median of 5: {median:.2f}s", flush=True)
    checkout = target.fetch(args.workdir / "liger-kernel")
    rows = []
    for model in args.models:
        rows.append(run_one(checkout, model))
        print(f"{model}: {rows[-1]['result']} in {rows[-1]['seconds']:.1f}s", flush=True)
    print("\n" + table(rows))
    passed = [r["model"] for r in rows if r["result"] == "OK"]
    print(f"\n{len(passed)} of {len(rows)} pass import, instance patching, CPU numerics and checkstyle: {passed}")
    print(f"branches in {checkout.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
