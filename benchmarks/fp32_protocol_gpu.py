"""Liger's own fp32 convergence protocol for one generated entry, run beside controls that say what its tolerances can
tell apart (thirteenth session, gemma4_unified_text's fp32 FLCE failure on the H200).

    cd LIGER_CHECKOUT && PYTHONPATH=src:. python3 BOT/benchmarks/fp32_protocol_gpu.py [--model gemma4_unified_text]
        [--runs liger,hf,control] [--variants entry,eager] [--json OUT.json]

LIGER_CHECKOUT holds the generated branch (`liger-bot/autopatch-<model>`). Every run is the fp32 file's own
`run_mini_model` (test/convergence/fp32/test_mini_models.py: 32 AdamW steps on tiny_shakespeare, batch 16 x 128, then
an eval step), and each is compared with the unpatched run by the entry's own tolerances (loss, top-k log-probs,
parameters), as `test_mini_model` compares them:

- `liger`: the test's Liger run (the class-level patch with fused_linear_cross_entropy=True);
- `hf`: the unpatched model again (is the device deterministic at this config?);
- `control`: the unpatched model with its output head computed in float64 and rounded back: only the head's fp32
  rounding differs, as it differs under FLCE. Outside the tolerances, the entry cannot tell a patch from rounding.

Variants rebuild the entry's config: `entry` as written; `eager` / `sdpa` with that attn_implementation (every Gemma
entry Liger's maintainers wrote runs eager). On an H200 one run takes a few seconds.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import sys
import time

import torch


def compare(expected: dict, actual: dict, tolerances: dict) -> dict:
    loss_e, loss_a = torch.tensor([expected["loss"]]), torch.tensor([actual["loss"]])
    loss_diff = (loss_e - loss_a).abs()
    loss_bad = loss_diff > tolerances["loss_atol"] + tolerances["loss_rtol"] * loss_a.abs()
    topk_diff = (expected["topk_logprobs"] - actual["topk_logprobs"]).abs()
    topk_bad = topk_diff > tolerances["logprobs_atol"] + tolerances["logprobs_rtol"] * actual["topk_logprobs"].abs()
    params_bad = 0
    for (_, e), (_, a) in zip(expected["model"].named_parameters(), actual["model"].named_parameters(), strict=True):
        params_bad += int((e - a).abs().gt(tolerances["param_atol"] + tolerances["param_rtol"] * a.abs()).sum())
    first_bad = int(loss_bad[0].nonzero()[0]) if loss_bad.any() else None
    return {
        "ok": not loss_bad.any() and not topk_bad.any() and params_bad == 0,
        "loss_max_diff": float(loss_diff.max()),
        "loss_max_rel": float((loss_diff / loss_a.abs()).max()),
        "loss_outside": int(loss_bad.sum()),
        "first_loss_outside": first_bad,
        "loss_diff_by_step": [round(float(d), 7) for d in loss_diff[0]],
        "topk_max_diff": float(topk_diff.max()),
        "topk_outside": int(topk_bad.sum()),
        "params_outside": params_bad,
    }


def entry(module, name: str) -> dict:
    """The entry's lr and tolerances, from the file's parametrize list."""
    for mark in module.test_mini_model.pytestmark:
        if mark.name != "parametrize":
            continue
        for case in mark.args[1]:
            values = case.values if hasattr(case, "values") else case
            if values[0] == name:
                keys = ("loss_atol", "loss_rtol", "logprobs_atol", "logprobs_rtol", "param_atol", "param_rtol")
                return {"num_steps": values[1], "lr": values[2], **dict(zip(keys, values[4:10], strict=True))}
    raise SystemExit(f"no {name} entry in {module.__file__}")


def float64_head(create_model):
    def create(model_name):
        model = create_model(model_name)
        head = model.get_output_embeddings()

        def forward(x):
            bias = head.bias.double() if head.bias is not None else None
            return torch.nn.functional.linear(x.double(), head.weight.double(), bias).to(x.dtype)

        head.forward = forward
        return model

    return create


def variant_config(config, variant: str):
    config = copy.deepcopy(config)
    if variant in ("eager", "sdpa"):
        config._attn_implementation = variant
    elif variant != "entry":
        raise SystemExit(f"unknown variant {variant}")
    return config


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="gemma4_unified_text")
    parser.add_argument("--runs", default="liger,hf,control")
    parser.add_argument("--variants", default="entry")
    parser.add_argument("--json")
    parser.add_argument("--steps", type=int, help="fewer steps than the entry's (a smoke run on the CPU)")
    args = parser.parse_args()
    module = importlib.import_module("test.convergence.fp32.test_mini_models")
    name = f"mini_{args.model}"
    found = entry(module, name)
    tolerances = {k: v for k, v in found.items() if k not in ("num_steps", "lr")}
    setup = module.MINI_MODEL_SETUPS[name]
    original_config, original_create = setup.mini_model_config, module.create_model
    results = {"entry": found, "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"}
    run = getattr(module.run_mini_model, "__wrapped__", module.run_mini_model)
    protocol = {
        "model_name": name,
        "num_steps": args.steps or found["num_steps"],
        "dtype": torch.float32,
        "lr": found["lr"],
    }
    for variant in args.variants.split(","):
        setup.mini_model_config = variant_config(original_config, variant)
        torch.use_deterministic_algorithms(True, warn_only=True)  # as @require_deterministic runs the test
        started = time.time()
        reference = run(**protocol)
        print(f"{variant} reference: {time.time() - started:.1f} s, losses {reference['loss'][:3]}...", flush=True)
        for kind in args.runs.split(","):
            started = time.time()
            module.create_model = float64_head(original_create) if kind == "control" else original_create
            try:
                other = run(**protocol, with_liger=kind == "liger")
            finally:
                module.create_model = original_create
            result = compare(reference, other, tolerances) | {"seconds": round(time.time() - started, 1)}
            results[f"{variant}/{kind}"] = result
            brief = {k: v for k, v in result.items() if k != "loss_diff_by_step"}
            print(f"{variant}/{kind}: {json.dumps(brief)}", flush=True)
        setup.mini_model_config = original_config
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    sys.exit(main())
