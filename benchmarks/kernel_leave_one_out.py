"""Leave-one-out for the kernel pipeline: regenerate Liger 0.8.5's hand-written kernels from the PyTorch references
its own `test/transformers/test_*.py` hold, then run Liger's *own* unit test for each op against the generated kernel.

    python -m benchmarks.kernel_leave_one_out prepare DEST [CASE ...]   # CPU host: generate, swap, test (interpreter)
    python -m benchmarks.kernel_leave_one_out list                      # every test file, and what became of it

`prepare` fetches the checkout (`liger-bot target fetch`), then per case, each from a fresh `main`, runs the real CLI,
`liger-bot kernel SPEC --repo DIR --force --name loo_<op>` (--force: Liger's own kernel computes the same function,
which is the point), so each kernel lands on its own branch `liger-bot/kernel-loo_<op>`. Liger's test file for the op
is then copied with its imports of the hand-written Function / module / functional pointing at the generated ones
(`from liger_kernel.transformers.loo_dyt import LigerLooDyT as LigerDyT`) into DEST/swapped/<case>/, and run on that
branch under TRITON_INTERPRET=1 with `-k` keeping the cases built on the reference the kernel came from (Liger's
RMSNorm test pairs three references with three casting modes: three kernels, three selections). Results per case go to
DEST/results.json as they come. benchmarks/kernel_leave_one_out_gpu.sh runs the GPU half from DEST.

A reference Liger's test writes inline (`torch.nn.LayerNorm(hidden_size, eps=1e-6)`, `torch.nn.Softmax(dim=-1)`,
GeGLU's `gelu(tanh) * up` inside LlamaMLP) is spelled in benchmarks/kernel_loo_references.py, each naming its line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFS = "benchmarks/kernel_loo_references.py"


@dataclass(frozen=True)
class Case:
    """One kernel of Liger regenerated from its reference, and how Liger's own test and benchmark meet it."""

    name: str  # the generated kernel's name
    spec: str  # the SPEC given to `liger-bot kernel` (a file of the checkout, or of liger-bot: REFS)
    op: str  # Liger's op: test/transformers/test_{op}.py, benchmark/scripts/benchmark_{op}.py
    swaps: dict[str, str]  # Liger's name imported by its test -> "function" | "module" | "functional"
    select: str = ""  # pytest -k: the cases of Liger's test built on this reference
    liger: str = ""  # Liger's own side for the timing, a Python expression (H: hidden size)
    inputs: int = 1  # tensor inputs of the op
    width: str = "hidden"  # the timed row width: the model's "hidden" or "intermediate" size (gated MLP halves)
    note: str = ""


_NORM = {
    "LigerRMSNormFunction": "function",
    "LigerRMSNorm": "module",
    "liger_rms_norm": "functional",
}
_ADD = {
    "LigerFusedAddRMSNormFunction": "function",
    "LigerFusedAddRMSNorm": "module",
    "liger_fused_add_rms_norm": "functional",
}
CASES = [
    Case(
        "loo_dyt",
        "test/transformers/test_dyt.py:TorchDyT",
        "dyt",
        {"LigerDyTFunction": "function", "LigerDyT": "module", "liger_dyt": "functional"},
        liger="liger_kernel.transformers.dyt.LigerDyT(H)",
    ),
    Case(
        "loo_poly_norm",
        "test/transformers/test_poly_norm.py:NaivePolyNorm",
        "poly_norm",
        {"LigerPolyNormFunction": "function", "LigerPolyNorm": "module", "liger_poly_norm": "functional"},
        liger="liger_kernel.transformers.poly_norm.LigerPolyNorm()",
    ),
    Case(
        "loo_add_rms_norm_llama",
        "test/transformers/test_fused_add_rms_norm.py:LlamaAddRMSNorm",
        "fused_add_rms_norm",
        _ADD,
        "LlamaAddRMSNorm",
        "liger_kernel.transformers.fused_add_rms_norm.LigerFusedAddRMSNorm(H)",
        inputs=2,
    ),
    Case(
        "loo_add_rms_norm_gemma",
        "test/transformers/test_fused_add_rms_norm.py:GemmaAddRMSNorm",
        "fused_add_rms_norm",
        _ADD,
        "GemmaAddRMSNorm",
        "liger_kernel.transformers.fused_add_rms_norm.LigerFusedAddRMSNorm(H, offset=1.0, casting_mode='gemma')",
        inputs=2,
    ),
    Case(
        "loo_add_rms_norm_none",
        "test/transformers/test_fused_add_rms_norm.py:BaseAddRMSNorm",
        "fused_add_rms_norm",
        _ADD,
        "BaseAddRMSNorm",
        "liger_kernel.transformers.fused_add_rms_norm.LigerFusedAddRMSNorm(H, casting_mode='none')",
        inputs=2,
    ),
    Case(
        "loo_rms_norm_llama",
        "test/transformers/test_rms_norm.py:LlamaRMSNorm",
        "rms_norm",
        _NORM,
        "LlamaRMSNorm and not dtensor",
        "liger_kernel.transformers.rms_norm.LigerRMSNorm(H)",
    ),
    Case(
        "loo_rms_norm_gemma",
        "test/transformers/test_rms_norm.py:GemmaRMSNorm",
        "rms_norm",
        _NORM,
        "GemmaRMSNorm and not dtensor",
        "liger_kernel.transformers.rms_norm.LigerRMSNorm(H, offset=1.0, casting_mode='gemma')",
    ),
    Case(
        "loo_rms_norm_none",
        "test/transformers/test_rms_norm.py:BaseRMSNorm",
        "rms_norm",
        _NORM,
        "BaseRMSNorm and not dtensor",
        "liger_kernel.transformers.rms_norm.LigerRMSNorm(H, casting_mode='none')",
    ),
    Case(
        "loo_layer_norm",
        "benchmarks/kernel_loo_layer_norm.py:TorchLayerNorm",
        "layer_norm",
        {"LigerLayerNormFunction": "function", "LigerLayerNorm": "module", "liger_layer_norm": "functional"},
        liger="liger_kernel.transformers.layer_norm.LigerLayerNorm(H, eps=1e-6)",
    ),
    Case(
        "loo_softmax",
        f"{REFS}:TorchSoftmax",
        "softmax",
        {"LigerSoftmax": "module", "liger_softmax": "functional"},
        "not large_row_offset and not int32",
        "liger_kernel.transformers.softmax.LigerSoftmax()",
    ),
    Case(
        "loo_relu_squared",
        "test/transformers/test_relu_squared.py:TorchReLUSquared",
        "relu_squared",
        {"LigerReLUSquaredFunction": "function", "LigerReLUSquared": "module", "liger_relu_squared": "functional"},
        liger="liger_kernel.transformers.relu_squared.LigerReLUSquared()",
    ),
    Case(
        "loo_swiglu",
        f"{REFS}:silu_mul",
        "swiglu",
        {"LigerSiLUMulFunction": "function", "liger_swiglu": "functional"},
        "functional or silumul",
        "FunctionalLayer(liger_kernel.transformers.functional.liger_swiglu)",
        inputs=2,
        width="intermediate",
        note="the MLP tests (LigerSwiGLUMLP and kin: linear layers around the kernel) stay on Liger's kernel",
    ),
    Case(
        "loo_geglu",
        f"{REFS}:gelu_gate_mul",
        "geglu",
        {"LigerGELUMulFunction": "function", "liger_geglu": "functional"},
        "functional",
        "FunctionalLayer(liger_kernel.transformers.functional.liger_geglu)",
        inputs=2,
        width="intermediate",
        note="the MLP tests (LigerGEGLUMLP: linear layers around the kernel) stay on Liger's kernel",
    ),
]
# references of Liger's test files that are tried too: the engine's refusal is the result
REFUSED = [
    Case(
        "loo_modulated_rms_norm",
        "test/transformers/test_modulated_rms_norm.py:ModulatedRMSNormReference",
        "modulated_rms_norm",
        {},
        note="scale and shift broadcast from (hidden,) and (B, hidden): generated, it failed all 166 of Liger's cases",
    ),
    Case("loo_tvd", "test/transformers/test_tvd.py:TorchTVDLoss", "tvd", {}),
    Case("loo_jsd", "test/transformers/test_jsd.py:JSD", "jsd", {}),
    Case("loo_sparsemax", "test/transformers/test_sparsemax.py:torch_sparsemax", "sparsemax", {}),
    Case("loo_kl_div", f"{REFS}:TorchKLDivLoss", "kl_div", {}),
    Case("loo_cross_entropy_z", "test/transformers/test_cross_entropy.py:CrossEntropyWithZLoss", "cross_entropy", {}),
    Case("loo_rope", "test/transformers/test_rope.py:_hf_partial_rope", "rope", {}),
    Case("loo_ce_tvd", "test/transformers/test_fused_ce_tvd.py:torch_ce_tvd", "fused_ce_tvd", {}),
    Case("loo_attn_res", "test/transformers/test_attn_res.py:pytorch_attn_res", "attn_res", {}),
    Case("loo_mhc_sinkhorn", "test/transformers/test_mhc.py:mhc_sinkhorn_ref", "mhc", {}),
    Case("loo_grpo_loss", "test/transformers/test_grpo_loss.py:torch_grpo_loss", "grpo_loss", {}),
    Case(
        "loo_lm_head_ce",
        "test/transformers/test_fused_linear_cross_entropy.py:TorchLMHeadCE",
        "fused_linear_cross_entropy",
        {},
    ),
    Case(
        "loo_multi_token_attention",
        "test/transformers/test_multi_token_attention.py:TorchMultiTokenAttention",
        "multi_token_attention",
        {},
    ),
    Case(
        "loo_neighborhood_attention",
        "test/transformers/test_fused_neighborhood_attention.py:TorchNeighborhoodAttention",
        "fused_neighborhood_attention",
        {},
    ),
    Case("loo_cross_entropy", f"{REFS}:TorchCrossEntropyLoss", "cross_entropy", {}),
]
ALL = {c.name: c for c in CASES + REFUSED}


def generated_names(name: str) -> dict[str, str]:
    """The generated objects' import lines' (module, name), by the kernel pipeline's naming rule."""
    from pipelines.kernel.spec import pascal

    cls = pascal(name)
    return {
        "function": f"from liger_kernel.ops.{name} import Liger{cls}Function",
        "module": f"from liger_kernel.transformers.{name} import Liger{cls}",
        "functional": f"from liger_kernel.transformers.functional import liger_{name}",
    }


_IMPORT = re.compile(r"^(?:from (?P<module>[\w.]+) import (?P<name>\w+)|import (?P<plain>[\w.]+))\s*$", re.M)


def swapped_test(text: str, case: Case) -> str:
    """Liger's test file with each import of one of its hand-written objects pointing at the generated one."""
    lines = generated_names(case.name)
    missing = set(case.swaps)
    out = []
    for line in text.splitlines(keepends=True):
        match = _IMPORT.match(line.rstrip("\n"))
        name = match and match["name"]
        if name in case.swaps and match["module"].startswith("liger_kernel"):
            out.append(f"{lines[case.swaps[name]]} as {name}\n")
            missing.discard(name)
            continue
        out.append(line)
    if missing:
        raise RuntimeError(f"test_{case.op}.py imports none of {sorted(missing)}")
    return "".join(out)


def _run(argv: list[str], cwd: Path, env: dict | None = None, timeout: float = 900) -> tuple[int | str, str, float]:
    started = time.monotonic()
    try:
        proc = subprocess.run(
            argv, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout
        )
        return proc.returncode, proc.stdout + proc.stderr, round(time.monotonic() - started, 1)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return "timeout", out, round(time.monotonic() - started, 1)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def summary_line(output: str) -> str:
    lines = [line.strip("= ") for line in output.splitlines() if re.search(r"\b(passed|failed|skipped|error)", line)]
    return lines[-1] if lines else output.strip().splitlines()[-1][:300] if output.strip() else ""


def failures(output: str) -> list[str]:
    return [line[:400] for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))][:40]


def generate(case: Case, checkout: Path, dest: Path, liger_bot: list[str]) -> dict:
    """The real CLI on a fresh main: the branch, or the refusal with its reason."""
    _git(checkout, "checkout", "-q", "main")
    out = dest / "prepare" / case.name
    spec = case.spec
    if spec.startswith("benchmarks/"):
        spec = str(ROOT / spec)
    argv = [*liger_bot, "kernel", spec, "--repo", str(checkout), "--force", "--name", case.name, "--json"]
    argv += ["--out", str(out)]
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    rc, seconds = proc.returncode, round(time.monotonic() - started, 1)
    (dest / "prepare").mkdir(parents=True, exist_ok=True)
    (dest / "prepare" / f"{case.name}.log").write_text(proc.stderr + proc.stdout)
    branch = f"liger-bot/kernel-{case.name}"
    row: dict = {"case": asdict(case), "rc": rc, "seconds": seconds}
    try:
        _git(checkout, "rev-parse", "-q", "--verify", f"refs/heads/{branch}")
        row["branch"] = branch
    except subprocess.CalledProcessError:
        row["branch"] = None
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        data = {}
    row["tier"] = (data.get("profile") or {}).get("tier")
    row["gates"] = {g["name"]: g["status"] for g in data.get("gates", [])}
    if not row["branch"]:
        error = data.get("error") or {}
        row["refused"] = error.get("message") or (proc.stderr.strip().splitlines() or [""])[-1][:1200]
    return row


def write_swapped(case: Case, checkout: Path, dest: Path) -> Path:
    """DEST/swapped/<case>/test_<op>_loo.py: Liger's own test for the op with its imports swapped to the case's
    kernel (what the combined branch carries, whether or not it ran here)."""
    original = checkout / f"test/transformers/test_{case.op}.py"
    swapped = dest / "swapped" / case.name / f"test_{case.op}_loo.py"
    swapped.parent.mkdir(parents=True, exist_ok=True)
    swapped.write_text(swapped_test(original.read_text(), case))
    return swapped


def liger_test(case: Case, checkout: Path, dest: Path, interpret: bool, workers: int = 0) -> dict:
    """Liger's own test for the op, its imports swapped, on the case's branch."""
    swapped = write_swapped(case, checkout, dest)
    target = checkout / "test/transformers" / swapped.name
    target.write_text(swapped.read_text())
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(target.relative_to(checkout))]
    argv += ["-k", case.select] if case.select else []
    argv += ["-n", str(workers)] if workers else ["-p", "no:xdist"]
    env = {"PYTHONPATH": f"{checkout / 'src'}:{checkout}"}
    if interpret:
        env |= {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    try:
        rc, output, seconds = _run(argv, checkout, env, timeout=1500)
    finally:
        target.unlink()
    (dest / "swapped" / case.name / "pytest_cpu.log").write_text(output)
    return {
        "command": " ".join(argv[2:]),
        "rc": rc,
        "summary": summary_line(output),
        "failures": failures(output),
        "seconds": seconds,
    }


COMBINED = "liger-bot/kernel-loo-all"
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


def insertions(diff: str) -> list[tuple[int, list[str]]]:
    """A `git diff -U0` of pure insertions: (line of the old file after which, the lines inserted)."""
    hunks: list[tuple[int, list[str]]] = []
    for line in diff.splitlines():
        match = _HUNK.match(line)
        if match:
            if match[2] != "0":
                raise RuntimeError(f"not a pure insertion: {line}")
            hunks.append((int(match[1]), []))
        elif hunks and line.startswith("+") and not line.startswith("+++"):
            hunks[-1][1].append(line[1:])
    return hunks


def combine(checkout: Path, rows: dict[str, dict], dest: Path) -> list[str]:
    """One tree holding every generated kernel beside Liger's own, each branch's files as they are and its edits of
    the shared files (exports, functional.py: pure insertions, all placed against main's lines), plus Liger's test
    for each op with its imports swapped (test_<op>__<case>.py) and a conftest keeping each file's -k selection.
    Liger's own tests then run in one pytest (-n 8 on the GPU) and the timing imports every kernel in one process."""
    names = [n for n, r in rows.items() if r.get("branch") and ALL[n].swaps]
    _git(checkout, "checkout", "-q", "-B", COMBINED, "main")
    shared: dict[str, list[tuple[int, int, list[str]]]] = {}
    for order, name in enumerate(names):
        branch = rows[name]["branch"]
        for status_path in _git(checkout, "diff", "--name-status", "main", branch).splitlines():
            status, path = status_path.split("\t", 1)
            if status == "A":
                target = checkout / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(_git(checkout, "show", f"{branch}:{path}") + "\n")
            elif status == "M":
                diff = _git(checkout, "diff", "-U0", "main", branch, "--", path)
                shared.setdefault(path, []).extend((after, order, lines) for after, lines in insertions(diff))
            else:
                raise RuntimeError(f"{branch}: {status} {path}")
    for path, hunks in shared.items():
        lines = (checkout / path).read_text().splitlines()
        for after, _, added in sorted(hunks, key=lambda h: (h[0], h[1]), reverse=True):
            lines[after:after] = added
        (checkout / path).write_text("\n".join(lines) + "\n")
    selections = {}
    for name in names:
        case = ALL[name]
        test = f"test_{case.op}__{name}.py"
        (checkout / "test/transformers" / test).write_text(
            (dest / "swapped" / name / f"test_{case.op}_loo.py").read_text()
        )
        selections[test] = case.select
    (checkout / "test/transformers/conftest.py").write_text(
        CONFTEST.format(selections=json.dumps(selections, indent=4))
    )
    _git(checkout, "add", "-A")
    _git(
        checkout,
        "-c",
        "user.name=liger-bot",
        "-c",
        "user.email=liger-bot@users.noreply.github.com",
        "commit",
        "-q",
        "-m",
        f"leave-one-out: {len(names)} generated kernels side by side, with Liger's own tests swapped to them",
    )
    _git(checkout, "checkout", "-q", "main")
    return names


CONFTEST = '''"""Written by benchmarks/kernel_leave_one_out.py: keeps, in each of Liger's swapped test files, the cases built on
the reference its kernel was generated from (what `pytest -k` kept on the CPU, file by file)."""

import re

SELECT = {selections}


def _keep(expression, name):
    words = re.sub(r"[A-Za-z_][A-Za-z0-9_.-]*", lambda m: m.group(0) if m.group(0) in ("and", "or", "not")
                   else repr(m.group(0).lower() in name), expression)
    return eval(words)  # noqa: S307  -k's grammar: names, and, or, not, parentheses


def pytest_collection_modifyitems(config, items):
    kept, dropped = [], []
    for item in items:
        expression = SELECT.get(item.path.name)
        (kept if not expression or _keep(expression, item.nodeid.lower()) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
'''


def write_results(dest: Path, results: dict) -> None:
    path = dest / "results.json"
    previous = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**previous, **results}, indent=2) + "\n")


def prepare(dest: Path, names: list[str], liger_bot: list[str], skip_tests: bool) -> None:
    from pipelines import target

    dest.mkdir(parents=True, exist_ok=True)
    checkout = dest / "work" / "lk"
    if not checkout.exists():
        target.fetch(checkout)
    cases = [ALL[n] for n in names] if names else CASES + REFUSED
    for case in cases:
        row = {"case": asdict(case), "branch": None}
        branch = f"liger-bot/kernel-{case.name}"
        exists = (
            subprocess.run(
                ["git", "-C", str(checkout), "rev-parse", "-q", "--verify", f"refs/heads/{branch}"], capture_output=True
            ).returncode
            == 0
        )
        if exists:
            row = json.loads((dest / "results.json").read_text()).get(case.name, row) | {"branch": branch}
        else:
            row = generate(case, checkout, dest, liger_bot)
        print(
            f"{case.name}: branch {row['branch']} tier {row.get('tier')} gates {row.get('gates')} "
            f"{row.get('refused') or ''}"[:600],
            flush=True,
        )
        if row["branch"] and case.swaps and skip_tests:  # the combined branch still carries the swapped test
            write_swapped(case, checkout, dest)
        elif row["branch"] and case.swaps:
            _git(checkout, "checkout", "-q", row["branch"])
            row["liger_test_cpu"] = liger_test(case, checkout, dest, interpret=True)
            print(f"  Liger's test_{case.op}.py -k {case.select!r}: {row['liger_test_cpu']['summary']}", flush=True)
            _git(checkout, "checkout", "-q", "main")
        write_results(dest, {case.name: row})
    _git(checkout, "checkout", "-q", "main")
    rows = json.loads((dest / "results.json").read_text())
    combined = combine(checkout, rows, dest)
    print(f"{COMBINED}: {', '.join(combined)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    prep = sub.add_parser("prepare")
    prep.add_argument("dest", type=Path)
    prep.add_argument("cases", nargs="*")
    prep.add_argument("--liger-bot", default="liger-bot", help="the CLI, as a command line")
    prep.add_argument(
        "--skip-tests", action="store_true", help="generate only: Liger's own tests are swapped in, not run on the CPU"
    )
    sub.add_parser("cases")
    args = parser.parse_args(argv)
    if args.verb == "cases":  # for the shell scripts: NAME OP INPUTS WIDTH SELECT
        for case in CASES:
            print(json.dumps({k: v for k, v in asdict(case).items()}))
        return 0
    prepare(args.dest.resolve(), args.cases, args.liger_bot.split(), args.skip_tests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
