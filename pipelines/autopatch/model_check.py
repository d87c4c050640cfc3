"""The whole patched model beside the unpatched HF model, as Liger's convergence test builds and trains them.

    python -m pipelines.autopatch.model_check SPEC_JSON      (run in the target checkout with PYTHONPATH=src)

Runs in a child process: it imports the target's code. The spec names the modeling module and classes, the mini
config of the generated convergence entry (the same keyword values, attention implementation included), its fp32
tolerances and learning rate, and the apply function's flags. Three runs from the same seed on the same random
batches, each trained a few AdamW steps in fp32 and evaluated once, as `run_mini_model` does:

- `reference`: the unpatched model;
- `class`: `apply_liger_kernel_to_<model>(**flags)` before construction (what the convergence test does);
- `instance`: an unpatched model, then `apply_liger_kernel_to_<model>(model=m, **flags)`.

Compared with the reference: every step's loss, the eval step's top-k log-probs, the first step's gradients and the
final parameters. On a CPU host the Liger kernels the interpreter cannot run are replaced by their references
(`kernel_references`); on a GPU host the real kernels run. The last stdout line is the JSON result.

On a GPU host (or with `"rounding_control": true` in the spec) a fourth run, the **rounding control**, is the
unpatched model once more with only its output head computed in float64 and rounded back: HF's own math, rounded
differently, as Liger's fused linear cross entropy rounds differently. Compared with the reference under the same
tolerances, it says whether the entry can tell a patch from fp32 rounding at all: gemma4_unified_text's entry at lr
1e-4 could not (the control moved the eval top-k log-probs by 1.7e-2 against a 5e-3 tolerance, hidden 1024, on the
CPU). It never changes the verdict; the gate reports it beside the runs.
"""

from __future__ import annotations

import importlib
import json
import math
import sys
import traceback

import torch

from pipelines.autopatch import kernel_references

BATCH, SEQ, STEPS, TOP_K = 2, 32, 3, 20
# fp32: the first step's gradients, relative to each parameter's largest gradient. On a GPU Triton's fp32 dot runs
# in TF32 (Liger's fused MoE: 4.6e-3 on an H200 where HF's cuBLAS fp32 is exact), so there the bound is 1e-2.
GRADIENT_RTOL = {"cpu": 1e-3, "cuda": 1e-2}


def set_seed(seed: int = 42) -> None:
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(0)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def batches(vocab_size: int, count: int, device: str) -> list[dict]:
    """Random token batches shaped as Liger's `simple_collate_fn` makes them (labels = input_ids, shifted labels)."""
    generator = torch.Generator().manual_seed(1234)
    out = []
    for _ in range(count):
        ids = torch.randint(3, vocab_size, (BATCH, SEQ), generator=generator)
        shift = torch.nn.functional.pad(ids, (0, 1), value=-100)[..., 1:].contiguous()
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone(), "shift_labels": shift}
        out.append({k: v.to(device) for k, v in batch.items()})
    return out


def build(spec: dict):
    config_cls = getattr(importlib.import_module(spec["config_module"]), spec["config_class"])
    modeling = importlib.import_module(spec["modeling_module"])
    return getattr(modeling, spec["causal_lm_class"])(config_cls(**spec["config"]))


def apply_fn(spec: dict):
    from liger_kernel.transformers import monkey_patch

    return getattr(monkey_patch, spec.get("apply_function") or f"apply_liger_kernel_to_{spec['model_type']}")


def train(model, data: list[dict], lr: float, patched: bool) -> dict:
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses, first_grads = [], None
    for batch in data[:-1]:
        optimizer.zero_grad()
        output = model(**batch)
        output.loss.backward()
        if first_grads is None:
            first_grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        optimizer.step()
        losses.append(output.loss.item())
    model.eval()
    extra = {"skip_logits": False} if patched else {}
    with torch.no_grad():
        output = model(**data[-1], **extra)
    losses.append(output.loss.item())
    logprobs = torch.log_softmax(output.logits.float(), dim=-1)
    return {
        "loss": losses,
        "topk": torch.topk(logprobs, TOP_K, dim=-1).values,
        "grads": first_grads or {},
        "params": {n: p.detach().clone() for n, p in model.named_parameters()},
    }


def _allclose(expected: torch.Tensor, got: torch.Tensor, atol: float, rtol: float) -> dict:
    diff = (expected.float() - got.float()).abs()
    bad = diff > atol + rtol * expected.float().abs()
    return {"max_abs": float(diff.max()) if diff.numel() else 0.0, "mismatched": int(bad.sum()), "ok": not bad.any()}


def compare(reference: dict, run: dict, tol: dict, device: str = "cpu") -> dict:
    """Liger's convergence criteria (loss every step, eval top-k log-probs, final parameters) plus first gradients."""
    loss = _allclose(torch.tensor(reference["loss"]), torch.tensor(run["loss"]), tol["loss_atol"], tol["loss_rtol"])
    topk = _allclose(reference["topk"], run["topk"], tol["logprobs_atol"], tol["logprobs_rtol"])
    grads = {"worst": None, "rel": 0.0, "missing": []}
    # a parameter whose true gradient is ~0 (a key bias under softmax) is judged against the model's gradient scale
    floor = 1e-3 * max((float(g.abs().max()) for g in reference["grads"].values()), default=0.0) + 1e-12
    for name, expected in reference["grads"].items():
        got = run["grads"].get(name)
        if got is None or got.shape != expected.shape:
            grads["missing"].append(name)
            continue
        rel = float((expected - got).abs().max()) / (float(expected.abs().max()) + floor)
        if rel > grads["rel"]:
            grads["worst"], grads["rel"] = name, rel
    grads["ok"] = grads["rel"] <= GRADIENT_RTOL["cpu" if device == "cpu" else "cuda"] and not grads["missing"]
    params = {
        "worst": None,
        "max_abs": 0.0,
        "mismatched": 0,
        "names": sorted(set(reference["params"]) ^ set(run["params"])),
    }
    for name, expected in reference["params"].items():
        got = run["params"].get(name)
        if got is None or got.shape != expected.shape:
            continue
        found = _allclose(expected, got, tol["param_atol"], tol["param_rtol"])
        params["mismatched"] += found["mismatched"]
        if found["max_abs"] > params["max_abs"]:
            params["worst"], params["max_abs"] = name, found["max_abs"]
    params["ok"] = params["mismatched"] == 0 and not params["names"]
    return {
        "loss_ref": reference["loss"],
        "loss": run["loss"],
        "loss_check": loss,
        "topk_check": topk,
        "grad_check": grads,
        "param_check": params,
        "ok": loss["ok"] and topk["ok"] and grads["ok"] and params["ok"],
    }


def _error(exc: BaseException) -> dict:
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    where = "; ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} {f.name}" for f in frames)
    return {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:400]}", "where": where}


def _run(spec: dict, data: list[dict], patch: str | None) -> dict:
    """One model: unpatched, or patched at class level before construction, or on the built instance."""
    device = spec["device"]
    if patch == "class":
        apply_fn(spec)(**spec["flags"])
    set_seed()
    model = build(spec).to(device)
    if patch == "instance":
        apply_fn(spec)(model=model, **spec["flags"])
    return train(model, data, spec["lr"], patched=patch is not None)


def revert(spec: dict) -> None:
    """What the generated revert function does: a fresh modeling module (class-level swaps undone)."""
    modeling = importlib.import_module(spec["modeling_module"])
    importlib.reload(modeling)


def check(spec: dict) -> dict:
    torch.use_deterministic_algorithms(False)
    on_gpu = spec["device"] != "cpu"
    kernels = kernel_references.install(use_references=not on_gpu)
    data = batches(spec["config"]["vocab_size"], STEPS + 1, spec["device"])
    result: dict = {"device": spec["device"], "runs": {}}
    try:
        reference = _run(spec, data, None)
        result["runs"]["reference"] = {"ok": True, "loss": reference["loss"]}
    except Exception as exc:  # the unpatched model itself does not build or run with this config
        result["runs"]["reference"] = _error(exc)
    for patch in spec.get("modes", ("instance", "class")) if result["runs"]["reference"]["ok"] else ():
        revert(spec)
        try:
            result["runs"][patch] = compare(reference, _run(spec, data, patch), spec["tolerances"], spec["device"])
        except Exception as exc:
            result["runs"][patch] = _error(exc)
    if result["runs"]["reference"]["ok"]:
        revert(spec)
        result["runs"]["class bf16"] = _bf16_step(spec, data)
    revert(spec)
    result["ok"] = all(r.get("ok") for r in result["runs"].values())
    if result["runs"]["reference"]["ok"] and spec.get("rounding_control", on_gpu):
        result["rounding_control"] = rounding_control(spec, data, reference)
    return result | {"triton": kernels.triton, "reference": kernels.reference}


CONTROL = "the unpatched model with its output head in float64, rounded back"


def rounding_control(spec: dict, data: list[dict], reference: dict) -> dict:
    """The unpatched model trained again with only its output head rounded differently (float64, cast back), compared
    with the reference under the entry's tolerances: outside them, the entry cannot tell a patch from rounding."""
    revert(spec)
    set_seed()
    model = build(spec).to(spec["device"])
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, torch.nn.Linear):
        return {"ok": True, "skipped": f"no nn.Linear output head ({type(head).__name__})"}
    head.forward = _float64_linear(head)
    try:
        found = compare(reference, train(model, data, spec["lr"], patched=False), spec["tolerances"], spec["device"])
    except Exception as exc:
        return _error(exc)
    finally:
        revert(spec)
    return found | {"what": CONTROL}


def _float64_linear(head: torch.nn.Linear):
    def forward(x: torch.Tensor) -> torch.Tensor:
        bias = head.bias.double() if head.bias is not None else None
        return torch.nn.functional.linear(x.double(), head.weight.double(), bias).to(x.dtype)

    return forward


def _bf16_step(spec: dict, data: list[dict]) -> dict:
    """One training step of the class-patched model cast to bf16, as the bf16 convergence files build it: paths
    only bf16 takes run here (Mamba's forward handed FLCE an fp32 hidden state beside a bf16 weight on an H200).
    Where it fails, the unpatched model takes the same step: failing too, with the same exception type (Inkling 2:
    `model.to(bf16)` casts the weights its `_keep_in_fp32_modules_strict` keeps in fp32), the failure is the model's
    as the files build it, not the patch's, and the step is skipped with both errors."""
    patched = _bf16_run(spec, data, patched=True)
    if patched["ok"]:
        return patched
    revert(spec)
    unpatched = _bf16_run(spec, data, patched=False)
    if unpatched["ok"] or _kind(unpatched) != _kind(patched):
        return patched
    return {
        "ok": True,
        "skipped": f"the unpatched model fails this bf16 step too ({unpatched['error']}); the patched one: "
        f"{patched['error']}",
    }


def _kind(run: dict) -> str:
    return run.get("error", "").split(":", 1)[0]


def _bf16_run(spec: dict, data: list[dict], patched: bool) -> dict:
    try:
        if patched:
            apply_fn(spec)(**spec["flags"])
        set_seed()
        model = build(spec).to(spec["device"]).to(torch.bfloat16)
        loss = model(**data[0]).loss
        loss.backward()
        value = float(loss.float())
    except Exception as exc:
        return _error(exc)
    if not math.isfinite(value):
        return {"ok": False, "error": f"bf16 loss is {value}", "where": "first training step"}
    return {"ok": True, "smoke": True, "loss": [value]}


# -- debug: which flag, which module --------------------------------------------------------------------------

FP32_MODULE_RTOL = 1e-4  # fp32: a swapped module's output against the HF module's, relative to its magnitude
BF16_WORSE = 1.2  # bf16: a swapped module whose mean error against fp64 exceeds the HF module's own by 20% (measured: a
# llama-mode cast on a Gemma-style norm is 1.4x; the right mode 1.0x)


def kernel_flags(spec: dict) -> list[str]:
    """The apply function's kernel flags that are on by default (or that the convergence test turns on)."""
    import inspect

    params = inspect.signature(apply_fn(spec)).parameters
    on = [n for n, p in params.items() if p.default is True or spec["flags"].get(n) is True]
    return [n for n in on if n in params and n != "model"]


def bisect_flags(spec: dict, data: list[dict], reference: dict, calls: dict[str, int] | None = None) -> list[dict]:
    """The whole-model check with each kernel flag turned off in turn (class-level patching, as convergence).
    `calls` (kernel_references.Installed.calls) gives each row the Liger kernels its run called: none, and the match
    says nothing (gemma4_unified_text patches its norms and MLP on instances only, so with FLCE off the class-level
    patch is no patch, and "matches" read as FLCE being the culprit)."""
    rows = []
    for flag in kernel_flags(spec):
        revert(spec)
        trial = {**spec, "flags": {**spec["flags"], flag: False}}
        before = dict(calls or {})
        try:
            found = compare(reference, _run(trial, data, "class"), spec["tolerances"], spec["device"])
        except Exception as exc:
            found = _error(exc)
        row = {"off": flag, "ok": bool(found.get("ok")), "error": found.get("error")}
        if calls is not None:
            row["kernels"] = sorted(k for k, n in calls.items() if n > before.get(k, 0))
        rows.append(row)
    revert(spec)
    return rows


def liger_name(module) -> str | None:
    """The Liger class a module is, or whose forward it was given by instance patching."""
    if type(module).__module__.startswith("liger_kernel"):
        return type(module).__name__
    forward = getattr(getattr(module, "forward", None), "__func__", None)
    if forward is not None and getattr(forward, "__module__", "").startswith("liger_kernel"):
        return module._get_name() if hasattr(module, "_get_name") else forward.__qualname__.split(".")[0]
    return None


def _captured_inputs(model, batch: dict) -> dict[str, tuple]:
    """Each module's inputs at its first call. The hook returns None: a pre-hook's return value replaces the inputs,
    so returning the stored pair fed a module called twice its first call's inputs (Gemma4-unified's rotary embedding,
    called once per layer type, then gave the full-attention layers the sliding layers' cos / sin)."""
    seen: dict[str, tuple] = {}

    def keep_first(name: str, args: tuple, kwargs: dict) -> None:
        seen.setdefault(name, (args, kwargs))

    hooks = [
        m.register_forward_pre_hook(
            lambda mod, args, kwargs, name=name: keep_first(name, args, kwargs), with_kwargs=True
        )
        for name, m in model.named_modules()
        if name
    ]
    try:
        with torch.no_grad():
            model(**batch)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def _cast(value, dtype):
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(dtype)
    if isinstance(value, tuple | list):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _first_tensor(output):
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, tuple | list) and output:
        return _first_tensor(output[0])
    return None


LIGER_SETTINGS = ("offset", "casting_mode", "in_place")  # what a Liger norm was configured with, for the report


def compare_modules(spec: dict, data: list[dict]) -> list[dict]:
    """Each swapped module beside its HF original on the inputs the HF model gave it, in execution order.

    fp32: the relative max error; bf16: the mean error against the HF module run in float64, against the HF
    module's own bf16 error (a wrong casting mode is a worse rounding, not a large error)."""
    import copy

    revert(spec)
    set_seed()
    reference = build(spec).to(spec["device"]).eval()
    patched = copy.deepcopy(reference)
    apply_fn(spec)(model=patched, **spec["flags"])
    inputs = _captured_inputs(reference, {k: v for k, v in data[0].items() if k != "labels"})
    originals, modules = dict(reference.named_modules()), dict(patched.named_modules())
    rows = []
    for name, (args, kwargs) in inputs.items():  # dicts keep insertion order: the order modules ran in
        liger = liger_name(modules.get(name))
        if liger is None:
            continue
        row = {"module": name, "liger": liger, "hf": type(originals[name]).__name__}
        row["settings"] = {a: getattr(modules[name], a) for a in LIGER_SETTINGS if hasattr(modules[name], a)}
        try:
            row |= _module_errors(originals[name], modules[name], args, kwargs)
        except Exception as exc:
            row |= {"error": f"{type(exc).__name__}: {str(exc)[:200]}", "diverges": True}
        rows.append(row)
    revert(spec)
    return rows


def _same_random_weights(hf, liger) -> tuple:
    """Copies of the pair holding the same random weights: a freshly initialized norm weight of zeros (offset 1)
    or ones would hide a wrong offset or casting mode."""
    import copy

    hf, liger = copy.deepcopy(hf).float(), copy.deepcopy(liger).float()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in hf.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
        liger.load_state_dict(hf.state_dict())
    return hf, liger


def _module_errors(hf, liger, args, kwargs) -> dict:
    import copy

    hf, liger = _same_random_weights(hf, liger)
    with torch.no_grad():
        # fp32 HF is the yardstick for bf16 (float64 is not run by every module on a GPU: grouped GEMM experts)
        truth = _first_tensor(copy.deepcopy(hf)(*_cast(args, torch.float32), **_cast(kwargs, torch.float32))).double()
        found = {}
        for dtype, key in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            a, kw = _cast(args, dtype), _cast(kwargs, dtype)
            want = _first_tensor(copy.deepcopy(hf).to(dtype)(*a, **kw)).double()
            got = _first_tensor(copy.deepcopy(liger).to(dtype)(*a, **kw)).double()
            scale = float(want.abs().max()) + 1e-12
            found[f"{key}_max_abs"] = float((want - got).abs().max())
            found[f"{key}_rel"] = found[f"{key}_max_abs"] / scale
            found[f"{key}_hf_error"] = float((want - truth).abs().mean())
            found[f"{key}_liger_error"] = float((got - truth).abs().mean())
    worse = found["bf16_liger_error"] > BF16_WORSE * found["bf16_hf_error"] + 1e-12
    found["diverges"] = found["fp32_rel"] > FP32_MODULE_RTOL or worse
    found["where"] = "fp32" if found["fp32_rel"] > FP32_MODULE_RTOL else ("bf16" if worse else "")
    return found


def debug(spec: dict) -> dict:
    """`liger-bot debug`: the whole-model check, each flag off in turn, and the first swapped module that differs."""
    torch.use_deterministic_algorithms(False)
    kernels = kernel_references.install(use_references=spec["device"] == "cpu")
    data = batches(spec["config"]["vocab_size"], STEPS + 1, spec["device"])
    revert(spec)
    reference = _run(spec, data, None)
    revert(spec)
    try:
        whole = compare(reference, _run(spec, data, "class"), spec["tolerances"], spec["device"])
    except Exception as exc:  # the class-level patch does not build (a constructor the Liger class lacks)
        whole = _error(exc)
    flags = bisect_flags(spec, data, reference, kernels.calls)
    modules = compare_modules(spec, data)
    first = next((m for m in modules if m.get("diverges")), None)
    return {
        "device": spec["device"],
        "whole_model": whole,
        "flags": flags,
        "modules": modules,
        "first_diverging": first,
        "rounding_control": rounding_control(spec, data, reference),
        "triton": kernels.triton,
        "reference": kernels.reference,
    }


def main(argv: list[str]) -> int:
    spec = json.loads(argv[-1])
    print(json.dumps(debug(spec) if argv[0] == "--debug" else check(spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
