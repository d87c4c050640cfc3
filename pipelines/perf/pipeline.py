"""`liger-bot perf KERNEL`: profile -> optimise (launch sweep, then catalogue variants) -> finalise, on a GPU.

The workspace (`--out`, default `<checkout>.liger-bot/perf-KERNEL` beside the checkout) holds what LinkedIn's skill keeps in optimization/KERNEL/: the
original, each vN.py with its vN_notes.md (hypothesis written before it runs, results after), every child's
JSON, the profile, the comparison and the PR body. The target checkout only ever holds the original kernel
between children (restored in a `finally`), and on success one commit on liger-bot/perf-KERNEL that changes
the kernel file alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from pathlib import Path

from pipelines import pull_request
from pipelines.changeset import checkstyle_gate
from pipelines.changeset import ruff_argv
from pipelines.contract import branch_name
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError
from pipelines.outcome import Report
from pipelines.outcome import hard_failure
from pipelines.perf import catalogue
from pipelines.perf import report
from pipelines.perf import rules as rules_mod
from pipelines.perf.profile import PerfProfile
from pipelines.perf.profile import Size
from pipelines.perf.profile import applicability
from pipelines.perf.profile import benchmark_sizes
from pipelines.perf.source import read_kernel
from pipelines.pull_request import BodyParts
from pipelines.subprocesses import run_command
from pipelines.target import Checkout
from pipelines.target import open_checkout

PASSES = ("forward", "backward", "full")
DEFAULT_TARGET_SIZES = ("4096x16384",)
LIGER_BOT_ROOT = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT_S = 600


@dataclass
class Options:
    target_pass: str = "backward"
    target_speedup: float = 1.0
    sizes: tuple[str, ...] = DEFAULT_TARGET_SIZES
    max_variants: int = 8
    tests_k: str | None = None  # per-variant test selection; the final gate runs the whole file
    final_tests_k: str | None = None
    test_workers: int = 0  # pytest-xdist workers for the kernel's tests (0: serial); every test runs either way
    ncu: bool = True
    script: bool = True  # run the benchmark script itself once for the profile (its CSV)
    benchmark_sizes: bool = True  # the benchmark script's sizes beside the target sizes
    interpret: bool = False  # the CPU dry run: TRITON_INTERPRET=1, wall-clock times, never a speed claim
    budget_s: float | None = None  # no new variant starts after this many seconds of the run (a device call's limit)

    def __post_init__(self):
        if self.target_pass not in PASSES:
            raise PipelineError(f"--pass {self.target_pass!r}: one of {', '.join(PASSES)}")
        if not self.target_speedup > 0:
            raise PipelineError("--target-speedup must be a positive number (1.0: as fast as torch.compile)")
        if not 1 <= self.max_variants <= 8:
            raise PipelineError("--max-variants is 1 to 8 (the skill's budget)")


@dataclass
class VariantRecord:
    name: str
    title: str
    based_on: str
    verdict: rules_mod.Verdict | None = None
    times: dict | None = None
    tests: dict = field(default_factory=dict)
    skipped: str = ""  # not applicable: why (costs no variant)
    facts: list = field(default_factory=list)  # the variant's compiled kernels: registers, spills, shared memory
    methods: dict | None = None  # {pass: {size: "cudagraph" | "do_bench" | "wall"}}: how each point was timed
    numeric: dict | None = None  # the numeric gate against v0 (measure.numeric_gate): ok, summary, per size and tensor

    def to_json(self) -> dict:
        verdict = self.verdict
        return {
            "name": self.name,
            "title": self.title,
            "based_on": self.based_on,
            "status": verdict.status if verdict else ("SKIPPED" if self.skipped else ""),
            "gain": verdict.gain if verdict else None,
            "reasons": list(verdict.reasons) if verdict else [self.skipped] if self.skipped else [],
            "tests": self.tests,
            "numeric": self.numeric,
            "times": self.times,
            "methods": self.methods,
        }


@dataclass
class PerfRun:
    profile: PerfProfile
    variants: list[VariantRecord]
    best: str
    stop: str
    branch: str
    gates: list[GateResult]
    pr_body: str
    out_dir: Path
    seconds: float
    not_judged: tuple = ()  # (pass, size, why): measured and shown, never the basis of a rejection
    pr: BodyParts | None = None  # what pr_body was rendered from (the App renders it again, with its notes)

    @property
    def failed(self) -> bool:
        return hard_failure(self.gates)

    def to_json(self) -> dict:
        return {
            "profile": self.profile.to_json(),
            "variants": [v.to_json() for v in self.variants],
            "best": self.best,
            "stop": self.stop,
            "branch": self.branch,
            "files": [str(self.profile.source.files.ops)] if self.branch else [],
            "gates": [g.to_json() for g in self.gates],
            "not_judged": [{"pass": p, "size": s, "why": why} for p, s, why in self.not_judged],
            "failed": self.failed,
            "seconds": round(self.seconds, 1),
        }


# --- understand (any host) -------------------------------------------------------------------------------------


def understand(kernel: str, repo: str | Path, options: Options | None = None, require_clean: bool = True):
    options = options or Options()
    checkout = open_checkout(repo, require_clean=require_clean)
    source = read_kernel(checkout, kernel)
    targets = [Size.parse(s) for s in options.sizes]
    sizes = benchmark_sizes(source) if options.benchmark_sizes else []
    sizes += [t for t in targets if t.key not in {s.key for s in sizes}]
    profile = PerfProfile(source, sizes, targets, options.target_pass, applicability(source.text))
    return checkout, profile


def gpu_refusal() -> str | None:
    """Why this host cannot run perf (None: it can)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"no CUDA device visible to torch {torch.__version__} on this host; perf times kernels on a GPU"
    return None


# --- children -----------------------------------------------------------------------------------------------------


def _target_version(checkout: Checkout) -> str:
    found = re.search(r'(?m)^version\s*=\s*"([^"]+)"', checkout.path("pyproject.toml").read_text())
    return found.group(1) if found else "0.0.0"


def _metadata_dir(checkout: Checkout, out_dir: Path) -> Path:
    """A dist-info for `liger-kernel`, so the benchmark framework's `version("liger-kernel")` works on a checkout
    that is on the path rather than pip-installed."""
    version = _target_version(checkout)
    root = out_dir / ".meta"
    info = root / f"liger_kernel-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: liger-kernel\nVersion: {version}\n")
    return root


INTERPRET_ENV = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}


def _child_env(checkout: Checkout, out_dir: Path) -> dict[str, str]:
    parts = [str(LIGER_BOT_ROOT), str(checkout.src.parent), str(checkout.root), str(_metadata_dir(checkout, out_dir))]
    # no __pycache__ in the checkout: the final gate checks that the kernel file is all that changed
    env = {"PYTHONPATH": os.pathsep.join([*parts, os.environ.get("PYTHONPATH", "")]), "PYTHONDONTWRITEBYTECODE": "1"}
    return env | (INTERPRET_ENV if (out_dir / ".interpret").exists() else {})


def run_child(checkout: Checkout, out_dir: Path, name: str, spec: dict) -> dict:
    spec_path, result_path = out_dir / "benchmarks" / f"{name}.spec.json", out_dir / "benchmarks" / f"{name}.json"
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(json.dumps(spec, indent=1))
    result_path.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "pipelines.perf.measure", str(spec_path), str(result_path)]
    proc = run_command(argv, cwd=checkout.root, env=_child_env(checkout, out_dir), timeout=CHILD_TIMEOUT_S)
    (out_dir / "benchmarks" / f"{name}.log").write_text(proc.output)
    if not result_path.is_file():
        return {"error": f"the child exited {proc.returncode} without a result:\n{proc.tail(30)}"}
    return json.loads(result_path.read_text())


def base_spec(checkout: Checkout, profile: PerfProfile) -> dict:
    sweep = profile.source.sweep
    return {
        "repo": str(checkout.root),
        "kernel": profile.source.name,
        "script": str(profile.source.files.benchmark),
        "setup_fn": sweep.setup_fn,
        "liger_provider": sweep.liger_provider,
        "reference_provider": sweep.reference_provider,
        "config": sweep.config(int(sweep.model_config.get("hidden_size", 4096))),
        "sizes": [s.to_json() for s in profile.sizes],
        "passes": list(PASSES),
        "providers": ["liger"],
    }


@contextlib.contextmanager
def installed(checkout: Checkout, relative: Path, text: str):
    """The variant in the target's source for one child; the original back afterwards, whatever happens."""
    path = checkout.path(relative)
    original = path.read_text()
    path.write_text(text)
    try:
        yield path
    finally:
        path.write_text(original)


def target_style(checkout: Checkout, relative: Path, text: str) -> str:
    """The variant formatted with the target's own ruff settings (what is tested is what gets committed)."""
    with installed(checkout, relative, text) as path:
        run_command(ruff_argv("check", "--fix", "--quiet", str(relative)), cwd=checkout.root, timeout=120)
        run_command(ruff_argv("format", "--quiet", str(relative)), cwd=checkout.root, timeout=120)
        return path.read_text()


# --- profile (GPU) --------------------------------------------------------------------------------------------------


def run_script(checkout: Checkout, profile: PerfProfile, out_dir: Path) -> str:
    """The kernel's benchmark script itself, once, into its own CSV (moved out of the checkout)."""
    scripts = checkout.path("benchmark/scripts")
    argv = [sys.executable, Path(profile.source.files.benchmark).name, "--overwrite"]
    env = {**_child_env(checkout, out_dir), "LIGER_BENCH_TARGET": "liger_bot_perf"}
    proc = run_command(argv, cwd=scripts, env=env, timeout=CHILD_TIMEOUT_S)
    (out_dir / "benchmarks" / "script.log").write_text(proc.output)
    produced = checkout.path("benchmark/data/all_benchmark_data_liger_bot_perf.csv")
    if not produced.is_file():
        return f"(the benchmark script exited {proc.returncode} without its CSV; see benchmarks/script.log)"
    target = out_dir / "benchmarks" / "v0_script.csv"
    shutil.move(produced, target)
    return target.read_text()


NCU_METRICS = (
    "Duration",
    "DRAM Throughput",
    "Memory Throughput",
    "Compute (SM) Throughput",
    "Registers Per Thread",
    "Achieved Occupancy",
    "Theoretical Occupancy",
    "Waves Per SM",
)


def run_ncu(checkout: Checkout, profile: PerfProfile, out_dir: Path) -> dict:
    ncu = shutil.which("ncu")
    if not ncu:
        return {"error": "ncu is not on this host's PATH"}
    spec = {**base_spec(checkout, profile), "ncu_only": True, "sizes": [profile.target_sizes[0].to_json()]}
    spec_path = out_dir / "benchmarks" / "ncu.spec.json"
    spec_path.write_text(json.dumps(spec))
    kernels = "|".join(j.name for j in profile.source.jit_functions)
    argv = [ncu, "--csv", "--page", "details", "--section", "SpeedOfLight", "--section", "Occupancy"]
    argv += ["--section", "LaunchStats", "-k", f"regex:{kernels}", "--launch-skip", "2", "--launch-count", "2"]
    argv += [sys.executable, "-m", "pipelines.perf.measure", str(spec_path)]
    proc = run_command(argv, cwd=checkout.root, env=_child_env(checkout, out_dir), timeout=120)
    (out_dir / "benchmarks" / "ncu.csv").write_text(proc.output)
    parsed = report.parse_ncu(proc.output, NCU_METRICS)
    if not parsed:
        return {"error": f"ncu exited {proc.returncode}: {proc.tail(3)}"}
    return {"size": profile.target_sizes[0].key, "kernels": parsed}


def measure_baseline(checkout: Checkout, profile: PerfProfile, options: Options, out_dir: Path, progress) -> None:
    spec = {**base_spec(checkout, profile), "providers": ["liger", "eager", "compile"], "facts": True, "bytes": True}
    spec["ceilings"] = True
    result = run_child(checkout, out_dir, "v0", spec)
    if "error" in result:
        raise PipelineError(f"the baseline measurement failed:\n{result['error'][-1500:]}")
    profile.measured = result
    progress(f"v0 measured on {result['device']['name']} (copy {result['copy_gbps']:.0f} GB/s)")
    if options.script:
        profile.script_csv = run_script(checkout, profile, out_dir)
        progress("benchmark script ran: benchmarks/v0_script.csv")
    if options.ncu:
        profile.ncu = run_ncu(checkout, profile, out_dir)
        progress(f"ncu: {profile.ncu.get('error') or ', '.join(profile.ncu['kernels'])}")


# --- optimise -----------------------------------------------------------------------------------------------------


RECHECK_ROUNDS = 3  # at most this many alternating rounds of v0 and a variant before a regression rejects it


def make_rules(profile: PerfProfile, options: Options) -> rules_mod.Rules:
    """The loop's rules for this run: the skill's guardrails, with the baseline's launch-bound points not judged."""
    targets = tuple(s.key for s in profile.target_sizes)
    measured = profile.measured
    not_judged = rules_mod.launch_bound(
        measured.get("times", {}).get("liger", {}),
        measured.get("bytes", {}),
        measured.get("copy_gbps"),
        targets,
        measured.get("methods", {}).get("liger"),
    )
    if options.interpret:  # a dry run's wall clock is never launch-bound by this measure: judge as before
        not_judged = ()
    return rules_mod.Rules(
        options.target_pass, targets, options.target_speedup, options.max_variants, not_judged=not_judged
    )


@dataclass
class Loop:
    checkout: Checkout
    profile: PerfProfile
    options: Options
    out_dir: Path
    progress: object
    rules: rules_mod.Rules
    original: str
    texts: dict[str, str] = field(default_factory=dict)
    times: dict[str, dict] = field(default_factory=dict)
    records: list[VariantRecord] = field(default_factory=list)
    state: rules_mod.LoopState = field(default_factory=rules_mod.LoopState)
    deadline: float | None = None  # clock() after which no variant starts
    sweep_deadline: float | None = None  # clock() by which the launch sweep (v1) is done, re-timing included
    clock: object = time.monotonic
    sweeping: bool = False  # the first launch sweep is being tried: its re-timing ends by sweep_deadline
    child_s: float = 0.0  # wall seconds of the last variant's child: what one re-timing costs at most

    @property
    def ops(self) -> Path:
        return self.profile.source.files.ops

    @property
    def gpu(self) -> str:
        return self.profile.measured.get("device", {}).get("name", "the GPU")

    def stopped(self) -> str | None:
        reason = rules_mod.stop_reason(self.rules, self.state)
        if reason is None and self.deadline is not None and self.clock() > self.deadline:
            return f"time budget of {self.options.budget_s:g} s spent"
        return reason

    def try_variant(self, title: str, text: str, hypothesis: str, changes: str, expected: str) -> VariantRecord:
        name = f"v{self.state.variants + 1}"
        based_on = self.state.best
        text = target_style(self.checkout, self.ops, text)
        (self.out_dir / f"{self.profile.source.name}_{name}.py").write_text(text)
        notes = self.out_dir / f"{self.profile.source.name}_{name}_notes.md"
        notes.write_text(
            report.notes_before(name, title, based_on, hypothesis, changes, expected, self.profile, self.out_dir)
        )
        spec = {**base_spec(self.checkout, self.profile), "tests": self.test_spec(self.options.tests_k), "facts": True}
        spec["numeric"] = self.numeric_spec()
        started = self.clock()
        with installed(self.checkout, self.ops, text):
            result = run_child(self.checkout, self.out_dir, name, spec)
        self.child_s = self.clock() - started
        tests = result.get("tests") or {"ok": "error" not in result, "summary": result.get("error", "")[-300:]}
        times = result.get("times", {}).get("liger")
        if "error" in result:
            tests = {"ok": False, "summary": result["error"][-300:]}
        numeric = result.get("numeric")
        verdict = rules_mod.judge(
            self.rules,
            self.times["v0"],
            self.times[based_on],
            times,
            bool(tests.get("ok")),
            tests.get("summary", ""),
            numeric_failure=numeric["summary"] if numeric and not numeric.get("ok") else "",
        )
        if verdict.status == rules_mod.REJECTED and tests.get("ok") and times is not None:
            verdict = self.recheck(name, text, times, based_on, verdict)
        met = times is not None and rules_mod.target_met(self.rules, times, self.compiled)
        self.state = rules_mod.advance(self.rules, self.state, name, verdict, met)
        record = VariantRecord(name, title, based_on, verdict, times, tests, facts=result.get("facts") or [])
        record.methods = (result.get("methods") or {}).get("liger")
        record.numeric = numeric
        self.records.append(record)
        if times is not None:
            self.times[name] = times
        self.texts[name] = text
        with notes.open("a") as handle:
            handle.write(report.notes_after(record, self.times["v0"], self.rules, self.compiled))
        shown = f"{verdict.gain:+.1%}" if times else "-"
        passed = f" [numeric gate: PASS, {numeric['summary']}]" if numeric and numeric.get("ok") else ""
        self.progress(f"{name} {title}: {verdict.status} ({shown}) {'; '.join(verdict.reasons)[:200]}{passed}")
        return record

    def recheck(self, name: str, text: str, times: dict, based_on: str, verdict: rules_mod.Verdict):
        """Time the regressed points again, v0 and the variant alternately (RECHECK_ROUNDS each), and judge again:
        one median of a noisy size is not enough to reject a variant that gains on the target."""
        points = rules_mod.regressed_points(self.rules, self.times["v0"], times)
        if not points or self.options.interpret:  # a dry run's wall clock claims nothing: no second look either
            return verdict
        rounds_allowed = rules_mod.recheck_rounds(self.clock(), self.recheck_end(name), self.child_s, RECHECK_ROUNDS)
        if rounds_allowed == 0:
            self.progress(f"{name}: {len(points)} regressed point(s) not timed again: no budget left for it")
            return replace(verdict, reasons=(*verdict.reasons, "not re-timed: the budget's share for it was spent"))
        keys = {size for _, size, _ in points}
        spec = {**base_spec(self.checkout, self.profile), "tests": None, "facts": False}
        spec["sizes"] = [s for s in spec["sizes"] if s["key"] in keys]
        spec["passes"] = sorted({p for p, _, _ in points})
        rounds: dict[str, list] = {"v0": [], name: []}
        for round_index in range(rounds_allowed):
            for label, kernel_text in (("v0", self.original), (name, text)):
                with installed(self.checkout, self.ops, kernel_text):
                    result = run_child(self.checkout, self.out_dir, f"{name}_recheck{round_index}_{label}", spec)
                if "error" in result:
                    return verdict
                rounds[label].append(result["times"]["liger"])
        self.progress(f"{name}: {len(points)} regressed point(s) timed again in {rounds_allowed} alternating rounds")
        return rules_mod.rejudge(self.rules, self.times["v0"], self.times[based_on], times, rounds["v0"], rounds[name])

    def recheck_end(self, name: str) -> float | None:
        """When re-timing `name`'s regressions must be done by: v1 within the sweep's share, a structural variant
        within RECHECK_SHARE of what is left, so the next variant still starts (None: no budget given)."""
        if self.deadline is None:
            return None
        if self.sweeping and self.sweep_deadline is not None:
            return self.sweep_deadline
        return self.clock() + rules_mod.RECHECK_SHARE * max(0.0, self.deadline - self.clock())

    def plan_budget(self) -> None:
        """Split what is left of the budget: SWEEP_SHARE for the launch sweep, the rest for structural variants."""
        if self.deadline is not None:
            now = self.clock()
            self.sweep_deadline = now + rules_mod.SWEEP_SHARE * max(0.0, self.deadline - now)

    def numeric_spec(self) -> dict:
        """What the child's numeric gate needs: v0's file (imported in the child beside the installed variant) and
        every size of the run, the targets and the benchmark's (Liger's unit tests stop at 1,500 columns; a path
        that switches on for wide rows is checked only here)."""
        path = (self.out_dir / f"original_{self.profile.source.name}.py").resolve()
        if not path.is_file() or path.read_text() != self.original:
            path.write_text(self.original)
        return {"original": str(path), "sizes": [s.to_json() for s in self.profile.sizes]}

    def test_spec(self, k: str | None) -> dict:
        return {"file": str(self.profile.source.files.test), "k": k, "workers": self.options.test_workers}

    @property
    def compiled(self) -> dict:
        return self.profile.measured["times"]["compile"]

    def sweep(self, title: str) -> None:
        """A launch sweep on the best so far: measure candidate tables, then try the chosen table as a variant."""
        base = self.texts[self.state.best]
        try:
            probe = catalogue.launch_table(base, {"table": {}, "gpu": self.gpu})
        except catalogue.NotApplicable as exc:  # e.g. a generated kernel launching through its own _launch helper
            self.records.append(VariantRecord("-", title, self.state.best, skipped=str(exc)))
            return
        spec = {**base_spec(self.checkout, self.profile), "passes": ["forward", "backward"]}
        spec["sweep"] = {"warps": [4, 8, 16, 32], "stages": [1, 2, 3, 4], "min_gain": self.rules.min_gain}
        if self.sweep_deadline is not None and self.state.variants == 0:
            window = max(0.0, self.sweep_deadline - self.clock())
            spec["sweep"]["seconds"] = round(rules_mod.SWEEP_CHILD_SHARE * window, 1)
        with installed(self.checkout, self.ops, probe):
            result = run_child(self.checkout, self.out_dir, f"sweep{self.state.variants + 1}", spec)
        if "error" in result:
            self.progress(f"launch sweep failed: {result['error'][-300:]}")
            table = {}
        else:
            table = {p: {int(b): tuple(c) for b, c in t.items()} for p, t in result["sweep"]["table"].items()}
        text = catalogue.launch_table(base, {"table": table, "gpu": self.gpu})
        self.sweeping = self.state.variants == 0
        try:
            self._try_sweep(title, text, table)
        finally:
            self.sweeping = False

    def _try_sweep(self, title: str, text: str, table: dict) -> None:
        chosen = report.table_text(table) or "the kernel's own settings everywhere (no candidate beat them by 1%)"
        self.try_variant(
            title,
            text,
            "Variant 1 of the skill: Liger's calculate_settings picks num_warps from BLOCK_SIZE alone and num_stages is "
            "fixed; the best launch per pass depends on the GPU and on what the kernel keeps live per thread.",
            f"`_perf_launch(pass, BLOCK_SIZE, ...)` at every launch reads `_PERF_LAUNCH`; chosen by the sweep "
            f"(num_warps 4/8/16/32, then num_stages 1-4; least total time per BLOCK_SIZE): {chosen}",
            "0-30% on the target pass where the default warps leave registers spilling or SMs idle",
        )

    def structural(self) -> None:
        for entry in catalogue.CATALOGUE:
            if self.stopped():
                return
            off_target = off_target_reason(entry, self.options.target_pass)
            if off_target:  # costs no variant and no budget: it cannot change the pass being optimised
                self.records.append(VariantRecord("-", entry.title, self.state.best, skipped=off_target))
                continue
            base = self.texts[self.state.best]
            try:
                text = entry.rewrite(base, dict(entry.params))
            except catalogue.NotApplicable as exc:
                self.records.append(VariantRecord("-", entry.title, self.state.best, skipped=str(exc)))
                continue
            changes = f"`{entry.key}` {entry.params or ''} on {self.state.best}: {entry.rewrite.__doc__ or ''}".strip()
            self.try_variant(entry.title, text, entry.hypothesis, " ".join(changes.split()), entry.expected)


def off_target_reason(entry: catalogue.Entry, target_pass: str) -> str | None:
    """Why the entry is not tried for this target (None: it is): a rewrite of the backward cannot speed up the
    forward, and the other way round; a full-pass target is helped by either."""
    if target_pass == "full" or target_pass in entry.passes:
        return None
    return f"changes the {' and '.join(entry.passes)} pass only; the target is the {target_pass} pass"


def optimise(loop: Loop) -> str:
    if loop.stopped():
        return loop.stopped()
    loop.plan_budget()
    loop.sweep("Launch sweep")
    loop.structural()
    if not loop.stopped() and loop.state.best not in ("v0", "v1"):
        loop.sweep("Launch sweep again, on the new structure")
    return loop.stopped() or "catalogue exhausted"


# --- finalise -----------------------------------------------------------------------------------------------------


def finalise(loop: Loop, branch: str) -> list[GateResult]:
    checkout, ops = loop.checkout, loop.ops
    git = checkout.git
    start = git.current_branch()
    git.checkout(branch, create_from="HEAD")
    checkout.path(ops).write_text(loop.texts[loop.state.best])
    gates = [
        *final_tests(loop),
        checkstyle(checkout, ops),
        only_kernel_code(checkout, ops),
    ]
    if hard_failure(gates):
        git.run("checkout", "-q", "--", str(ops))
        git.checkout(start)
        git.run("branch", "-q", "-D", branch)
        return gates
    git.commit_all(report.commit_message(loop))
    return gates


NUMERIC_GATE = "Numeric gate at the benchmark sizes"


def final_tests(loop: Loop) -> list[GateResult]:
    """The kernel's unit tests, then the numeric gate at every size of the run, in one child with the winner in."""
    spec = {**base_spec(loop.checkout, loop.profile), "tests": loop.test_spec(loop.options.final_tests_k)}
    spec["sizes"], spec["providers"] = [], []
    spec["numeric"] = loop.numeric_spec()
    result = run_child(loop.checkout, loop.out_dir, "final", spec)
    tests = result.get("tests") or {"ok": False, "summary": result.get("error", "no result")[-500:]}
    selection = f" (-k {loop.options.final_tests_k})" if loop.options.final_tests_k else ""
    label = f"unit tests (GPU): {loop.profile.source.files.test}{selection}"
    gates = [GateResult(label, GateStatus.PASS if tests["ok"] else GateStatus.FAIL, tests["summary"])]
    return [*gates, numeric_gate_result(result.get("numeric"), loop.profile.sizes, tests["ok"])]


def numeric_gate_result(numeric: dict | None, sizes, tests_ok: bool) -> GateResult:
    """The final numeric gate's line: the winner against v0, every output and gradient, at every size of the run."""
    where = ", ".join(s.key for s in sizes)
    if numeric is None:
        why = "not run: the unit tests failed first" if not tests_ok else "the child returned no result"
        return GateResult(NUMERIC_GATE, GateStatus.SKIP if not tests_ok else GateStatus.FAIL, why, hard=tests_ok)
    how = (
        f"{numeric.get('dtype', '?')}, forward and backward, every output and gradient at {where}, vs an fp32 "
        f"reference computed by v0 (limit: max({measure_limits()}))"
    )
    status = GateStatus.PASS if numeric.get("ok") else GateStatus.FAIL
    return GateResult(NUMERIC_GATE, status, f"{numeric['summary']}; {how}")


def measure_limits() -> str:
    from pipelines.perf import measure

    floors = ", ".join(f"{k} {v:.1e}" for k, v in measure.NUMERIC_FLOOR.items())
    return f"{measure.NUMERIC_RATIO:g} x v0's error, {floors}"


def checkstyle(checkout: Checkout, ops: Path) -> GateResult:
    probe = run_command(ruff_argv("--version"), cwd=checkout.root, timeout=60)
    if not probe.ok:  # a host without ruff cannot judge style: said, never passed or failed
        return GateResult("checkstyle", GateStatus.SKIP, f"ruff is not runnable here: {probe.tail(2)}", hard=False)
    return checkstyle_gate(checkout, [str(ops)])


def only_kernel_code(checkout: Checkout, ops: Path) -> GateResult:
    changed = sorted(set(checkout.git.dirty_paths()))
    if changed == [str(ops)]:
        return GateResult("kernel code only", GateStatus.PASS, f"changed: {ops}")
    return GateResult("kernel code only", GateStatus.FAIL, f"changed: {', '.join(changed) or 'nothing'}")


# --- the whole run ------------------------------------------------------------------------------------------------


def run(kernel: str, repo: str | Path, options: Options | None = None, out_dir=None, progress=print) -> PerfRun:
    options = options or Options()
    started = time.perf_counter()
    checkout, profile = understand(kernel, repo, options)
    refusal = None if options.interpret else gpu_refusal()
    if refusal:
        raise PipelineError(
            f"perf {kernel}: {refusal}",
            hint=f"`liger-bot perf {kernel} --repo {repo} --profile-only` prints what can be read without a GPU",
        )
    out_dir = checkout.output_dir(out_dir, f"perf-{kernel}")
    out_dir.mkdir(parents=True, exist_ok=True)
    marker = out_dir / ".interpret"  # what the children are started with is a fact of the workspace
    marker.unlink(missing_ok=True)
    if options.interpret:
        marker.write_text("a CPU dry run under TRITON_INTERPRET=1: no figure here is a speed claim\n")
        options.script = options.ncu = False
    original = checkout.path(profile.source.files.ops).read_text()
    (out_dir / f"original_{kernel}.py").write_text(original)
    measure_baseline(checkout, profile, options, out_dir, progress)
    (out_dir / "profile.md").write_text(profile.to_markdown())
    rules = make_rules(profile, options)
    for pass_name, size, why in rules.not_judged:
        progress(f"not judged: {pass_name} {size}: {why}")
    loop = Loop(checkout, profile, options, out_dir, progress, rules, original)
    if options.budget_s is not None:
        loop.deadline = time.monotonic() - (time.perf_counter() - started) + options.budget_s
    loop.texts["v0"], loop.times["v0"] = original, profile.measured["times"]["liger"]
    stop = optimise(loop)
    progress(f"stopped: {stop}; best {loop.state.best}")
    (out_dir / "comparison.md").write_text(report.comparison(loop))
    branch, gates = "", []
    if loop.state.best != "v0":
        branch = branch_name("perf", kernel.replace("_", "-"))
        gates = finalise(loop, branch)
        if hard_failure(gates):
            branch = ""
    parts = pull_request.for_target(checkout, report.pr_parts(loop, stop))
    body = pull_request.render(parts, Report(tuple(gates)))
    (out_dir / "pr_body.md").write_text(body)
    result = PerfRun(
        profile, loop.records, loop.state.best, stop, branch, gates, body, out_dir, 0.0, rules.not_judged, parts
    )
    result.seconds = time.perf_counter() - started
    (out_dir / "run.json").write_text(json.dumps(result.to_json(), indent=1))
    return result
