"""The chunked-loss pipeline's GPU figures through the shipped path: `liger-bot verify --pipeline chunked-loss` (the
installed entry point, as the verify workflow runs it) on every generated loss's branch, all at once, then a solo
benchmark per loss beside Liger's own class, and one table.

    python3 -m benchmarks.chunked_loss_gpu DEST OUT [--losses NAME ...] [--parallel 6] [--timeout 230]
        [--deadline 285] [--solo-min-s 45]

DEST is what benchmarks/chunked_loss_gpu_prepare.sh wrote (DEST/lk holds `liger-bot/chunked-loss-NAME` for every
loss, DEST/losses.txt the losses: NAME BRANCH AGAINST). Each branch is cloned into its own work tree and verified
there: checkstyle, import, the generated tests (on the GPU where there is one), the benchmark (peak memory and time
of one forward + backward against the unfused reference, hidden 4096, vocab 128256, 8 x 1,024 tokens, bf16).

Phase 1 runs the verifies side by side (one GPU): peak memory is per process and exact, the times are contended.
Then Liger's own test file of each leave-one-out loss (prepared with its imports swapped to the generated class) runs
in that loss's clone, all at once. Phase 2, while the deadline allows, runs `python -m pipelines.chunked_loss.bench` alone per loss (leave-one-out
first) with Liger's own class as a third side (`--against`), for uncontended times and Liger's memory. The table goes
to OUT/table.md, all rows (gates, figures, log tails) to OUT/summary.json after every step, and at the end each loss's
folder (report.json, benchmark.json/.md, verify.log, solo/) to OUT/runs.tar.gz: three files, as a device call brings
back at most eight and none below two folders.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.gpu_run import clone
from benchmarks.gpu_run import run_bounded

ROOT = Path(__file__).resolve().parents[1]  # benchmarks.chunked_loss_sides, for Liger's ORPO head


def read_losses(text: str) -> list[dict]:
    """losses.txt: NAME BRANCH [AGAINST] per line (AGAINST: module:Class of Liger's own head, or -)."""
    losses = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        against = words[2] if len(words) > 2 and words[2] != "-" else None
        losses.append({"name": words[0], "branch": words[1], "against": against})
    return losses


def load_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def verify(loss: dict, work: Path, runs_dir: Path, limit: float) -> dict:
    runs = runs_dir / loss["name"]
    runs.mkdir(parents=True, exist_ok=True)
    report = runs / "report.json"
    argv = ["liger-bot", "verify", "--repo", str(work), "--pipeline", "chunked-loss", "--target", loss["name"]]
    argv += ["--job-id", f"gpu-{loss['name']}", "--report", str(report)]
    rc, seconds = run_bounded(argv, work, runs / "verify.log", limit)
    row = {**loss, "rc": rc, "seconds": seconds, "gates": {}}
    data = load_json(report)
    if data:
        row["gates"] = {g["name"]: {"status": g["status"], "detail": g["detail"][:1500]} for g in data["gates"]}
    row["bench"] = load_json(runs / "benchmark.json")  # verify's benchmark gate writes it beside the report
    row["log_tail"] = (runs / "verify.log").read_text(errors="replace")[-1500:]
    return row


def solo_bench(row: dict, work: Path, runs_dir: Path, limit: float) -> None:
    """The shipped benchmark module alone on the GPU, with Liger's own head as a third side where one exists."""
    solo = runs_dir / row["name"] / "solo"
    solo.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pipelines.chunked_loss.bench", "--repo", str(work), "--out", str(solo), row["name"]]
    argv += ["--against", row["against"]] if row["against"] else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)}
    rc, seconds = run_bounded(argv, work, solo / "bench.log", limit, env)
    row["solo_rc"], row["solo_seconds"] = rc, seconds
    row["solo"] = load_json(solo / "benchmark.json")


def liger_tests(row: dict, dest: Path, work: Path, runs_dir: Path, limit: float, workers: int = 1) -> None:
    """Liger's own test file of a leave-one-out loss against the generated class (prepared with its imports
    swapped), on the GPU in the loss's clone: the drop-in claim, checked by the target's own tests."""
    prepared = dest / "liger_tests" / f"{row['name']}.py"
    if not prepared.exists():
        return
    test = work / "test" / "chunked_loss" / f"test_{row['name']}_swapped.py"
    shutil.copyfile(prepared, test)
    select = (dest / "liger_tests" / f"{row['name']}.select").read_text().strip()
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)] + (
        ["-k", select] if select else []
    )
    if workers > 1:  # DPO's 490 cases each compile Liger's chunk: one process does not finish them in a call
        argv += ["-n", str(workers)]
    env = {**os.environ, "PYTHONPATH": f"{work / 'src'}:{work}"}
    log = runs_dir / row["name"] / "liger_tests.log"
    rc, seconds = run_bounded(argv, work, log, limit, env)
    lines = log.read_text(errors="replace").splitlines()
    summary = next((line for line in reversed(lines) if " in " in line and ("passed" in line or "failed" in line)), "")
    failed = [line for line in lines if line.startswith("FAILED")]
    row["liger_tests"] = {"rc": rc, "seconds": seconds, "summary": summary.strip("= "), "failed": failed[:10]}


def cuda_available() -> bool:
    """In a child, as verify asks it: this process stays free of torch."""
    probe = [sys.executable, "-c", "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"]
    return subprocess.run(probe, capture_output=True).returncode == 0


def _mb(side: dict | None) -> str:
    return f"{side['peak_mb']:.0f}" if side else "-"


def _ms(side: dict | None, contended: bool) -> str:
    return f"{side['ms']:.1f}{'~' if contended else ''}" if side else "-"


def figures(row: dict) -> list[str]:
    """Peak MB (verify's benchmark; else the solo one) and ms (solo; else verify's, marked ~ for contended):
    chunked, unfused, Liger's own head."""
    verify_sides = (row.get("bench") or {}).get("sides", {})
    solo_sides = (row.get("solo") or {}).get("sides", {})
    liger_name = row["against"].rpartition(":")[2] if row.get("against") else None
    memory, speed = verify_sides or solo_sides, solo_sides or verify_sides
    contended = not solo_sides
    chunked, unfused = memory.get("liger"), memory.get("torch")
    saving = f"{100 * (1 - chunked['peak_mb'] / unfused['peak_mb']):.1f}%" if chunked and unfused else "-"
    own = solo_sides.get(liger_name) if liger_name else None
    cells = [_mb(chunked), _mb(unfused), _mb(own) if liger_name else "n/a", saving]
    cells += [_ms(speed.get("liger"), contended), _ms(speed.get("torch"), contended)]
    cells.append(_ms(own, False) if liger_name else "n/a")
    return cells


FIGURES = [
    "peak MB chunked",
    "peak MB unfused",
    "peak MB Liger",
    "memory saved",
    "ms chunked",
    "ms unfused",
    "ms Liger",
]


def table(rows: list[dict]) -> str:
    names: list[str] = []
    for row in rows:
        names += [n for n in row.get("gates", {}) if n not in names]
    header = ["loss", "s", "exit", *names, "Liger's own tests", *FIGURES]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        gates = [row.get("gates", {}).get(n, {}).get("status", "-") for n in names]
        own_tests = (row.get("liger_tests") or {}).get("summary") or "-"
        cells = [row["name"], f"{row['seconds']:.0f}", str(row["rc"]), *gates, own_tests, *figures(row)]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append(
        "\npeak MB: one forward + backward above its inputs (verify's benchmark gate; per process, exact while the "
        "verifies share the GPU). ms: median fwd+bwd of the solo benchmark; `~`: only the contended one ran. "
        "memory saved: chunked against unfused. Liger: its hand-written class (leave-one-out losses)."
    )
    return "\n".join(lines)


ROWS_LOCK = threading.Lock()


def write_summary(out: Path, rows: list[dict]) -> None:
    """summary.json and table.md after every step: a call cut short keeps every loss that finished."""
    with ROWS_LOCK:
        (out / "summary.json").write_text(json.dumps(rows, indent=2, default=str))
        (out / "table.md").write_text(table(rows) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--losses", nargs="*", help="a subset of DEST/losses.txt")
    parser.add_argument("--parallel", type=int, default=6)
    parser.add_argument("--timeout", type=float, default=230, help="per loss's verify, seconds")
    parser.add_argument("--deadline", type=float, default=285, help="the whole run, seconds from now")
    parser.add_argument("--solo-min-s", type=float, default=45, help="start no solo benchmark with less time left")
    parser.add_argument(
        "--liger-tests-s", type=float, default=150, help="Liger's own test files, all at once (0: none)"
    )
    parser.add_argument("--liger-tests-workers", type=int, default=1, help="pytest-xdist workers per test file")
    parser.add_argument("--skip-verify", action="store_true", help="only Liger's tests and the solo benchmarks")
    parser.add_argument(
        "--no-solo", action="store_true", help="no solo benchmarks (the GPU is shared: a later call times them alone)"
    )
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.deadline
    args.out.mkdir(parents=True, exist_ok=True)
    losses = read_losses((args.dest / "losses.txt").read_text())
    losses = [loss for loss in losses if not args.losses or loss["name"] in args.losses]
    work = Path(os.environ.get("WORK", "/tmp/liger-bot-chunked-gpu"))
    runs_dir = work / "runs"  # outside OUT: a device call brings back 8 files of OUT; runs.tar.gz holds these
    shutil.rmtree(runs_dir, ignore_errors=True)
    trees = {loss["name"]: clone(args.dest / "lk", loss["branch"], work / loss["name"]) for loss in losses}
    rows: list[dict] = []

    def one(loss: dict) -> dict:
        if args.skip_verify:  # a later call for the figures a first one ran out of time for
            (runs_dir / loss["name"]).mkdir(parents=True, exist_ok=True)
            return {**loss, "rc": "not run", "seconds": 0.0, "gates": {}, "bench": None, "log_tail": ""}
        row = verify(loss, trees[loss["name"]], runs_dir, min(args.timeout, deadline - time.monotonic()))
        with ROWS_LOCK:
            rows.append(row)
        write_summary(args.out, rows)
        print(f"{row['name']}: exit {row['rc']} in {row['seconds']:.0f} s", flush=True)
        return row

    with ThreadPoolExecutor(max(1, args.parallel)) as pool:
        done = list(pool.map(one, losses))
    gpu = cuda_available()
    if gpu and args.liger_tests_s > 0 and deadline - time.monotonic() > args.solo_min_s:
        limit = min(args.liger_tests_s, deadline - time.monotonic() - args.solo_min_s)
        with ThreadPoolExecutor(max(1, args.parallel)) as pool:
            list(
                pool.map(
                    lambda r: liger_tests(r, args.dest, trees[r["name"]], runs_dir, limit, args.liger_tests_workers),
                    done,
                )
            )
        write_summary(args.out, done)
    for row in sorted(done, key=lambda r: r["against"] is None):  # leave-one-out first: Liger's class beside it
        left = deadline - time.monotonic()
        broken = any(row["gates"].get(g, {}).get("status") == "FAIL" for g in ("checkstyle", "import"))
        if not gpu or broken or left < args.solo_min_s or args.no_solo:  # a verify stopped at its limit gets one
            row["solo_rc"] = "not run" if gpu else "no GPU benchmark"
            continue
        solo_bench(row, trees[row["name"]], runs_dir, left)
        write_summary(args.out, done)
    write_summary(args.out, done)
    with tarfile.open(args.out / "runs.tar.gz", "w:gz") as tar:
        tar.add(runs_dir, arcname="runs")
    print(table(done))
    for row in done:
        for name, gate in row["gates"].items():
            if gate["status"] == "FAIL":
                print(f"{row['name']} / {name}: {gate['detail'][-600:]}")
        if row["rc"] == "timeout":
            print(f"{row['name']}: stopped at {row['seconds']:.0f} s; log tail: {row['log_tail'][-400:]}")
        if row.get("liger_tests"):
            tests = row["liger_tests"]
            print(
                f"{row['name']} / Liger's own tests: exit {tests['rc']} in {tests['seconds']:.0f} s: {tests['summary']}"
            )
            print("\n".join(tests["failed"]))
        if row.get("solo_rc") not in (0, None, "not run", "no GPU benchmark"):
            print(f"{row['name']} / solo benchmark: exit {row['solo_rc']} (see runs/{row['name']}/solo/bench.log)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
