"""Autopatch models liger-kernel 0.8.5 does not support, each on its own branch of one fresh checkout (CPU gates).

    python -m benchmarks.autopatch_new_models [MODEL ...] [--all] [--workdir DIR] [--json PATH] [--timing MODEL]

Prints one row per model (result, category, seconds, gates, why) as a markdown table, leaves the branches in
DIR/liger-kernel, and times `understand` for `--timing MODEL` in this process (the first, cold call, then the median
of 5 more). `--all`: every decoder-only causal LM of the installed transformers the checkout's registry lacks
(`breadth_models`: a *ForCausalLM class, neither a masked LM nor an encoder-decoder). `--json PATH` writes the rows.
For the GPU convergence run, benchmarks/prepare_convergence.sh combines the passing branches.
"""

from __future__ import annotations

import argparse
import json
import re
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


def breadth_models(checkout: target.Checkout) -> list[str]:
    """Every causal LM of the installed transformers that the checkout does not patch and that resolve accepts as
    decoder-only (a *ForCausalLM class, neither a masked LM nor an encoder-decoder), by rule, not by hand."""
    from pipelines.autopatch.resolve import mappings
    from pipelines.autopatch.scan import causal_lms
    from pipelines.autopatch.supported import supported_models

    maps, supported = mappings(), set(supported_models(checkout.monkey_patch))
    return [
        model
        for model, cls in causal_lms().items()
        if model not in supported and cls.endswith("ForCausalLM") and model not in maps.masked | maps.seq2seq
    ]


def category(profile) -> str:
    """hybrid (some layers mix without attention, or have no MLP), moe, layernorm or rms: the issue's four."""
    from pipelines.autopatch.resolve import resolve
    from pipelines.autopatch.understand import read_facts

    facts = read_facts(resolve(profile.model_type))
    if facts.attn_attr is None or facts.attn_attr in facts.optional_norms or not facts.mlp_attr:
        return "hybrid"
    if profile.value("structure") in ("moe", "hybrid"):
        return "moe"
    return "layernorm" if profile.value("norm_type") == "layer" else "rms"


def _failure(gate) -> str:
    """The line of a failed gate's detail that says why (the exception or assertion, not pytest's summary)."""
    lines = [line.strip() for line in gate.detail.splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^(E\s+)?[\w.]*(Error|Exception|Failed)\b.*:", line)]
    said = raised[-1:] or [line for line in lines if line.startswith(("E ", "FAILED"))]
    return (said[0] if said else lines[-1] if lines else gate.detail)[:240]


def run_one(checkout: target.Checkout, model: str) -> dict:
    started = time.monotonic()
    kind = ""
    try:
        profile = understand_model(model, checkout)
        kind = category(profile)
        result = run_pipeline(checkout, profile, lambda _: None, verify.LocalRunner(False))
    except PipelineError as exc:
        return {
            "model": model,
            "result": "refused",
            "category": kind,
            "seconds": time.monotonic() - started,
            "why": exc.message,
        }
    except Exception as exc:  # understand or the model's own code crashed: report it, go on with the next
        return {
            "model": model,
            "result": "error",
            "category": kind,
            "seconds": time.monotonic() - started,
            "why": repr(exc)[:200],
        }
    gates = {g.name: g.status.value for g in result.gates}
    failed = [g for g in result.gates if g.status is GateStatus.FAIL]
    return {
        "model": model,
        "result": "OK" if result.ok else "FAILED",
        "category": kind,
        "seconds": time.monotonic() - started,
        "gates": gates,
        "why": _failure(failed[0]) if failed else "",
        "notes": conservative_choices(result.pr_body),
    }


def conservative_choices(pr_body: str) -> list[str]:
    """The PR body's "Conservative choices" bullets: the kernels act left unpatched, and why."""
    section = pr_body.split("### Conservative choices", 1)[1:]
    text = section[0].split("\n### ", 1)[0] if section else ""
    return [line[2:] for line in text.splitlines() if line.startswith("- ")]


def table(rows: list[dict]) -> str:
    lines = [
        "| model | category | result | s | " + " | ".join(CPU_GATES) + " | why / left out |",
        "|---|---|---|---|" + "---|" * len(CPU_GATES) + "---|",
    ]
    for r in rows:
        gates = " | ".join(r.get("gates", {}).get(g, "-") for g in CPU_GATES)
        left = [n.split(". Why:")[0].removeprefix("Left out: ") for n in r.get("notes", []) if n.startswith("Left out")]
        why = (r.get("why") or ("left out: " + "; ".join(left) if left else "")).replace("|", "\\|")[:260]
        lines.append(
            f"| {r['model']} | {r.get('category', '')} | {r['result']} | {r['seconds']:.1f} | {gates} | {why} |"
        )
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
    parser.add_argument("models", nargs="*")
    parser.add_argument("--all", action="store_true", help="every unsupported decoder-only causal LM (breadth_models)")
    parser.add_argument("--json", type=Path, help="write the rows here as JSON")
    parser.add_argument("--from-json", type=Path, nargs="*", help="print the table of rows written before (no run)")
    parser.add_argument("--passing", type=Path, help="write `model category` per model whose CPU gates pass")
    parser.add_argument("--workdir", type=Path, default=Path(f"out/new-models-{time.strftime('%Y%m%d-%H%M%S')}"))
    parser.add_argument("--timing", help="time understand for this model (in process, median of 5)")
    args = parser.parse_args(argv)
    if args.timing:
        first, median = time_understand(args.timing)
        print(f"understand {args.timing}: first call {first:.2f}s, then median of 5: {median:.2f}s", flush=True)
    if args.from_json:
        rows = [row for path in args.from_json for row in json.loads(path.read_text())]
        return report(rows, args.passing)
    checkout = target.fetch(args.workdir / "liger-kernel")
    models = breadth_models(checkout) if args.all else args.models or list(CANDIDATES)
    rows = []
    for model in models:
        rows.append(run_one(checkout, model))
        print(f"{model}: {rows[-1]['result']} in {rows[-1]['seconds']:.1f}s", flush=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    report(rows, args.passing)
    print(f"branches in {checkout.root}")
    return 0


def report(rows: list[dict], passing: Path | None) -> int:
    print("\n" + table(rows))
    passed = [r for r in rows if r["result"] == "OK"]
    names = [r["model"] for r in passed]
    print(f"\n{len(passed)} of {len(rows)} pass import, instance patching, CPU numerics and checkstyle: {names}")
    for kind in ("rms", "moe", "layernorm", "hybrid"):
        print(f"  {kind}: {sum(1 for r in passed if r.get('category') == kind)} pass")
    outcomes = {
        result: sum(1 for r in rows if r["result"] == result) for result in ("OK", "FAILED", "refused", "error")
    }
    print(f"  outcomes: {outcomes}")
    if passing:
        passing.write_text("".join(f"{r['model']} {r['category']}\n" for r in passed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
