"""Classes of bug the H200 convergence run found in patches that were green on the CPU, each checked on the CPU.

- a CausalLM whose lm_head keeps nn.Linear's bias (Phi): Liger's lm_head helper passes FLCE the weight only, so the
  patched model never trained the bias;
- a CausalLM that casts lm_head's input to the lm_head's dtype (Mamba): without the cast FLCE got an fp32 hidden
  state beside a bf16 weight;
- a stack of dense and MoE layers (GLM-4-MoE, EXAONE-MoE) got the dense family's convergence tolerances, which a
  routed model with Liger's fused MoE (TF32 on the GPU) does not meet.
"""

from __future__ import annotations

import ast

import pytest

from pipelines.autopatch import act
from pipelines.autopatch import edits
from pipelines.autopatch import verify
from pipelines.autopatch.understand import understand


def _loss_calls(forward: str) -> list[ast.Call]:
    names = {"lce_maybe_trainable_lm_head", "LigerForCausalLMLoss"}
    calls = [n for n in ast.walk(ast.parse(forward)) if isinstance(n, ast.Call)]
    return [c for c in calls if isinstance(c.func, ast.Name) and c.func.id in names]


def test_an_lm_head_with_a_bias_passes_it_to_flce():
    plan = act.plan(understand("phi"))  # self.lm_head = nn.Linear(..., bias=True)
    assert act.lm_head_facts(plan) == (True, None)
    (call,) = _loss_calls(act.render_lce_forward(plan))
    assert {kw.arg: ast.unparse(kw.value) for kw in call.keywords}["bias"] == "self.lm_head.bias"


def test_a_bias_free_lm_head_renders_liger_s_call_unchanged():
    plan = act.plan(understand("olmo"))  # nn.Linear(..., bias=False)
    assert act.lm_head_facts(plan) == (False, None)
    (call,) = _loss_calls(act.render_lce_forward(plan))
    assert "bias" not in {kw.arg for kw in call.keywords}


def test_a_cast_of_lm_head_s_input_reaches_flce_s_input():
    plan = act.plan(understand("mamba"))  # self.lm_head(hidden_states.to(self.lm_head.weight.dtype))
    assert act.lm_head_facts(plan) == (False, "self.lm_head.weight.dtype")
    forward = act.render_lce_forward(plan)
    cast = "kept_hidden_states = kept_hidden_states.to(self.lm_head.weight.dtype)"
    assert cast in forward and forward.index(cast) < forward.index("lce_maybe_trainable_lm_head(")


def test_a_missing_gradient_is_named_in_the_whole_model_verdict():
    run = {
        "ok": False,
        "loss_check": {"max_abs": 1e-7},
        "topk_check": {"max_abs": 1e-4, "mismatched": 0},
        "grad_check": {"rel": 0.0, "worst": None, "missing": ["lm_head.bias"]},
        "param_check": {"mismatched": 0, "names": []},
    }
    summary = verify._run_summary("class", run)
    assert summary.startswith("class: DIVERGES") and "no gradient for lm_head.bias" in summary


def test_a_stack_of_dense_and_moe_layers_takes_the_moe_entry_s_tolerances(liger_template):
    profile = understand("glm4_moe")  # first_k_dense_replace: dense layers first, MoE after
    assert profile.value("structure") == "hybrid"
    plan = act.plan(profile)
    assert plan.moe and plan.tolerance_family == "moe"
    source = (liger_template / "test/convergence/fp32/test_mini_models.py").read_text()
    edited = act.edit_convergence(source, plan, "float32")
    cases = edits.find_parametrize_list(edits.find_function(ast.parse(edited), "test_mini_model")).elts
    args = {edits.case_name(c): c.args if isinstance(c, ast.Call) else c.elts for c in cases}  # param(...) or (...)
    values = {name: [ast.get_source_segment(edited, v) for v in a[2:10]] for name, a in args.items()}
    ours, floor = values["mini_glm4_moe"], values[act.REFERENCE_CASES["moe"]]
    assert ours != values[act.REFERENCE_CASES["dense"]]
    # the MoE floor (lr 1e-5), each tolerance loosened where its routed parent's entry (mini_deepseek_v3) is looser
    assert "deepseek_v3" in plan.profile.identity.derived_from
    assert ours[0] == floor[0] == "1e-5" and ours[1] == "torch.float32"
    assert all(float(o) >= float(f) for o, f in zip(ours[2:], floor[2:], strict=True)) and ours != floor
    assert "mini_qwen3_moe" in plan.tolerance_note


@pytest.mark.slow
def test_the_whole_model_gate_runs_the_bf16_path_a_cast_left_out_breaks(liger_checkout, monkeypatch):
    """The H200's bf16 FLCE failure of Mamba, found on the CPU: the gate's bf16 step crashes without the cast."""
    profile = understand("mamba")
    monkeypatch.setattr(act, "lm_head_facts", lambda plan: (False, None))  # the forward as it landed: no cast
    for change in act.build_changeset(liger_checkout, profile).changes:
        liger_checkout.path(change.path).write_text(change.text)
    gate = verify.gate_whole_model(profile, liger_checkout.root, verify.LocalRunner(has_gpu=False))
    assert gate.status.value == "FAIL"
    assert "class bf16: RuntimeError: expected m1 and m2 to have the same dtype" in gate.detail
    assert "instance: match" in gate.detail and "class: match" in gate.detail  # fp32 alone could not see it


@pytest.mark.slow
def test_the_whole_model_gate_names_the_bias_a_forward_left_out(liger_checkout, monkeypatch):
    """Phi's patch as it landed (FLCE without lm_head.bias) fails the CPU gate, and says which gradient is missing."""
    profile = understand("phi")
    monkeypatch.setattr(act, "lm_head_facts", lambda plan: (False, None))  # the forward as it landed: no bias
    for change in act.build_changeset(liger_checkout, profile).changes:
        liger_checkout.path(change.path).write_text(change.text)
    gate = verify.gate_whole_model(profile, liger_checkout.root, verify.LocalRunner(has_gpu=False))
    assert gate.status.value == "FAIL"
    assert "instance: DIVERGES" in gate.detail and "no gradient for lm_head.bias" in gate.detail
