"""The kernel leave-one-out's GPU half, through the shipped path (liger-bot installed from its wheel; see
kernel_leave_one_out_gpu.sh): per generated kernel `liger-bot verify --pipeline kernel` on its own branch (the GPU
gates), Liger's own unit tests for each op swapped to the generated kernel (`pytest -n 8`, one run over the combined
tree), then the timing table: generated vs Liger's hand-written kernel vs eager vs torch.compile of the reference,
forward / backward / full and peak memory, over the sizes of Liger's own benchmark script for the op.

    python3 -m benchmarks.kernel_leave_one_out_gpu DEST OUT [--deadline S] [--parallel N] [--cases NAME ...]
    python3 -m benchmarks.kernel_leave_one_out_gpu --timing TREE OUT/timing.json DEADLINE CASES.json  (the child)

DEST is what kernel_leave_one_out_prepare.sh left: DEST/lk.git (a bare clone: one branch per kernel, and
`liger-bot/kernel-loo-all` with all of them and Liger's swapped tests), DEST/results.json (the CPU run: per kernel its
case, branch, tier, CPU gates and the CPU result of Liger's own test). Every phase has its own budget inside the
deadline (seconds from the shell script's start, $STARTED), skips what would overrun and says so in the table. Files in
OUT, rewritten as results come: table.md, summary.json, timing.json, runs.tar.gz (logs, reports) at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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

COMBINED = "liger-bot/kernel-loo-all"
ROOT = Path(__file__).resolve().parents[1]  # the timing child runs as benchmarks.kernel_leave_one_out_gpu
LOCK = threading.Lock()
# Liger's benchmark scripts sweep total tokens over powers of two from 1024 to the model's context (8192 for
# llama_3_8b, batch 1) or what 40% of device memory holds (benchmark_model_configs.build_token_length_sweep); timed
# size by size in this order, so every op gets a spread before any op gets every size
SIZE_ORDER = [4096, 8192, 1024, 2048, 16384, 32768]


def now(started: float) -> float:
    return time.time() - started


def load_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def verify(name: str, tree: Path, runs: Path, limit: float) -> dict:
    report = runs / name / "report.json"
    argv = ["liger-bot", "verify", "--repo", str(tree), "--pipeline", "kernel", "--target", name]
    argv += ["--job-id", f"gpu-{name}", "--report", str(report)]
    rc, seconds = run_bounded(argv, tree, runs / name / "verify.log", limit)
    data = load_json(report) or {}
    gates = {g["name"]: {"status": g["status"], "detail": g["detail"][-1200:]} for g in data.get("gates", [])}
    return {"rc": rc, "seconds": seconds, "gates": gates}


_CASE = re.compile(r"\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (test/[^\s:]+\.py::\S+)")
_SKIPS = re.compile(r"^SKIPPED \[(\d+)\] (test/[^\s:]+\.py):")


def pytest_summary(log: Path) -> dict:
    """Per file, how many cases passed / failed / were skipped: read from the per-case lines as they were written
    (-rA, and the verbose progress lines under xdist), so a run stopped at its budget still counts what it ran."""
    text = log.read_text(errors="replace") if log.exists() else ""
    status: dict[str, str] = {}
    skipped: dict[str, int] = {}
    for line in text.splitlines():
        for match in _CASE.finditer(line):
            status[match[2]] = match[1].lower()
        skip = _SKIPS.match(line)
        if skip:  # -rA folds skips into one line per reason: "SKIPPED [3] path:line: reason"
            skipped[Path(skip[2]).name] = skipped.get(Path(skip[2]).name, 0) + int(skip[1])
    by_file: dict[str, dict[str, int]] = {}
    for node, state in status.items():
        counts = by_file.setdefault(Path(node.split("::")[0]).name, {})
        counts[state] = counts.get(state, 0) + 1
    for name, count in skipped.items():
        counts = by_file.setdefault(name, {})
        counts["skipped"] = max(counts.get("skipped", 0), count)
    lines = [line.strip("= ") for line in text.splitlines() if re.match(r"^=+ .*\d+ \w+.* in [\d.]+s", line)]
    if not lines:  # stopped before pytest's own summary: the cases counted so far
        totals: dict[str, int] = {}
        for counts in by_file.values():
            for state, n in counts.items():
                totals[state] = totals.get(state, 0) + n
        lines = [", ".join(f"{n} {state}" for state, n in sorted(totals.items())) + " (stopped: counted so far)"]
    failures = sorted(node for node, state in status.items() if state in ("failed", "error"))
    return {"summary": lines[-1] if lines else text[-400:], "by_file": by_file, "failures": failures[:80]}


def liger_tests(tree: Path, runs: Path, limit: float, workers: int) -> dict:
    """Liger's own test files, swapped to the generated kernels, in one pytest over the combined tree."""
    files = sorted(str(p.relative_to(tree)) for p in (tree / "test/transformers").glob("test_*__loo_*.py"))
    argv = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-n", str(workers), *files]
    env = {**os.environ, "PYTHONPATH": f"{tree / 'src'}:{tree}"}
    rc, seconds = run_bounded(argv, tree, runs / "liger_tests.log", limit, env)
    return {"rc": rc, "seconds": seconds, "files": files, **pytest_summary(runs / "liger_tests.log")}


def write(out: Path, summary: dict) -> None:
    with LOCK:
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        (out / "table.md").write_text(table(summary) + "\n")


def _gate(row: dict, name: str) -> str:
    gate = (row.get("verify") or {}).get("gates", {}).get(name)
    return gate["status"] if gate else str((row.get("verify") or {}).get("rc", "-"))


def table(summary: dict) -> str:
    lines = [f"# kernel leave-one-out on {summary.get('device', '?')}", "", summary.get("versions", ""), ""]
    lines += [
        "| kernel | from | tier | CPU: Liger's test (interpreter) | GPU verify: unit tests | benchmark gate "
        "| GPU: Liger's own test |",
        "|---|---|---|---|---|---|---|",
    ]
    by_file = (summary.get("liger_tests") or {}).get("by_file", {})
    for name, row in summary["kernels"].items():
        case = row["case"]
        test = f"test_{case['op']}__{name}.py"
        gpu = by_file.get(test)
        gpu_cell = (
            ", ".join(f"{v} {k}" for k, v in sorted(gpu.items()))
            if gpu
            else (summary.get("liger_tests", {}).get("note") or "-")
        )
        cpu = (row.get("liger_test_cpu") or {}).get("summary", "-")
        lines.append(
            f"| {name} | `{case['spec']}` | {row.get('tier')} | {cpu} | {_gate(row, 'unit tests (GPU)')} "
            f"| {_gate(row, 'benchmark (GPU)')} | {gpu_cell} |"
        )
    for name, why in summary.get("refused", {}).items():
        lines.append(f"| {name} | refused | - | {why[:300]} | | | |")
    timing = summary.get("timing") or {}
    points = timing.get("points", [])
    if points:
        lines += [
            "",
            "## time (ms, bf16) and peak memory (MB)",
            "",
            timing.get("method", ""),
            "",
            "| kernel | tokens x width | pass | generated | Liger | eager | compile | gen vs Liger | gen vs compile "
            "| timing (gen / Liger / eager / compile) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for p in points:
            for mode in ("forward", "backward", "full", "peak_mb"):
                cells = [p.get(side, {}).get(mode) for side in ("generated", "liger", "eager", "compile")]
                text = [
                    f"{c:.4f}" if isinstance(c, float) and mode != "peak_mb" else f"{c:.0f}" if c else "-"
                    for c in cells
                ]
                ratio = lambda a, b: f"{b / a:.2f}x" if a and b else "-"  # noqa: E731
                lines.append(
                    f"| {p['case']} | {p['tokens']}x{p['width']} | {mode} | {' | '.join(text)} "
                    f"| {ratio(cells[0], cells[1])} | {ratio(cells[0], cells[3])} | {_methods(p, mode)} |"
                )
        errors = timing.get("errors", [])
        if errors:
            lines += ["", "timing errors:"] + [f"- {e[:300]}" for e in errors]
    for note in summary.get("notes", []):
        lines.append(f"\n{note}")
    return "\n".join(lines)


def _methods(point: dict, mode: str) -> str:
    """How each side's mode was timed (cudagraph / events), '-' where a side has none; on the peak row, whether each
    side's dX shared dY's storage in its memory check (generated / Liger), '' where none ran."""
    if mode == "peak_mb":
        checks = [(point.get(side, {}).get("memory_check") or {}).get("shares_dy") for side in ("generated", "liger")]
        if all(c is None for c in checks):
            return ""
        return "dX in dY: " + " / ".join("-" if c is None else "yes" if c else "no" for c in checks)
    sides = ("generated", "liger", "eager", "compile")
    return " / ".join((point.get(side, {}).get("method") or {}).get(mode, "-") for side in sides)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--deadline", type=float, default=395, help="seconds after $STARTED for the last write")
    parser.add_argument("--verify-s", type=float, default=150, help="the verify phase (all branches side by side)")
    parser.add_argument("--tests-s", type=float, default=150, help="Liger's own tests, beside the verifies")
    parser.add_argument("--parallel", type=int, default=16, help="verifies at once (all, on the H200's 16 cores)")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--cases", nargs="*")
    args = parser.parse_args(argv)
    started = float(os.environ.get("STARTED") or time.time())
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(os.environ.get("WORK", "/tmp/kloo-gpu"))
    runs = work / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    runs.mkdir(parents=True)
    results = load_json(args.dest / "results.json") or {}
    kernels = {n: r for n, r in results.items() if r.get("branch") and (not args.cases or n in args.cases)}
    summary: dict = {
        "kernels": kernels,
        "refused": {n: r.get("refused") or "no branch" for n, r in results.items() if not r.get("branch")},
        "notes": [],
    }
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, torch, triton; print(torch.cuda.get_device_name() if "
            "torch.cuda.is_available() else 'no CUDA'); print(sys.version.split()[0], torch.__version__,"
            " triton.__version__)",
        ],
        capture_output=True,
        text=True,
    )
    device, _, versions = probe.stdout.strip().partition("\n")
    summary["device"], summary["versions"] = device, f"Python, torch, triton: {versions}"
    repo = args.dest / "lk.git"
    trees = {}
    for name, row in kernels.items():
        try:
            trees[name] = clone(repo, row["branch"], work / name)
        except subprocess.CalledProcessError as exc:
            row["verify"] = {"rc": f"clone failed: {exc}", "gates": {}}
    combined = clone(repo, COMBINED, work / "combined")
    write(args.out, summary)

    # phase 1: the GPU gates per branch, side by side, and Liger's own tests over the combined tree beside them
    verify_end = now(started) + args.verify_s

    def one(name: str) -> None:
        kernels[name]["verify"] = verify(name, trees[name], runs, min(verify_end, args.deadline) - now(started))
        write(args.out, summary)
        print(
            f"{name}: verify exit {kernels[name]['verify']['rc']} in {kernels[name]['verify']['seconds']} s", flush=True
        )

    def tests() -> None:
        limit = min(args.tests_s, args.deadline - 60 - now(started))
        summary["liger_tests"] = liger_tests(combined, runs, limit, args.workers)
        if summary["liger_tests"]["rc"] == "timeout":
            summary["liger_tests"]["note"] = f"stopped at its {limit:.0f} s budget"
        write(args.out, summary)
        print(
            f"Liger's own tests: {summary['liger_tests']['summary']} ({summary['liger_tests']['seconds']} s)",
            flush=True,
        )

    cases = {n: kernels[n]["case"] for n in trees}
    (work / "cases.json").write_text(json.dumps(cases))
    child_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(combined / "src"), str(combined), str(ROOT), os.environ.get("PYTHONPATH", "")]
        ),
    }

    def warm() -> None:  # torch.compile of every reference, so the timing finds it in the on-disk caches
        argv = [
            sys.executable,
            "-m",
            "benchmarks.kernel_leave_one_out_gpu",
            "--timing",
            str(combined),
            str(work / "warm.json"),
            str(started + verify_end),
            str(work / "cases.json"),
            "--warm",
        ]
        rc, seconds = run_bounded(argv, combined, runs / "warm.log", verify_end - now(started), child_env)
        summary["notes"].append(f"compile warm-up: exit {rc} in {seconds} s")

    tester, warmer = threading.Thread(target=tests), threading.Thread(target=warm)
    tester.start()
    warmer.start()
    with ThreadPoolExecutor(max(1, args.parallel)) as pool:
        list(pool.map(one, list(trees)))
    tester.join()
    warmer.join()

    # phase 2: the timing table, alone on the GPU, until the deadline (a child: a hung kernel cannot stop the writes)
    left = args.deadline - 10 - now(started)
    timing_file = args.out / "timing.json"
    if left > 20:
        argv = [
            sys.executable,
            "-m",
            "benchmarks.kernel_leave_one_out_gpu",
            "--timing",
            str(combined),
            str(timing_file),
            str(started + args.deadline - 15),
            str(work / "cases.json"),
        ]
        rc, seconds = run_bounded(argv, combined, runs / "timing.log", left, child_env)
        summary["notes"].append(f"timing: exit {rc} in {seconds} s")
    else:
        summary["notes"].append(f"timing: not run, {left:.0f} s left of the deadline")
    summary["timing"] = load_json(timing_file) or {}
    write(args.out, summary)
    with tarfile.open(args.out / "runs.tar.gz", "w:gz") as tar:
        tar.add(runs, arcname="runs")
    print(table(summary))
    print(f"leave-one-out GPU run: {now(started):.0f} s")
    return 0


# ---- the timing child ----


def checkout_metadata(tree: Path, folder: Path) -> None:
    """Makes `importlib.metadata.version("liger-kernel")` answer for a checkout whose src is on the path, not
    installed: Liger's benchmark/scripts/utils.py reads it at import (PackageNotFoundError on the GPU host). A
    dist-info of the checkout's own name and version goes into folder, put on sys.path; nothing if one is found."""
    import importlib.metadata

    try:
        importlib.metadata.version("liger-kernel")
        return
    except importlib.metadata.PackageNotFoundError:
        pass
    import tomllib

    project = tomllib.loads((tree / "pyproject.toml").read_text())["project"]
    info = folder / f"{project['name']}-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    sys.path.insert(0, str(folder))
    importlib.invalidate_caches()


def liger_sweep_configs(tree: Path, metadata_folder: Path):
    """Liger's benchmark/scripts/benchmark_model_configs, imported as its scripts import it (their folder and the
    checkout's src on the path)."""
    import importlib

    checkout_metadata(tree, metadata_folder)
    for folder in (tree / "src", tree / "benchmark/scripts"):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    return importlib.import_module("benchmark_model_configs")


def sweep_tokens(configs, probe) -> list[int]:
    """The token sizes of Liger's build_token_length_sweep for a "T" sweep at batch 1 (its rms_norm / swiglu /
    geglu ... scripts): 2^10 .. the seq_len compute_seq_len_sweep_config finds for the default model (its context,
    or what 40% of device memory holds by the probe's peak)."""
    import math

    model = configs.get_benchmark_model_config(None)
    config = configs.compute_seq_len_sweep_config(model, probe_fn=probe, probe_seq_len=1024)
    return [2**i for i in range(10, int(math.log2(config.seq_len)) + 1)]


def _sizes(tree: Path, width: int) -> tuple[list[int], str]:
    """Liger's benchmark sweep (sweep_tokens), with a bf16 probe of the op's footprint at 1024 tokens; else 2^10 ..
    2^13, said in the table."""
    import tempfile

    import torch

    try:
        configs = liger_sweep_configs(tree, Path(tempfile.mkdtemp(prefix="liger-metadata-")))

        def probe():
            x = torch.randn(1024, width, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            return torch.nn.functional.silu(x) * x  # a stand-in of the op's footprint: inputs, output, a temporary

        tokens = sweep_tokens(configs, probe)
        return tokens, f"Liger's sweep rule (benchmark_model_configs), up to {tokens[-1]} tokens"
    except Exception as exc:  # noqa: BLE001
        return [2**i for i in range(10, 14)], f"fixed 2^10..2^13 (the sweep rule failed: {type(exc).__name__}: {exc})"


class FunctionalLayer:  # built lazily as an nn.Module subclass (torch imported in the child only)
    pass


def memory_check(name: str, side: str, layer, inputs) -> dict:
    """The tenth run's puzzle (peak unchanged by handing dy over), settled per point: one handed-over full pass
    (bench.handed_over_check: whether the first input's .grad shares dy's storage on CUDA, the pass's peak bytes) and,
    for the generated kernel, the reference counts its _can_overwrite takes as autograd's own (_AUTOGRAD_REFS and
    _AUTOGRAD_BASE_REFS, measured at import on the CPU) beside the same probe run on CUDA. Printed, kept in the point."""
    from pipelines.kernel import bench

    try:
        out = bench.handed_over_check(layer, inputs, "cuda")
        if side == "generated":
            import importlib

            ops = importlib.import_module(f"liger_kernel.ops.{name}")
            out["autograd_refs_cpu"] = [getattr(ops, k, "absent") for k in ("_AUTOGRAD_REFS", "_AUTOGRAD_BASE_REFS")]
            probe = getattr(ops, "_autograd_refs", None)
            out["autograd_refs_cuda"] = probe("cuda") if probe else "absent"
    except Exception as exc:  # noqa: BLE001  a diagnostic never stops the timing
        out = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    print(f"memory check {name} {side}: {json.dumps(out)}", flush=True)
    return out


def dx_destination(name: str, layer, inputs) -> dict:
    """The generated kernel timed twice as the table times it (bench.timed_modes), its _can_overwrite forced True
    (dX written into dY's storage, as Liger's in-place norms write it) then False (dX in a new buffer). The graph
    timing's dy is the caller's (a static tensor), so the table's generated side always takes the second and
    Liger's the first: whether that alone is the RMSNorm backward's 0.84-0.95x at 1024-2048 tokens."""
    import importlib

    from pipelines.kernel import bench

    ops = importlib.import_module(f"liger_kernel.ops.{name}")
    kept, out = ops._can_overwrite, {}
    try:
        for label, value in (("into_dy", True), ("apart", False)):
            ops._can_overwrite = lambda dY, X, in_place, value=value: value and in_place and dY.dtype == X.dtype
            times, methods = bench.timed_modes(layer, inputs, 20)
            out[label] = {**times, "method": methods}
    except Exception as exc:  # noqa: BLE001  a diagnostic never stops the timing
        out["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        ops._can_overwrite = kept
    print(f"dX destination {name}: {json.dumps(out)}", flush=True)
    return out


def timing_child(tree: Path, path: Path, deadline: float, cases_path: Path, warm: bool = False) -> None:
    """Times every case at every size (size by size) until the deadline. warm: compile only, one size, so the
    inductor caches on disk are filled while the verifies run and the timing then loads what it compiled."""
    import importlib
    import inspect

    import torch

    from pipelines.kernel import bench
    from pipelines.kernel import reference
    from pipelines.kernel.spec import pascal

    class Functional(torch.nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, *xs):
            return self.fn(*xs)

    globals()["FunctionalLayer"] = Functional
    torch._dynamo.config.cache_size_limit = 64
    cases = json.loads(cases_path.read_text())
    model = {"hidden": 4096, "intermediate": 14336}  # llama_3_8b, the scripts' default model
    record: dict = {"points": [], "errors": [], "method": bench.method_text(20)}
    sizes: dict[str, list[int]] = {}
    for width in ("hidden", "intermediate"):
        sizes[width], record[f"sizes_{width}"] = _sizes(tree, model[width])

    def save():
        path.write_text(json.dumps(record, indent=1))

    def layers(name: str, case: dict, width: int) -> dict:
        with reference.determinism_kept():
            test = importlib.import_module(f"test.transformers.test_{name}")
        generated_cls = getattr(importlib.import_module(f"liger_kernel.transformers.{name}"), f"Liger{pascal(name)}")
        torch_cls = getattr(test, f"Torch{pascal(name)}")
        hidden = "hidden_size" in inspect.signature(torch_cls).parameters
        args = (width,) if hidden else ()
        namespace = {"H": width, "FunctionalLayer": Functional, "liger_kernel": importlib.import_module("liger_kernel")}
        for module in case["liger"].split("(")[0].rsplit(".", 1)[:1] + ["liger_kernel.transformers.functional"]:
            if module.startswith("liger_kernel"):
                importlib.import_module(module)
        dtype = torch.bfloat16
        out = {
            "generated": generated_cls(*args).to("cuda").to(dtype),
            "liger": eval(case["liger"], namespace).to("cuda").to(dtype),  # noqa: S307  the table's own expressions
            "eager": torch_cls(*args).to("cuda").to(dtype),
            "compile": torch.compile(torch_cls(*args).to("cuda").to(dtype)),
        }
        return out

    built: dict = {}
    order = sorted(set(sum(sizes.values(), [])), key=lambda t: SIZE_ORDER.index(t) if t in SIZE_ORDER else 99)
    for tokens in order[:1] if warm else order:
        for name, case in cases.items():
            if time.time() > deadline - 5:
                record["stopped"] = f"deadline: {tokens} tokens not timed for {name} and after"
                save()
                return
            width = model[case["width"]]
            if tokens not in sizes[case["width"]]:
                continue
            point = {"case": name, "tokens": tokens, "width": width}
            try:
                if name not in built:
                    built[name] = layers(name, case, width)
                # templates: bench.time_modes clones them into fresh leaves for every timed call
                inputs = [
                    torch.randn(tokens, width, device="cuda", dtype=torch.bfloat16) for _ in range(case["inputs"])
                ]
                if warm:
                    for x in inputs:  # the tokens dimension only: what Liger's script's recompiles make dynamic
                        x.requires_grad_(True)
                        torch._dynamo.mark_dynamic(x, 0)
                    bench.one_output(built[name]["compile"](*inputs)).sum().backward()
                    torch.cuda.synchronize()
                    print(f"warm {name}", flush=True)
                    continue
                for side, layer in built[name].items():
                    try:  # one side's failure (Liger's module refusing these inputs) leaves the others timed
                        times, methods = bench.timed_modes(layer, inputs, 20, dynamic=side == "compile")
                        point[side] = {**times, "method": methods}
                        if side in ("generated", "liger"):
                            point[side]["memory_check"] = memory_check(name, side, layer, inputs)
                        if side == "generated" and "norm" in name and tokens <= 2048:
                            point["dx_destination"] = dx_destination(name, layer, inputs)
                    except Exception as exc:  # noqa: BLE001
                        point[side] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
                        record["errors"].append(f"{name} {tokens}x{width} {side}: {point[side]['error']}")
                del inputs
                torch.cuda.empty_cache()
            except Exception as exc:  # noqa: BLE001  one kernel's failure never stops the others
                record["errors"].append(f"{name} {tokens}x{width}: {type(exc).__name__}: {str(exc)[:300]}")
                torch.cuda.empty_cache()
            record["points"].append(point)
            save()
            print(json.dumps(point), flush=True)
    save()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--timing":
        timing_child(Path(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4]), Path(sys.argv[5]), "--warm" in sys.argv)
        sys.exit(0)
    sys.exit(main())
