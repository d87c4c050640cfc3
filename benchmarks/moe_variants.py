"""Diagnosis for issue 10's MoE convergence failures, one change at a time (not a gate; the gate is `liger-bot verify`).

For each model, its generated fp32 with-logits convergence entry is run through Liger's own `run_mini_model`
(HF run, then Liger run, same seed) under variants, and every comparison of `test_mini_model` is counted instead of
stopping at the first:

- `generated`: the entry as the bot wrote it;
- `hf-experts`: the same with `swiglu=False` (the HF experts stay: isolates LigerExperts' fused MoE);
- `qwen3-sizes`: hidden 896 and expert width 768 (Liger's mini_qwen3_moe) instead of 1024 / 1024 or 2048;
- `bot-sizes` (for Liger's own entries, the controls): hidden 1024 and expert width 1024;
- `dense`: as generated with as many experts as the router picks per token (every token reaches every expert, so
  no routing decision can flip between the two runs);
- `ieee`: as generated, in a process of its own with `TRITON_F32_DEFAULT=ieee` (Triton's fp32 dots in full fp32
  instead of TF32: isolates the fused MoE's TF32 rounding).

    OUT=... python3 benchmarks/moe_variants.py BARE_REPO OUT MODEL[:variant,variant] ...

MODEL `qwen3_moe` (any model with an entry on `main`) runs Liger's own entry from the unmodified checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# Liger's fp32 tolerances for mini_qwen3_moe, which the generated MoE entries copy.
TOLERANCES = {"loss": (1e-5, 1e-3), "topk_logprobs": (5e-3, 1e-2), "params": (5e-3, 1e-5)}
DEFAULT_VARIANTS = ("generated", "hf-experts", "qwen3-sizes")
ROWS: list[dict] = []  # every finished process's rows, written after each: a call cut short keeps them
ROWS_LOCK = threading.Lock()
DEADLINE = 0.0

RUNNER = r"""
import json, sys, time
import torch
sys.path[:0] = ["src", "."]
import test.convergence.fp32.test_mini_models_with_logits as t

name, variants, tolerances = sys.argv[1], sys.argv[2].split(","), json.loads(sys.argv[3])
setup = t.MINI_MODEL_SETUPS[name]
config, patch = setup.mini_model_config, setup.liger_kernel_patch_func
expert_field = "moe_intermediate_size" if hasattr(config, "moe_intermediate_size") else "intermediate_size"
base = {"hidden_size": config.hidden_size, expert_field: getattr(config, expert_field)}
SIZES = {"qwen3-sizes": {"hidden_size": 896, expert_field: 768}, "bot-sizes": {"hidden_size": 1024, expert_field: 1024}}

def bad(expected, actual, atol, rtol):
    e, a = expected.detach().double().cpu(), actual.detach().double().cpu()
    over = (a - e).abs() > atol + rtol * e.abs()
    return int(over.sum()), float((a - e).abs().max()) if e.numel() else 0.0

def compare(expected, actual):
    row = {}
    for key in ("loss", "topk_logprobs"):
        e, a = expected[key], actual[key]
        e, a = (torch.tensor(e), torch.tensor(a)) if isinstance(e, list) else (e, a)
        row[key] = bad(e, a, *tolerances[key]) if e is not None else None
    row["first_loss_diff"] = abs(expected["loss"][0] - actual["loss"][0])
    count, worst, names = 0, 0.0, []
    for (n, ep), (_, ap) in zip(expected["model"].named_parameters(), actual["model"].named_parameters()):
        c, w = bad(ep, ap, *tolerances["params"])
        count, worst = count + c, max(worst, w)
        if c:
            names.append(n)
    row["params"] = (count, worst)
    row["params_failing"] = names[:6]
    return row

expected_cache = {}
EXPERTS = {}
for variant in variants:
    started = time.monotonic()
    sizes = SIZES.get(variant, base)  # `ieee` keeps the generated sizes: its process sets the environment
    for field, value in sizes.items():
        setattr(config, field, value)
    for field in ("num_experts", "num_local_experts", "n_routed_experts"):
        if variant == "dense" and hasattr(config, field):
            setattr(config, field, config.num_experts_per_tok)
        elif hasattr(config, field):
            setattr(config, field, EXPERTS.setdefault(field, getattr(config, field)))
    setup.liger_kernel_patch_func = (lambda **kw: patch(**{**kw, "swiglu": False})) if variant == "hf-experts" else patch
    key = (variant == "dense", tuple(sorted(sizes.items())))
    if key not in expected_cache:
        expected_cache[key] = t.run_mini_model(model_name=name, num_steps=32, dtype=torch.float32, lr=1e-5)
    actual = t.run_mini_model(model_name=name, num_steps=32, dtype=torch.float32, lr=1e-5, with_liger=True)
    row = {"model": name, "variant": variant, "sizes": sizes, **compare(expected_cache[key], actual)}
    row["seconds"] = round(time.monotonic() - started, 1)
    row["pass"] = all(row[k] is None or row[k][0] == 0 for k in ("loss", "topk_logprobs", "params"))
    print("ROW " + json.dumps(row), flush=True)
"""


def run_model(bare: Path, out: Path, spec: str) -> list[dict]:
    model, _, variants = spec.partition(":")
    branch = f"liger-bot/autopatch-{model}"
    has_branch = subprocess.run(["git", "-C", str(bare), "rev-parse", "-q", "--verify", branch], capture_output=True)
    if has_branch.returncode:
        branch = "main"
    variants = variants or ",".join(DEFAULT_VARIANTS if branch != "main" else ("generated", "bot-sizes"))
    work = Path(tempfile.mkdtemp()) / model
    subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", "clone", "-q", "-b", branch, str(bare), str(work)], check=True
    )
    env = {
        **os.environ,
        "HF_DATASETS_OFFLINE": "1",
        "LIGER_FUSED_MOE_AUTOTUNE": "0",
        "PYTHONPATH": os.pathsep.join(["src", os.environ.get("PYTHONPATH", "")]),
    }
    plain = [v for v in variants.split(",") if v != "ieee"]
    runs = [(plain, env)] if plain else []
    if "ieee" in variants.split(","):
        runs.append((["ieee"], {**env, "TRITON_F32_DEFAULT": "ieee"}))
    rows = []
    for names, run_env in runs:
        rows += run_process(model, branch, work, out, names, run_env)
    return rows


def run_process(model: str, branch: str, work: Path, out: Path, variants: list[str], env: dict) -> list[dict]:
    started = time.monotonic()
    argv = [sys.executable, "-c", RUNNER, f"mini_{model}", ",".join(variants), json.dumps(TOLERANCES)]
    try:
        proc = subprocess.run(
            argv, cwd=work, env=env, capture_output=True, text=True, timeout=max(1.0, DEADLINE - time.monotonic())
        )
        stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as stopped:
        stdout, stderr, rc = _text(stopped.stdout), _text(stopped.stderr) + "\n(deadline)", "deadline"
    with (out / f"{model}.log").open("a") as log:
        log.write(stdout + stderr)
    rows = [json.loads(line[4:]) for line in stdout.splitlines() if line.startswith("ROW ")]
    if rc:
        rows.append({"model": f"mini_{model}", "variant": "error", "tail": stderr[-600:]})
    print(f"{model} ({branch}, {','.join(variants)}): exit {rc} in {time.monotonic() - started:.0f} s", flush=True)
    with ROWS_LOCK:
        ROWS.extend(rows)
        (out / "moe_variants.json").write_text(json.dumps(ROWS, indent=2))
    return rows


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def main() -> int:
    global DEADLINE
    bare, out, specs = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    DEADLINE = time.monotonic() + float(os.environ.get("DEADLINE_S", "520"))
    out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(len(specs)) as pool:
        rows = [row for rows in pool.map(lambda s: run_model(bare, out, s), specs) for row in rows]
    print("| model | variant | pass | loss bad / max | top-k bad / max | params bad / max | first-step loss diff |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r["variant"] == "error":
            print(f"| {r['model']} | error | - | {r['tail'][-200:]!r} |")
            continue
        cells = [f"{r[k][0]} / {r[k][1]:.2e}" if r[k] else "-" for k in ("loss", "topk_logprobs", "params")]
        print(
            f"| {r['model']} | {r['variant']} | {r['pass']} | " + " | ".join(cells) + f" | {r['first_loss_diff']:.2e} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
