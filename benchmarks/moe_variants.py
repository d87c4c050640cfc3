"""Diagnosis for issue 10's MoE convergence failures, one change at a time (not a gate; the gate is `liger-bot verify`).

For each model, its generated fp32 with-logits convergence entry is run through Liger's own `run_mini_model`
(HF run, then Liger run, same seed) under variants, and every comparison of `test_mini_model` is counted instead of
stopping at the first:

- `generated`: the entry as the bot wrote it;
- `hf-experts`: the same with `swiglu=False` (the HF experts stay: isolates LigerExperts' fused MoE);
- `qwen3-sizes`: hidden 896 and expert width 768 (Liger's mini_qwen3_moe) instead of 1024 / 1024 or 2048;
- `bot-sizes` (for Liger's own entries, the controls): hidden 1024 and expert width 1024.

    OUT=... python3 benchmarks/moe_variants.py BARE_REPO OUT MODEL[:variant,variant] ...

MODEL `qwen3_moe` (any model with an entry on `main`) runs Liger's own entry from the unmodified checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# Liger's fp32 tolerances for mini_qwen3_moe, which the generated MoE entries copy.
TOLERANCES = {"loss": (1e-5, 1e-3), "topk_logprobs": (5e-3, 1e-2), "params": (5e-3, 1e-5)}
DEFAULT_VARIANTS = ("generated", "hf-experts", "qwen3-sizes")

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
for variant in variants:
    started = time.monotonic()
    sizes = SIZES.get(variant, base)
    for field, value in sizes.items():
        setattr(config, field, value)
    setup.liger_kernel_patch_func = (lambda **kw: patch(**{**kw, "swiglu": False})) if variant == "hf-experts" else patch
    key = tuple(sorted(sizes.items()))
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
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "LIGER_FUSED_MOE_AUTOTUNE": "0", "PYTHONPATH": "src"}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, f"mini_{model}", variants, json.dumps(TOLERANCES)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    (out / f"{model}.log").write_text(proc.stdout + proc.stderr)
    rows = [json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith("ROW ")]
    if proc.returncode:
        rows.append({"model": f"mini_{model}", "variant": "error", "tail": proc.stderr[-600:]})
    print(f"{model} ({branch}): exit {proc.returncode} in {time.monotonic() - started:.0f} s", flush=True)
    return rows


def main() -> int:
    bare, out, specs = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(len(specs)) as pool:
        rows = [row for rows in pool.map(lambda s: run_model(bare, out, s), specs) for row in rows]
    (out / "moe_variants.json").write_text(json.dumps(rows, indent=2))
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
