"""The shipped GPU path at scale: `liger-bot verify --pipeline autopatch` (the installed entry point, as the verify
workflow runs it) on every model's branch, several models at a time, with one table at the end.

    python3 benchmarks/autopatch_gpu.py DIR OUT [--models M ...] [--parallel 4] [--deadline 520]
        [--kernel-repo DIR --kernel NAME]

DIR is what benchmarks/prepare_convergence.sh wrote (DIR/liger-kernel.git holds `liger-bot/autopatch-<model>` for
every model, DIR/models.txt the models). Each model's branch is cloned into its own work tree and verified there:
checkstyle, import, instance patching, the whole-model gate on the GPU, convergence (the four files in one pytest
run, one xdist worker per file). Reports go to OUT/<model>.json, the table to OUT/table.md, everything to
OUT/summary.json. A model still running at the deadline is stopped and reported as such. `--kernel-repo` adds
`liger-bot verify --pipeline kernel` on that checkout's `liger-bot/kernel-<NAME>` branch.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def verify(pipeline: str, target: str, work: Path, out: Path, deadline: float) -> dict:
    runs = out / "runs" / f"{pipeline}-{target}"  # three folders down: kept on the host, summary.json holds it all
    runs.mkdir(parents=True, exist_ok=True)
    report = runs / "report.json"
    argv = ["liger-bot", "verify", "--repo", str(work), "--pipeline", pipeline, "--target", target]
    argv += ["--job-id", f"gpu-{target}", "--report", str(report)]
    started = time.monotonic()
    log = (runs / "verify.log").open("w")
    proc = subprocess.Popen(argv, cwd=work, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc = "deadline"
    row = {"target": target, "pipeline": pipeline, "rc": rc, "seconds": round(time.monotonic() - started, 1)}
    log_text = (runs / "verify.log").read_text()
    if report.is_file():
        gates = json.loads(report.read_text())["gates"]
        row["gates"] = {g["name"]: {"status": g["status"], "detail": g["detail"][:1500]} for g in gates}
    else:  # stopped at the deadline: the verdicts verify printed as each gate landed
        row["gates"] = gates_from_log(log_text)
    row["log_tail"] = log_text[-1500:]
    write_rows(out, row)
    return row


GATE_LINE = re.compile(r"verify: (?P<name>[^:]+): (?P<status>PASS|FAIL|SKIP): (?P<detail>.*)")


def gates_from_log(text: str) -> dict:
    found = (GATE_LINE.search(line) for line in text.splitlines())
    return {m["name"]: {"status": m["status"], "detail": m["detail"]} for m in found if m}


ROWS: list[dict] = []
ROWS_LOCK = threading.Lock()


def write_rows(out: Path, row: dict) -> None:
    """summary.json and table.md after every model: a call cut short keeps every model that finished."""
    with ROWS_LOCK:
        ROWS.append(row)
        (out / "summary.json").write_text(json.dumps(ROWS, indent=2))
        (out / "table.md").write_text(table(ROWS) + "\n")


def clone(bare: Path, branch: str, work: Path) -> Path:
    if work.exists():
        shutil.rmtree(work)
    subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", "clone", "-q", "-b", branch, str(bare), str(work)], check=True
    )
    return work


def table(rows: list[dict]) -> str:
    names = []
    for row in rows:
        names += [n for n in row.get("gates", {}) if n not in names]
    lines = ["| target | s | exit | " + " | ".join(names) + " |", "|---|---|---|" + "---|" * len(names)]
    for row in rows:
        cells = [row.get("gates", {}).get(n, {}).get("status", "-") for n in names]
        lines.append(f"| {row['target']} | {row['seconds']} | {row['rc']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def version_mismatch(cpu_checks: Path) -> str:
    """Why this host cannot judge DIR's patches, or "": they were written against the transformers recorded by
    prepare_convergence, and another release (the image's own, when the wheel was not carried) fails for reasons
    that are not the patch's."""
    import transformers

    wanted = json.loads(cpu_checks.read_text()).get("generated_with", {}).get("transformers")
    if wanted is None or wanted == transformers.__version__:
        return ""
    return (
        f"the patches were generated against transformers {wanted}, this host has {transformers.__version__} "
        f"({transformers.__file__}): carry transformers=={wanted} in .whl"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--models", nargs="*")
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--deadline", type=float, default=520)
    parser.add_argument("--kernel-repo", type=Path)
    parser.add_argument("--kernel")
    args = parser.parse_args()
    deadline = time.monotonic() + args.deadline
    args.out.mkdir(parents=True, exist_ok=True)
    models = args.models or (args.dir / "models.txt").read_text().split()
    mismatch = version_mismatch(args.dir / "cpu-checks.json")
    if mismatch:
        print(f"autopatch_gpu: refused: {mismatch}", file=sys.stderr)
        return 2
    work = Path(os.environ.get("WORK", "/tmp/liger-bot-gpu"))
    jobs = []
    if args.kernel_repo and args.kernel:
        kernel_work = clone(args.kernel_repo, f"liger-bot/kernel-{args.kernel}", work / f"kernel-{args.kernel}")
        jobs.append(("kernel", args.kernel, kernel_work))
    for model in models:
        jobs.append(
            ("autopatch", model, clone(args.dir / "liger-kernel.git", f"liger-bot/autopatch-{model}", work / model))
        )
    with ThreadPoolExecutor(args.parallel) as pool:
        rows = list(pool.map(lambda job: verify(*job, args.out, deadline), jobs))
    print(table(rows))
    for row in rows:
        for name, gate in row.get("gates", {}).items():
            if gate["status"] == "FAIL":
                print(f"{row['target']} / {name}: {gate['detail'][:400]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
