"""Class-level swaps that must stay classes or must not happen (issue 17: RecurrentGemma, MiniMax-M3-VL): a norm
class the modeling file tests with isinstance becomes a LigerRMSNorm subclass, an MLP whose Liger class builds other
parameters is patched on instances only. Apart from test_breadth.py so xdist runs this file's whole-model gate
beside it."""

from __future__ import annotations

import ast

import pytest

from pipelines.autopatch import act
from pipelines.autopatch.understand import understand


@pytest.fixture(scope="module")
def recurrent_gemma():
    return understand("recurrent_gemma")


@pytest.mark.slow
def test_a_norm_class_the_modeling_file_tests_with_isinstance_is_swapped_for_a_class(recurrent_gemma, liger_checkout):
    # RecurrentGemma's _init_weights: `isinstance(module, RecurrentGemmaRMSNorm)`; a partial there raised TypeError
    plan = act.plan(recurrent_gemma)
    assert plan.norm.class_value == "LigerRMSNormForRecurrentGemma"
    assert plan.norm.subclass["checked_at"].startswith(
        "transformers/models/recurrent_gemma/modeling_recurrent_gemma.py:"
    )
    changes = {c.path: c.text for c in act.build_changeset(liger_checkout, recurrent_gemma).changes}
    rms_norm = ast.parse(changes[str(act.RMS_NORM)])
    (added,) = [n for n in rms_norm.body if isinstance(n, ast.ClassDef) and n.name == "LigerRMSNormForRecurrentGemma"]
    assert [b.id for b in added.bases] == ["LigerRMSNorm"]
    init = ast.get_source_segment(changes[str(act.RMS_NORM)], added)
    assert "offset=1.0" in init and 'casting_mode="gemma"' in init and 'init_fn="zeros"' in init
    patch = changes[str(act.MONKEY_PATCH)]
    assert "from liger_kernel.transformers.rms_norm import LigerRMSNormForRecurrentGemma\n" in patch
    assert "modeling_recurrent_gemma.RecurrentGemmaRMSNorm = LigerRMSNormForRecurrentGemma" in patch


def test_a_norm_class_nothing_tests_with_isinstance_keeps_the_partial_and_rms_norm_py():
    plan = act.plan(understand("vaultgemma"))
    assert plan.norm.class_value.startswith("partial(LigerRMSNorm, ") and plan.norm.subclass is None


def test_an_mlp_whose_liger_class_builds_other_parameters_is_patched_on_instances_only(recurrent_gemma):
    # RecurrentGemmaMlp: biases and half of config.intermediate_size; LigerGEGLUMLP: neither
    plan = act.plan(recurrent_gemma)
    assert plan.mlp.class_statement.startswith("pass") and "_patch_geglu_module" in plan.mlp.instance_statement
    (note,) = [n for n in plan.notes if "instances only" in n]
    assert "LigerGEGLUMLP has no down_proj.bias" in note and "gate_proj.weight is (64, 64) in HF" in note
    assert act.plan(understand("gemma")).mlp.class_statement == "modeling_gemma.GemmaMLP = LigerGEGLUMLP"


def test_an_mlp_whose_constructor_takes_a_layer_index_is_patched_on_instances_only():
    # Gemma4UnifiedTextMLP(config, layer_idx): swapped for LigerGEGLUMLP(config), the model's own call raised TypeError
    plan = act.plan(understand("gemma4_unified_text"))
    assert plan.mlp.class_statement.startswith("pass") and "_patch_geglu_module" in plan.mlp.instance_statement
    (note,) = [n for n in plan.notes if "Gemma4UnifiedTextMLP is patched on instances only" in n]
    assert "requires layer_idx, which LigerGEGLUMLP's constructor lacks" in note


@pytest.mark.slow
def test_recurrent_gemma_s_patch_passes_the_whole_model_gate(recurrent_gemma, liger_checkout):
    from pipelines.autopatch import verify

    for change in act.build_changeset(liger_checkout, recurrent_gemma).changes:
        liger_checkout.path(change.path).write_text(change.text)
    gate = verify.gate_whole_model(recurrent_gemma, liger_checkout.root, verify.LocalRunner(has_gpu=False))
    assert gate.status.value == "PASS", gate.detail
    numerics = verify.gate_cpu_numerics(recurrent_gemma, liger_checkout.root, verify.LocalRunner(has_gpu=False))
    assert numerics.status.value == "SKIP" and "unconditionally" in numerics.detail and not numerics.hard
