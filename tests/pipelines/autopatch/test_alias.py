"""A model_type with no modeling file of its own (issue 17): transformers builds it with another model's CausalLM
class, so the patch is a registry entry to that model's apply function plus that model's tests for its config.

The facts come from the installed transformers and a real liger-kernel 0.8.5 checkout; the profiles are built by
hand from what `understand` reads (its probes are not what these tests are about).
"""

from __future__ import annotations

import ast

import pytest

from pipelines.autopatch import act
from pipelines.autopatch import alias
from pipelines.autopatch import supported
from pipelines.autopatch.profile import Identity
from pipelines.autopatch.profile import Profile
from pipelines.autopatch.source import class_home
from pipelines.autopatch.understand import owner_model_type
from pipelines.outcome import PipelineError


def _alias_profile(model_type: str, config_class: str, causal: str, owner: str) -> Profile:
    modeling = f"transformers.models.{owner}.modeling_{owner}"
    return Profile(
        Identity(
            model_type=model_type,
            display_name=config_class.removesuffix("Config"),
            causal_lm_class=causal,
            base_model_class=causal.replace("ForCausalLM", "Model"),
            config_class=config_class,
            decoder_layer_class=causal.replace("ForCausalLM", "DecoderLayer"),
            modeling_module=modeling,
            modeling_file=modeling.replace(".", "/") + ".py",
            alias_of=owner,
            config_module=f"transformers.models.{model_type}.configuration_{model_type}",
        )
    )


@pytest.mark.parametrize(
    ("module", "causal", "home"),
    [
        ("exaone", "LlamaForCausalLM", "llama"),  # a config folder only: the class is llama's
        ("sarvam_mla", "DeepseekV3ForCausalLM", "deepseek_v3"),
        ("llama", "LlamaForCausalLM", None),  # a modeling file of its own
    ],
)
def test_class_home_is_where_transformers_defines_the_class(module, causal, home):
    assert class_home(module, causal) == home


def test_the_owner_is_the_model_type_mapped_to_the_class_from_its_own_folder():
    assert owner_model_type("llama", "LlamaForCausalLM") == "llama"  # not exaone, internlm3, iquestcoder
    assert owner_model_type("glm4_moe", "Glm4MoeForCausalLM") == "glm4_moe"


def test_an_alias_of_a_model_the_target_does_not_patch_is_refused_by_name(liger_checkout):
    profile = _alias_profile("sarvam_moe", "SarvamMoEConfig", "Glm4MoeForCausalLM", "glm4_moe")
    with pytest.raises(PipelineError) as caught:
        act.build_changeset(liger_checkout, profile)
    assert "the target does not patch glm4_moe" in caught.value.message
    assert "autopatch glm4_moe first" in caught.value.hint


def test_an_alias_is_one_registry_entry_and_the_owners_tests_for_its_config(liger_checkout):
    profile = _alias_profile("exaone", "ExaoneConfig", "LlamaForCausalLM", "llama")
    changeset = act.build_changeset(liger_checkout, profile)
    changes = {c.path: c.text for c in changeset.changes}

    assert supported.apply_functions(changes[str(act.MONKEY_PATCH)])["exaone"] == "apply_liger_kernel_to_llama"
    assert not any(c.created for c in changeset.changes)  # no forward of its own
    assert str(act.ROOT_EXPORTS) not in changes
    # Liger's llama forward reads config.pretraining_tp, which ExaoneConfig removes: read with LlamaConfig's default
    assert 'getattr(self.config, "pretraining_tp", 1) > 1' in changes["src/liger_kernel/transformers/model/llama.py"]

    tests = ast.parse(changes[str(act.INSTANCE_TEST)])
    test = next(n for n in tests.body if getattr(n, "name", "") == "test_apply_liger_kernel_to_instance_for_exaone")
    text = ast.unparse(test)
    assert "transformers.models.exaone.configuration_exaone.ExaoneConfig(" in text
    assert "LlamaConfig(" not in text  # the config it builds is this model's: the registry entry is what dispatches
    assert "_apply_liger_kernel_to_instance(model=dummy_model_instance)" in text

    for path in act.CONVERGENCE_FILES:
        source = changes[str(path)]
        tree = ast.parse(source)
        setup = next(n for n in tree.body if act.edits.guarded_setup(n) == "mini_exaone")
        copied = ast.unparse(setup)
        assert "liger_kernel_patch_func=apply_liger_kernel_to_llama" in copied
        assert "model_class=LlamaForCausalLM" in copied and "mini_model_config=ExaoneConfig(" in copied
        assert "pretraining_tp" not in copied  # mini_llama3 sets it; ExaoneConfig has no such field
        cases = act.edits.find_parametrize_list(act.edits.find_function(tree, "test_mini_model")).elts
        assert [act.edits.case_name(c) for c in cases].count("mini_exaone") == 1


def test_a_field_the_alias_config_removes_is_one_it_lacks_and_its_owner_has():
    assert alias.removed_fields(_alias_profile("exaone", "ExaoneConfig", "LlamaForCausalLM", "llama")) == {
        "pretraining_tp"  # ExaoneConfig: `pretraining_tp = AttributeError()`
    }
    sarvam_mla = _alias_profile("sarvam_mla", "SarvamMLAConfig", "DeepseekV3ForCausalLM", "deepseek_v3")
    assert alias.removed_fields(sarvam_mla) == set()


def test_the_owners_forward_reads_a_removed_field_with_the_owners_default():
    source = "def lce_forward(self):\n    if self.config.pretraining_tp > 1:\n        raise Exception\n    return self.config.hidden_size\n"

    class Defaults:
        pretraining_tp = 1

    edited = alias.tolerate_removed_fields(source, {"pretraining_tp"}, Defaults())
    assert 'if getattr(self.config, "pretraining_tp", 1) > 1:' in edited
    assert "return self.config.hidden_size" in edited  # a field the alias keeps is read as before


def test_a_copied_config_call_loses_the_lines_of_removed_fields():
    source = "LlamaConfig(\n    hidden_size=32,\n    pretraining_tp=1,  # its own line\n    vocab_size=8,\n)"
    call = ast.parse(source).body[0].value
    kept = alias.without_keywords(source, call.lineno, call, {"pretraining_tp"})
    assert kept == "LlamaConfig(\n    hidden_size=32,\n    vocab_size=8,\n)"


def test_a_copied_test_sets_the_owners_sizes_where_the_alias_defaults_differ():
    iquestcoder = _alias_profile("iquestcoder", "IQuestCoderConfig", "LlamaForCausalLM", "llama")
    sizes = dict(alias.owner_sizes(iquestcoder, {"hidden_size", "intermediate_size", "num_hidden_layers"}))
    assert sizes["num_attention_heads"] == 32  # LlamaConfig's; IQuestCoderConfig's 40 do not divide hidden 32
    assert "hidden_size" not in sizes  # the owner's test sets it
    text = alias.with_keywords("Config(\n    hidden_size=32,\n)", [("num_attention_heads", 32)])
    assert text == "Config(\n    hidden_size=32,\n    num_attention_heads=32,\n)"
