"""`liger-bot demo recsys --forms`: the encoder written five ways, each compiled with our pass, beside the
hand-written alternatives (nn.EmbeddingBag eager and compiled, segment_reduce and index_add under plain
torch.compile), in one run.

Each variant runs in its own child process stopped at a time limit: a form whose compile does not finish is reported
as such ("did not finish in N s"), never awaited, and a crash is reported with its error. The variants alternate over
several rounds (the order rotates each round). The step is host-bound on a GPU (about 1.5 ms, most of it launches), and
two processes of the same variant differ by up to 20% on a shared host (H200, fourteenth session): more than the
differences being judged. So the speed figures come from one more child that holds every variant that ran, compiled,
and alternates them step by step (the order rotating each step), so that drift falls on all of them alike; a form is
at least as fast as the best alternative when its median step there is within THRESHOLD of that alternative's. The
per-process medians are reported beside it.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch

from pipelines.fuse import recsys

THRESHOLD = 0.03  # within 3% of the best alternative's median step counts as "at least as fast" (host noise)
FORM_LIMIT_S = 90.0  # per child: compile + steps
INTERLEAVED_LIMITS = 3  # the interleaved child compiles every variant: it gets this many per-variant limits


@dataclass(frozen=True)
class Variant:
    label: str
    encoder: str  # a class of pipelines.fuse.recsys
    how: str  # "pass" (torch.compile with our pass), "compile" (plain torch.compile) or "eager"

    @property
    def is_form(self) -> bool:
        return self.how == "pass"


VARIANTS = (
    Variant("naive loop + pass", "NaiveEncoder", "pass"),
    Variant("split + pass", "SplitEncoder", "pass"),
    Variant("padded mask + pass", "PaddedMaskEncoder", "pass"),
    Variant("segment_reduce + pass", "SegmentReduceEncoder", "pass"),
    Variant("index_add + pass", "IndexAddEncoder", "pass"),
    Variant("EmbeddingBag eager", "EmbeddingBagEncoder", "eager"),
    Variant("EmbeddingBag compiled", "EmbeddingBagEncoder", "compile"),
    Variant("segment_reduce compiled", "SegmentReduceEncoder", "compile"),
    Variant("index_add compiled", "IndexAddEncoder", "compile"),
)
BY_LABEL = {v.label: v for v in VARIANTS}


def measure(variant: Variant, device: str, steps: int, inner: str) -> dict:
    """In this process: the first (compiling) step's gradients against the same encoder in eager, then the median
    step of `steps` more."""
    size = recsys.DemoSize.for_device(device)
    data = recsys.batches(size, steps + 1, device)
    torch.manual_seed(0)
    eager = getattr(recsys, variant.encoder)(size).to(device)
    model = _built(variant, copy.deepcopy(eager), inner)
    loss, grads = recsys.first_step_grads(model, data[0])
    eager_loss, eager_grads = recsys.first_step_grads(eager, data[0])
    grads_match = all(torch.allclose(grads[k], eager_grads[k], rtol=1e-4, atol=1e-5) for k in eager_grads)
    _, step_ms = recsys.timed_steps(model, data[1:], device)
    result = {"step_ms": round(step_ms, 4), "grads_match": bool(grads_match)}
    result["loss_max_abs_diff"] = (loss - eager_loss).abs().item()
    stats = getattr(model, "liger_fuse_stats", None)
    if stats is not None:
        result |= {"replaced": stats.replaced, "declined": stats.declined_reasons}
        result |= {"graphs_compiled": stats.graphs_compiled, "loops_captured": stats.loops_captured}
    return result


def measure_interleaved(variants: list[Variant], device: str, steps: int, inner: str) -> dict[str, float]:
    """In this process: every variant built from one set of weights and compiled (its first step), then `steps`
    rounds of one training step per variant, the order rotating each round; {label: median ms/step}."""
    size = recsys.DemoSize.for_device(device)
    data = recsys.batches(size, steps + 1, device)
    torch._dynamo.reset()
    torch.manual_seed(0)
    weights = recsys.NaiveEncoder(size).to(device).state_dict()  # every encoder has the same parameters
    models, optimizers = {}, {}
    for variant in variants:
        model = getattr(recsys, variant.encoder)(size).to(device)
        model.load_state_dict(weights)
        models[variant.label] = _built(variant, model, inner, reset=False)
        optimizers[variant.label] = torch.optim.SGD(models[variant.label].parameters(), lr=1e-3)
        recsys.train_step(models[variant.label], optimizers[variant.label], data[0])
    labels = list(models)
    times: dict[str, list[float]] = {label: [] for label in labels}
    for index, batch in enumerate(data[1:]):
        shift = index % len(labels)
        for label in labels[shift:] + labels[:shift]:
            times[label].append(recsys.timed_step(models[label], optimizers[label], batch, device))
    return {label: round(statistics.median(t) * 1e3, 4) for label, t in times.items()}


def _built(variant: Variant, model, inner: str, reset: bool = True):
    if variant.how == "eager":
        return model
    if reset:  # one variant per process; the interleaved child keeps every variant's compiled code
        torch._dynamo.reset()
    if variant.how == "compile":
        return torch.compile(model, backend=inner)
    from pipelines.fuse.runtime import compile as fuse_compile

    return fuse_compile(model, inner=inner)


def run_child(variant: Variant, device: str, steps: int, inner: str, limit_s: float) -> dict:
    """`measure` in a child process stopped at `limit_s`: {"status": "ok" | "timeout" | "crashed", ...}."""
    return _child(["--variant", variant.label], device, steps, inner, limit_s)


def run_interleaved(variants: list[Variant], device: str, steps: int, inner: str, limit_s: float) -> dict:
    """`measure_interleaved` in a child process stopped at `limit_s`: {"status": ..., "step_ms": {label: ms}}."""
    return _child(["--interleave", *[v.label for v in variants]], device, steps, inner, limit_s)


def _child(selection: list[str], device: str, steps: int, inner: str, limit_s: float) -> dict:
    command = [sys.executable, "-m", "pipelines.fuse.demo_forms", *selection, "--device", device]
    command += ["--steps", str(steps), "--inner", inner]
    env = {**os.environ, "TRITON_INTERPRET": "1"} if device == "cpu" else dict(os.environ)
    try:
        child = subprocess.run(
            command,
            cwd=Path(__file__).resolve().parents[2],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            timeout=limit_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "note": f"did not finish in {limit_s:.0f} s (stopped)"}
    lines = [line for line in child.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"status": "crashed", "note": f"exit {child.returncode} with no report"}
    return json.loads(lines[-1])


def run(
    device: str,
    steps: int,
    rounds: int,
    inner: str | None = None,
    limit_s: float = FORM_LIMIT_S,
    only: list[str] | None = None,
    on_result=None,
    interleave: bool = True,
) -> dict:
    inner = inner or ("inductor" if device == "cuda" else "aot_eager")
    chosen = [v for v in VARIANTS if only is None or v.label in only]
    results: dict[str, list[dict]] = {v.label: [] for v in chosen}
    interleaved, interrupted = None, False
    try:
        for round_index in range(rounds):
            shift = round_index % len(chosen)
            for variant in chosen[shift:] + chosen[:shift]:
                earlier = results[variant.label]
                if earlier and earlier[-1]["status"] != "ok":
                    continue  # a timeout or crash is not retried: one is the finding
                result = run_child(variant, device, steps, inner, limit_s)
                earlier.append(result)
                if on_result:
                    on_result(variant.label, round_index, result)
        ran = [v for v in chosen if results[v.label] and results[v.label][-1]["status"] == "ok"]
        if interleave and len(ran) > 1:
            interleaved = run_interleaved(ran, device, steps, inner, limit_s * INTERLEAVED_LIMITS)
            if on_result:
                on_result("interleaved", rounds, interleaved)
    except KeyboardInterrupt:  # Ctrl-C or the caller's timeout: what finished is reported, not lost
        interrupted = True
    return summarise(device, inner, steps, rounds, results, interleaved) | {"interrupted": interrupted}


def summarise(
    device: str, inner: str, steps: int, rounds: int, results: dict[str, list[dict]], interleaved: dict | None = None
) -> dict:
    rows = {label: _row(runs) for label, runs in results.items()}
    judged = "median_ms"
    if interleaved and interleaved["status"] == "ok":
        judged = "interleaved_ms"
        for label, ms in interleaved["step_ms"].items():
            rows[label]["interleaved_ms"] = ms
    alternatives = {k: r for k, r in rows.items() if not BY_LABEL[k].is_form and r.get(judged) is not None}
    best_label = min(alternatives, key=lambda k: alternatives[k][judged]) if alternatives else None
    best_ms = alternatives[best_label][judged] if best_label else None
    for label, row in rows.items():
        if not BY_LABEL[label].is_form or best_ms is None or row.get(judged) is None:
            continue
        row["vs_best"] = round(best_ms / row[judged], 3)
        row["at_least_as_fast"] = row[judged] <= best_ms * (1 + THRESHOLD)
    forms = [rows[v.label] for v in VARIANTS if v.is_form and v.label in rows]
    return {
        "device": device,
        "compiler": inner,
        "steps": steps,
        "rounds": rounds,
        "judged_by": "interleaved in one process" if judged == "interleaved_ms" else "per-process medians",
        "interleaved": interleaved,
        "threshold": THRESHOLD,
        "best_alternative": best_label,
        "best_alternative_ms": best_ms,
        "variants": rows,
        "none_crashed": all(r["status"] != "crashed" for r in rows.values()),
        "grads_match": all(r.get("grads_match", True) for r in rows.values()),
        "forms_at_least_as_fast": sum(bool(r.get("at_least_as_fast")) for r in forms),
        "forms": len(forms),
    }


def _row(runs: list[dict]) -> dict:
    ok = [r for r in runs if r["status"] == "ok"]
    last = runs[-1] if runs else {"status": "not run"}
    row = {"status": last["status"], "rounds_ok": len(ok)}
    if last["status"] != "ok":
        row["note"] = last.get("note", "")
    if ok:
        row["median_ms"] = round(statistics.median(r["step_ms"] for r in ok), 4)
        row["round_ms"] = [r["step_ms"] for r in ok]
        row["grads_match"] = all(r["grads_match"] for r in ok)
        for key in ("replaced", "declined", "graphs_compiled", "loops_captured"):
            if key in ok[-1]:
                row[key] = ok[-1][key]
    return row


def to_text(report: dict) -> str:
    lines = [
        f"recsys encoder written five ways on {report['device']} ({report['compiler']}, {report['steps']} steps x "
        f"{report['rounds']} alternating rounds, each variant in its own process; then all in one process, "
        f"alternating step by step; judged by: {report['judged_by']})",
        f"  {'variant':26} {'own process':>12} {'interleaved':>12}  {'vs best':>8}  notes",
    ]
    interleaved = report.get("interleaved") or {}
    if interleaved.get("status") not in (None, "ok"):
        lines.append(f"  interleaved run: {interleaved['status']} {interleaved.get('note', '')}")
    for label, row in report["variants"].items():
        ms = f"{row['median_ms']:12.3f}" if "median_ms" in row else f"{'-':>12}"
        ms += f" {row['interleaved_ms']:12.3f}" if "interleaved_ms" in row else f" {'-':>12}"
        vs = f"{row['vs_best']:7.2f}x" if "vs_best" in row else f"{'':8}"
        notes = row.get("note") or ""
        if "replaced" in row:
            notes = "replaced: " + (", ".join(f"{k} x{v}" for k, v in row["replaced"].items()) or "nothing")
            if row.get("declined"):
                notes += "; left alone: " + ", ".join(row["declined"])
            notes += f"; {row['graphs_compiled']} graphs"
        if row.get("grads_match") is False:
            notes += " GRADIENTS DIFFER"
        lines.append(f"  {label:26} {ms}  {vs}  {notes}")
    if report.get("interrupted"):
        lines.append("  INTERRUPTED: the variants above are those that finished; the rest did not run")
    lines.append(
        f"  best alternative: {report['best_alternative']}; forms at least as fast (within "
        f"{100 * report['threshold']:.0f}%): {report['forms_at_least_as_fast']} of {report['forms']}; "
        f"none crashed: {report['none_crashed']}"
    )
    return "\n".join(lines)


if __name__ == "__main__":  # one variant's child process (see run_child)
    parser = argparse.ArgumentParser()
    selection = parser.add_mutually_exclusive_group(required=True)
    selection.add_argument("--variant", choices=list(BY_LABEL))
    selection.add_argument("--interleave", nargs="+", choices=list(BY_LABEL))
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--inner", required=True)
    args = parser.parse_args()
    try:
        if args.interleave:
            chosen = [BY_LABEL[label] for label in args.interleave]
            report = {"status": "ok", "step_ms": measure_interleaved(chosen, args.device, args.steps, args.inner)}
        else:
            report = {"status": "ok", **measure(BY_LABEL[args.variant], args.device, args.steps, args.inner)}
    except Exception as error:  # the finding is the crash: reported, not raised
        report = {"status": "crashed", "note": f"{type(error).__name__}: {str(error)[:300]}"}
        traceback.print_exc()
    print(json.dumps(report), flush=True)
