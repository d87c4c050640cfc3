"""The whole-model gate's rounding control: the unpatched model again with only its output head rounded differently.

gemma4_unified_text's generated patch failed the gate and Liger's FLCE convergence files on an H200 while nothing it
swapped was wrong: at its fp32 entry's lr (1e-4) the unpatched model, its lm_head merely computed in float64 and
rounded back, moved its eval top-k log-probs by 1.7e-2 against the 5e-3 tolerance (hidden 1024, three AdamW steps, on
the CPU: benchmarks/gemma4_unified_rounding.py). The control says so beside the runs; it never changes the verdict.
"""

from __future__ import annotations

import json

import pytest

from pipelines.autopatch import debug
from pipelines.autopatch import model_check
from pipelines.autopatch import verify
from pipelines.outcome import GateStatus
from pipelines.subprocesses import CommandResult

FP32 = {"loss_atol": 1e-8, "loss_rtol": 1e-5, "logprobs_atol": 5e-3, "logprobs_rtol": 1e-5}
FP32 |= {"param_atol": 5e-3, "param_rtol": 1e-5}  # mini_mistral's fp32 entry


def _spec(tolerances: dict) -> dict:
    config = {"vocab_size": 512, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2}
    config |= {"num_attention_heads": 4, "num_key_value_heads": 2, "attn_implementation": "sdpa"}
    return {
        "config_module": "transformers.models.llama.configuration_llama",
        "config_class": "LlamaConfig",
        "modeling_module": "transformers.models.llama.modeling_llama",
        "causal_lm_class": "LlamaForCausalLM",
        "config": config,
        "lr": 1e-4,
        "tolerances": tolerances,
        "device": "cpu",
    }


@pytest.fixture(scope="module")
def llama_reference():
    spec = _spec(FP32)
    data = model_check.batches(spec["config"]["vocab_size"], model_check.STEPS + 1, "cpu")
    return spec, data, model_check._run(spec, data, None)


def test_the_control_rounds_only_the_output_head_differently(llama_reference):
    spec, data, reference = llama_reference
    control = model_check.rounding_control(spec, data, reference)
    assert control["what"] == model_check.CONTROL
    # HF's own math, rounded differently: not bitwise the reference (the float64 head ran), and only by rounding
    assert 0 < control["loss_check"]["max_abs"] < 1e-5
    assert 0 < control["topk_check"]["max_abs"] < 1e-4
    assert control["ok"]  # a tiny llama at lr 1e-4 is inside mini_mistral's tolerances: the entry can tell
    # judged by the entry's tolerances: at zero tolerance, rounding alone is outside them
    exact = {name: 0.0 for name in FP32}
    assert not model_check.rounding_control({**spec, "tolerances": exact}, data, reference)["ok"]


def _runs(ok: bool) -> dict:
    run = {"ok": ok, "loss_check": {"max_abs": 1.4e-4}, "topk_check": {"max_abs": 2.4e-2, "mismatched": 86 * (not ok)}}
    run |= {"grad_check": {"rel": 4.6e-6, "worst": "model.layers.0.self_attn.q_proj.weight", "missing": []}}
    return run | {"param_check": {"mismatched": 0, "names": []}}


class _Printed:
    """A runner whose model_check child prints `found`."""

    has_gpu = True

    def __init__(self, found: dict):
        self.found = found

    def run(self, argv, cwd, env=None, timeout=900):
        return CommandResult(tuple(argv), 0, json.dumps(self.found))


def _gate(monkeypatch, control: dict, class_ok: bool):
    monkeypatch.setattr(verify, "model_check_spec", lambda profile, root, device: {"device": device})
    found = {"runs": {"reference": {"ok": True, "loss": [10.5]}, "class": _runs(class_ok)}, "ok": class_ok}
    found |= {"rounding_control": control, "triton": ["fused_linear_cross_entropy"], "reference": []}
    return verify.gate_whole_model(None, None, _Printed(found))


def test_a_divergence_rounding_alone_reaches_is_named_as_such(monkeypatch):
    control = _runs(False) | {"what": model_check.CONTROL}
    gate = _gate(monkeypatch, control, class_ok=False)
    assert gate.status is GateStatus.FAIL  # the entry still fails Liger's test on a GPU: the verdict stands
    assert "class: DIVERGES" in gate.detail
    assert f"rounding control ({model_check.CONTROL}): OUTSIDE the tolerances" in gate.detail
    assert "cannot tell a patch from rounding" in gate.detail


def test_a_control_inside_the_tolerances_leaves_a_divergence_to_the_patch(monkeypatch):
    control = _runs(True) | {"what": model_check.CONTROL}
    gate = _gate(monkeypatch, control, class_ok=False)
    assert gate.status is GateStatus.FAIL and "rounding control" in gate.detail
    assert "inside the tolerances" in gate.detail and "OUTSIDE" not in gate.detail
    passing = _gate(monkeypatch, control, class_ok=True)
    assert passing.status is GateStatus.PASS and "inside the tolerances" in passing.detail


def test_a_flag_whose_removal_leaves_no_liger_kernel_running_is_no_culprit():
    # gemma4_unified_text patches its norms and MLP on instances only: with FLCE off the class-level patch is no patch
    data = {
        "whole_model": {"ok": False},
        "flags": [
            {"off": "fused_linear_cross_entropy", "ok": True, "kernels": []},
            {"off": "rms_norm", "ok": True, "kernels": ["fused_linear_cross_entropy"]},
        ],
        "modules": [],
        "rounding_control": _runs(False) | {"what": model_check.CONTROL},
    }
    found = debug.Diagnosis(data)
    assert found.culprits == ["rms_norm"]
    row = found.summary(separator="; ")
    assert "with fused_linear_cross_entropy=False: matches (vacuously: no Liger kernel ran with it off)" in row
    assert "with rms_norm=False: matches;" in row
    assert row.endswith("(a lower lr, as Liger's maintainers chose for the architecture, or looser tolerances)")
