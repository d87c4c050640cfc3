"""What the perf pipeline writes for people: variant notes (before and after), the comparison, the PR body."""

from __future__ import annotations

import csv
import io
import math

from pipelines.outcome import Report
from pipelines.perf import rules as rules_mod
from pipelines.pull_request import BodyParts
from pipelines.pull_request import render

PASSES = ("forward", "backward", "full")


def table_text(table: dict) -> str:
    parts = []
    for pass_name, by_block in table.items():
        for block, (warps, stages) in sorted(by_block.items()):
            shown = ", ".join(
                x for x in (f"num_warps={warps}" if warps else "", f"num_stages={stages}" if stages else "") if x
            )
            parts.append(f"{pass_name} BLOCK_SIZE {block}: {shown}")
    return "; ".join(parts)


DRY_RUN = (
    "A CPU dry run under TRITON_INTERPRET=1: times are wall-clock medians of the interpreter and torch.compile ran "
    "with aot_eager. It tests the pipeline; no figure here is a speed claim."
)


def dry_run(out_dir) -> bool:
    return (out_dir / ".interpret").exists()


def notes_before(name, title, based_on, hypothesis, changes, expected, profile, out_dir) -> str:
    return "\n".join(
        [
            f"# {profile.source.name} {name}: {title}",
            "",
            *([f"> {DRY_RUN}", ""] if dry_run(out_dir) else []),
            f"Based on: {based_on}. Target: `{profile.target_pass}` at {', '.join(s.key for s in profile.target_sizes)}.",
            f"Profile: {profile.classification()}",
            "",
            "## Hypothesis",
            hypothesis,
            "",
            "## Changes",
            changes,
            "",
            "## Expected outcome",
            expected,
            "",
        ]
    )


def _delta(new, old) -> str:
    return f"{(new / old - 1) * 100:+.1f}%" if new and old else "-"


def judged_cell(rules: rules_mod.Rules, pass_name: str, size: str) -> str:
    """'judged', or 'not judged: WHY' for a point the guardrails leave out (launch-bound in the baseline)."""
    why = next((w for p, s, w in rules.not_judged if p == pass_name and s == size), None)
    return "judged" if why is None else f"not judged: {why}"


def method_of(methods: dict | None, pass_name: str, size: str) -> str:
    return ((methods or {}).get(pass_name) or {}).get(size) or "-"


def baseline_methods(loop) -> dict | None:
    return (loop.profile.measured.get("methods") or {}).get("liger")


def not_judged_list(rules: rules_mod.Rules) -> str:
    """The points measured but never the basis of a rejection, with the reason (empty when every point is judged)."""
    if not rules.not_judged:
        return ""
    lines = [f"- {p} {s}: not judged: {why}" for p, s, why in rules.not_judged]
    head = (
        f"Not judged (shown, never the basis of a rejection; a point is launch-bound when its baseline takes over "
        f"{rules_mod.LAUNCH_BOUND_K:g}x what its bytes need at the copy ceiling, or under "
        f"{rules_mod.LAUNCH_FLOOR_US:g} us):"
    )
    return "\n".join([head, "", *lines]) + "\n"


def notes_after(record, baseline: dict, rules: rules_mod.Rules, compiled: dict) -> str:
    lines = ["## Actual results", ""]
    numeric = record.numeric
    if record.times is None and numeric and not numeric.get("ok") and record.tests.get("ok"):
        lines.append(f"Tests: {record.tests.get('summary', '')}")
        lines.append(f"NUMERIC GATE FAILED (against v0, {numeric.get('dtype', '')}): {numeric.get('summary', '')}")
    elif record.times is None:
        lines.append(f"TESTS FAILED: {record.tests.get('summary', '')}")
    else:
        lines.append(f"Tests: {record.tests.get('summary', '')}")
        if numeric:
            lines.append(f"Numeric gate (against v0, {numeric.get('dtype', '')}): PASS, {numeric.get('summary', '')}")
        lines += ["", "| pass | size | v0 ms | this ms | vs v0 | torch.compile ms | timing | judged |"]
        lines.append("|---|---|---|---|---|---|---|---|")
        for pass_name, by_size in record.times.items():
            for size, ms in by_size.items():
                old = baseline.get(pass_name, {}).get(size)
                lines.append(
                    f"| {pass_name} | {size} | {old:.4f} | {ms:.4f} | {_delta(ms, old)} "
                    f"| {compiled.get(pass_name, {}).get(size, math.nan):.4f} "
                    f"| {method_of(record.methods, pass_name, size)} | {judged_cell(rules, pass_name, size)} |"
                )
    if record.facts:
        lines += ["", facts_table(record.facts)]
    verdict = record.verdict
    lines += ["", "## Verdict", f"{verdict.status} (gain on the target vs {record.based_on}: {verdict.gain:+.2%})"]
    lines += [f"- {r}" for r in verdict.reasons]
    lines += ["", "## Learnings", _learning(record, rules), ""]
    return "\n".join(lines)


def facts_table(facts: list[dict]) -> str:
    """Triton's compiled kernels: registers, spills and shared memory per specialisation."""
    rows = ["| kernel | constants | warps | stages | regs | spills | shared B |", "|---|---|---|---|---|---|---|"]
    for f in facts:
        if "error" in f:
            rows.append(f"| `{f['kernel']}` | {f['error']} | | | | | |")
            continue
        consts = ", ".join(f"{k}={v}" for k, v in f["constants"].items() if k.isupper() or "rows" in k)
        rows.append(
            f"| `{f['kernel']}` | {consts} | {f['num_warps']} | {f['num_stages']} | {f['n_regs']} | {f['n_spills']} "
            f"| {f['shared']} |"
        )
    return "\n".join(rows)


def _learning(record, rules) -> str:
    verdict = record.verdict
    if verdict.status == rules_mod.REJECTED:
        return "Rejected: the next variant builds on " + record.based_on + " instead."
    if verdict.gain < rules.min_gain:
        return f"Under {rules.min_gain:.0%} on the target: this lever is not what limits the kernel here."
    return "Kept: later variants build on this one."


def comparison(loop) -> str:
    target = loop.rules.target_pass
    keys = [s.key for s in loop.profile.target_sizes]
    header = "| variant | title | based on | " + " | ".join(f"{target} {k} ms" for k in keys) + " | verdict |"
    rows = [header, "|" + "---|" * (4 + len(keys))]
    v0 = loop.times["v0"]
    rows.append("| v0 | original | - | " + " | ".join(f"{v0[target][k]:.4f}" for k in keys) + " | baseline |")
    for record in loop.records:
        if record.skipped:
            rows.append(
                f"| - | {record.title} | - | "
                + " | ".join("-" for _ in keys)
                + f" | not applicable: {record.skipped} |"
            )
            continue
        cells = [
            f"{record.times[target][k]:.4f} ({_delta(record.times[target][k], v0[target][k])})" if record.times else "-"
            for k in keys
        ]
        why = "; ".join(record.verdict.reasons)
        rows.append(
            f"| {record.name} | {record.title} | {record.based_on} | {' | '.join(cells)} | {record.verdict.status} {why} |"
        )
    listed = not_judged_list(loop.rules)
    return "\n".join(rows) + "\n" + (f"\n{listed}" if listed else "")


def before_after(loop) -> str:
    v0, best = loop.times["v0"], loop.times[loop.state.best]
    measured = loop.profile.measured["times"]
    rows = [
        f"bf16 medians of the target's benchmark framework's passes on {loop.gpu} (timing before / after: "
        f"`cudagraph` = replayed from a CUDA graph, `do_bench` = the framework's do_bench where capture failed); "
        f"before = Liger as it is, after = {loop.state.best}",
        "",
        "| pass | rows x hidden | before ms | after ms | speedup | torch eager ms | torch.compile ms "
        "| after vs compile | timing | judged |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    record = next((r for r in loop.records if r.name == loop.state.best), None)
    for pass_name in PASSES:
        for size in v0.get(pass_name, {}):
            old, new = v0[pass_name][size], best[pass_name][size]
            eager = measured["eager"][pass_name][size]
            compiled = measured["compile"][pass_name][size]
            after_method = method_of(record.methods if record else None, pass_name, size)
            timing = f"{method_of(baseline_methods(loop), pass_name, size)} / {after_method}"
            rows.append(
                f"| {pass_name} | {size} | {old:.4f} | {new:.4f} | {old / new:.2f}x | {eager:.4f} | {compiled:.4f} "
                f"| {compiled / new:.2f}x | {timing} | {judged_cell(loop.rules, pass_name, size)} |"
            )
    return "\n".join(rows) + "\n"


def commit_message(loop) -> str:
    best = next(r for r in loop.records if r.name == loop.state.best)
    size = loop.profile.target_sizes[0].key
    ratio = loop.times["v0"][loop.rules.target_pass][size] / loop.times[best.name][loop.rules.target_pass][size]
    return (
        f"perf({loop.profile.source.name}): {loop.rules.target_pass} {ratio:.2f}x at {size} ({best.title})\n\n"
        f"liger-bot perf {loop.profile.source.name} --pass {loop.rules.target_pass}"
    )


def pr_parts(loop, stop: str) -> BodyParts:
    """What the PR says: the winner and its before / after, the variants log and the profile (the gates come from
    the run's Report, in Testing Done)."""
    name, best = loop.profile.source.name, loop.state.best
    summary = []
    if dry_run(loop.out_dir):
        summary += [f"> {DRY_RUN}", ""]
    if best == "v0":
        summary += [f"No variant beat the kernel as it is ({stop}); nothing to change.", ""]
    else:
        record = next(r for r in loop.records if r.name == best)
        summary += [f"Winner **{best}: {record.title}** (built on {record.based_on}). Stopped: {stop}.", ""]
        summary += ["Only `" + str(loop.profile.source.files.ops) + "` changes.", ""]
    summary += ["### Before / after", "", before_after(loop) if best != "v0" else _baseline_table(loop)]
    details = ["<details><summary>Variants</summary>", "", comparison(loop), "", "</details>", ""]
    details += ["<details><summary>Profile</summary>", "", loop.profile.to_markdown(), "", "</details>", ""]
    return BodyParts(
        summary="\n".join(summary),
        details="\n".join(details),
        reproduce=f"liger-bot perf {name} --pass {loop.rules.target_pass} --repo DIR",
    )


def pr_body(loop, stop: str, gates) -> str:
    """The body rendered from `pr_parts` and the gates (no template: the run's own body file uses for_target)."""
    return render(pr_parts(loop, stop), Report(tuple(gates)))


def _baseline_table(loop) -> str:
    measured = loop.profile.measured["times"]
    rows = ["| pass | rows x hidden | liger ms | torch eager ms | torch.compile ms | timing | judged |"]
    rows.append("|---|---|---|---|---|---|---|")
    for pass_name in PASSES:
        for size, ms in measured["liger"].get(pass_name, {}).items():
            rows.append(
                f"| {pass_name} | {size} | {ms:.4f} | {measured['eager'][pass_name][size]:.4f} "
                f"| {measured['compile'][pass_name][size]:.4f} | {method_of(baseline_methods(loop), pass_name, size)} "
                f"| {judged_cell(loop.rules, pass_name, size)} |"
            )
    return "\n".join(rows) + "\n"


def parse_ncu(text: str, metrics) -> dict:
    """Nsight Compute's `--csv --page details` output -> {kernel: {metric: "value unit"}} for the named metrics."""
    start = text.find('"ID"')
    if start < 0:
        return {}
    out: dict = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        metric, kernel = row.get("Metric Name"), row.get("Kernel Name")
        if kernel and metric in metrics:
            out.setdefault(kernel, {})[metric] = f"{row.get('Metric Value', '')} {row.get('Metric Unit', '')}".strip()
    return out
