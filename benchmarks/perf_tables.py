"""The tables of benchmarks/perf_gpu.sh, from each kernel's OUT/KERNEL/run.json (`liger-bot perf --out`):

    python -m benchmarks.perf_tables OUT rms_norm layer_norm llama_rms_norm --against llama_rms_norm=rms_norm

Per kernel: every pass and size, Liger before / after / eager / torch.compile, the variants and the final gates.
`--against A=B`: kernel A's own measurement (its v0) beside kernel B's v0 at the sizes both timed, e.g. the generated
RMSNorm against Liger's hand-written LigerRMSNorm, which the rms_norm run measured.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def load(out: Path, name: str) -> dict | None:
    path = out / name / "run.json"
    return json.loads(path.read_text()) if path.is_file() else None


def kernel_table(name: str, run: dict) -> list[str]:
    measured = run["profile"]["measured"]["times"]
    best = next((v for v in run["variants"] if v["name"] == run["best"]), None)
    after = best["times"] if best else measured["liger"]
    before_methods = (run["profile"]["measured"].get("methods") or {}).get("liger") or {}
    after_methods = (best or {}).get("methods") or before_methods
    skipped = {(p["pass"], p["size"]): p["why"] for p in run.get("not_judged", [])}
    device = run["profile"]["measured"]["device"]["name"]
    lines = [
        f"\n## {name}: best {run['best']} ({best['title'] if best else 'original'}); {run['stop']}; "
        f"{run['seconds']:.0f} s; branch {run['branch'] or '-'}; {device}",
        "| pass | size | liger before ms | after ms | speedup | eager ms | compile ms | after vs compile "
        "| timing before / after | judged |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for pass_name, by_size in measured["liger"].items():
        for size, before in by_size.items():
            new, comp = after[pass_name][size], measured["compile"][pass_name][size]
            timing = f"{_method(before_methods, pass_name, size)} / {_method(after_methods, pass_name, size)}"
            judged = f"not judged: {skipped[pass_name, size]}" if (pass_name, size) in skipped else "judged"
            lines.append(
                f"| {pass_name} | {size} | {before:.4f} | {new:.4f} | {before / new:.2f}x "
                f"| {measured['eager'][pass_name][size]:.4f} | {comp:.4f} | {comp / new:.2f}x | {timing} | {judged} |"
            )
    lines += ["\n| variant | title | status | gain | numeric gate vs v0 | reasons |", "|---|---|---|---|---|---|"]
    for v in run["variants"]:
        gain = f"{v['gain']:+.1%}" if v["gain"] is not None else "-"
        numeric = v.get("numeric") or {}
        checked = f"{'PASS' if numeric.get('ok') else 'FAIL'} {numeric.get('summary', '')[:90]}" if numeric else "-"
        lines.append(
            f"| {v['name']} | {v['title']} | {v['status']} | {gain} | {checked} | {'; '.join(v['reasons'])[:160]} |"
        )
    lines += [f"gate {g['name']}: {g['status']} {g['detail'][:160]}" for g in run["gates"]]
    return lines


def against_table(name: str, run: dict, other_name: str, other: dict) -> list[str]:
    """Both kernels' v0 (what each checkout held), at every (pass, size) both measured: speed relative to B."""
    mine, theirs = run["profile"]["measured"]["times"]["liger"], other["profile"]["measured"]["times"]["liger"]
    lines = [
        f"\n## {name} against {other_name} (each one's v0, same timing code)",
        f"| pass | size | {name} ms | {other_name} ms | {name} speed vs {other_name} |",
        "|---|---|---|---|---|",
    ]
    for pass_name, by_size in mine.items():
        for size, ms in by_size.items():
            if size in theirs.get(pass_name, {}):
                ref = theirs[pass_name][size]
                lines.append(f"| {pass_name} | {size} | {ms:.4f} | {ref:.4f} | {ref / ms:.2f}x |")
    return lines


def _method(methods: dict, pass_name: str, size: str) -> str:
    return (methods.get(pass_name) or {}).get(size, "-")


def tables(out: Path, names: list[str], against: list[str]) -> list[str]:
    lines = []
    for name in names:
        run = load(out, name)
        lines += kernel_table(name, run) if run else [f"\n## {name}: no run.json (see {name}.log)"]
    for pair in against:
        name, other_name = pair.split("=")
        run, other = load(out, name), load(out, other_name)
        if run and other:
            lines += against_table(name, run, other_name, other)
        else:
            lines.append(f"\n## {name} against {other_name}: a run.json is missing")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("kernels", nargs="+")
    parser.add_argument("--against", action="append", default=[], help="A=B: kernel A's v0 beside kernel B's")
    args = parser.parse_args(argv)
    print("\n".join(tables(args.out, args.kernels, args.against)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
