"""understand: resolution, the 12 decisions for models whose answers the source shows, and honest evidence."""

from __future__ import annotations

import ast

import pytest

from pipelines.autopatch.profile import DECISION_KEYS
from pipelines.autopatch.profile import Method
from pipelines.autopatch.profile import Status
from pipelines.autopatch.resolve import resolve
from pipelines.autopatch.source import site_packages
from pipelines.autopatch.understand import norm_outputs_added
from pipelines.autopatch.understand import understand
from pipelines.outcome import PipelineError


@pytest.mark.parametrize("name", ["nemotron", "NemotronForCausalLM", "Nemotron", "NEMOTRON", "NemotronConfig"])
def test_resolves_model_type_class_and_display_names(name):
    ref = resolve(name)
    assert (ref.model_type, ref.causal_lm_class, ref.module_name) == ("nemotron", "NemotronForCausalLM", "nemotron")


def test_resolves_display_name_with_punctuation():
    assert resolve("Qwen3-Next").model_type == "qwen3_next"
    assert resolve("qwen3.5").causal_lm_class == "Qwen3_5ForCausalLM"


def test_unknown_name_lists_close_matches():
    with pytest.raises(PipelineError) as err:
        resolve("nemotrn")
    assert "nemotron" in err.value.hint


@pytest.mark.parametrize(
    ("name", "causal", "display"),
    [
        ("gpt2", "GPT2LMHeadModel", "GPT2"),
        ("ctrl", "CTRLLMHeadModel", "CTRL"),
        ("GPT2LMHeadModel", "GPT2LMHeadModel", "GPT2"),
    ],
)
def test_a_causal_lm_named_lmheadmodel_is_a_decoder_only_causal_lm(name, causal, display):
    # transformers' causal-LM mapping names GPT-2's and CTRL's classes <Model>LMHeadModel (they predate ForCausalLM)
    ref = resolve(name)
    assert (ref.causal_lm_class, ref.display_name) == (causal, display)


def test_a_permutation_lm_under_the_same_name_is_still_refused_by_its_layout():
    with pytest.raises(PipelineError, match="XLNetLMHeadModel .* builds no base model"):
        understand("xlnet")


@pytest.mark.parametrize("name", ["bert", "roberta"])
def test_encoder_models_are_refused(name):
    with pytest.raises(PipelineError, match="not a decoder-only|encoder"):
        resolve(name)


@pytest.mark.parametrize("name", ["t5", "bart"])
def test_encoder_decoder_models_are_refused(name):
    with pytest.raises(PipelineError, match="encoder-decoder"):
        resolve(name)


@pytest.mark.parametrize("name", ["../llama", "llama/../../etc", "llama;rm -rf", "$(id)", "a" * 200, "", "ll`a`"])
def test_malicious_names_are_refused_before_any_lookup(name):
    with pytest.raises(PipelineError, match="is not a model name"):
        resolve(name)


@pytest.fixture(scope="module")
def profiles():
    names = ("llama", "gemma", "gemma2", "olmo2", "qwen3_moe", "mixtral", "nemotron", "phi3", "llama4_text")
    return {name: understand(name) for name in names}


def values(profile):
    return {k: d.value for k, d in profile.decisions.items()}


def test_llama(profiles):
    got = values(profiles["llama"])
    assert got["norm_type"] == "rms"
    assert (got["rms_casting_mode"], got["rms_offset"], got["rms_in_place"]) == ("llama", 0.0, True)
    assert (got["mlp_kind"], got["structure"], got["rope"], got["has_vision"]) == ("swiglu", "dense", "standard", False)
    assert got["output_class"] == "LigerCausalLMOutputWithPast"
    # transformers 5.24's LlamaForCausalLM.forward reads the attribute (Liger's older lce_forward uses outputs[0])
    assert got["hidden_state_access"] == "outputs.last_hidden_state"
    assert got["logit_softcapping"] is False
    assert got["norm_attrs"] == {
        "decoder": ["input_layernorm", "post_attention_layernorm"],
        "final": "norm",
        "attn": [],
    }
    assert profiles["llama"].needs_review() == []
    ident = profiles["llama"].identity
    assert (ident.base_model_class, ident.decoder_layer_class, ident.base_model_prefix) == (
        "LlamaModel",
        "LlamaDecoderLayer",
        "model",
    )
    assert ident.forward_params[0] == "input_ids" and "labels" in ident.forward_params


def test_gemma_uses_gemma_casting_offset_one_and_geglu(profiles):
    got = values(profiles["gemma"])
    assert (got["rms_casting_mode"], got["rms_offset"], got["mlp_kind"]) == ("gemma", 1.0, "geglu")
    assert got["rms_in_place"] is True


def test_gemma2_softcaps(profiles):
    got = values(profiles["gemma2"])
    assert got["logit_softcapping"] is True
    assert "pre_feedforward_layernorm" in got["norm_attrs"]["decoder"]


def test_pre_norm_llama_may_backprop_in_place(profiles):
    decision = profiles["llama"].decisions["rms_in_place"]
    assert decision.value is True and decision.method is Method.PROBE
    gradients = decision.evidence[0].probe["gradients"]
    assert gradients["all norms in place"]["differing"] == 0 and gradients["all norms in place"]["of"] > 10


@pytest.mark.parametrize("name", ["gemma2", "olmo2"])
def test_a_norm_output_added_to_the_residual_is_not_in_place(profiles, name):
    """Post-norms (`hidden = residual + self.post_attention_layernorm(h)`): autograd hands the add's gradient to
    both operands as one tensor, so an in-place dX would overwrite the residual's gradient. The probe sees it."""
    decision = profiles[name].decisions["rms_in_place"]
    assert decision.value is False and decision.method is Method.PROBE
    probe = decision.evidence[0].probe
    assert probe["gradients"]["all norms in place"]["differing"] > 0
    assert set(probe["matched"]) == {"post_attention_layernorm", "post_feedforward_layernorm"}
    assert "input_layernorm" not in probe["matched"] and "pre_feedforward_layernorm" not in probe["matched"]
    cited = "\n".join(e.snippet for e in decision.evidence)
    assert "self.post_attention_layernorm(" in cited and "residual + hidden_states" in cited


@pytest.mark.parametrize("name", ["qwen3_moe", "mixtral"])
def test_moe_models(profiles, name):
    got = values(profiles[name])
    assert got["structure"] == "moe"
    assert got["output_class"] == "LigerMoeCausalLMOutputWithPast"
    assert got["mlp_kind"] == "swiglu"  # proven on the fused experts module
    assert profiles[name].identity.experts_class.endswith("Experts")


def test_llama4_pre_routed_experts_are_proven_swiglu_and_act_leaves_them_to_hf(profiles):
    """Every Llama 4 MLP part probes as SwiGLU, the experts on the pre-routed rows Llama4TextMoe gives them. The
    decision is settled; the identity records the calling convention so act patches the shared expert and the
    dense layers only (LigerExperts takes routed inputs and cannot replace these experts)."""
    profile = profiles["llama4_text"]
    decision = profile.decisions["mlp_kind"]
    assert (decision.value, decision.method, decision.status) == ("swiglu", Method.PROBE, Status.SETTLED)
    assert profile.identity.experts_convention == "pre_routed"
    probed = {e.probe["module"]: e.probe for e in decision.evidence}
    assert probed["Llama4TextMLP"]["matched"] == ["gated/silu"]  # the shared expert (and dense MLP) class
    experts = probed["Llama4TextExperts"]
    assert experts["calling_convention"] == "pre_routed" and experts["matched"] == ["pre_routed_experts/silu"]
    assert experts["candidates"]["pre_routed_experts/silu"] == {"fp32": 0.0, "bf16": 0.0}
    assert experts["candidates"]["pre_routed_experts/gelu_tanh"]["fp32"] > 1.0  # GeGLU rejected
    assert "pre-routed rows" in decision.reason
    assert "def forward(self, hidden_states" in "\n".join(e.snippet for e in decision.evidence)

    from pipelines.autopatch import act

    mlp = act.plan(profile).mlp
    assert "LigerExperts" not in mlp.class_statement + mlp.instance_statement
    assert "shared_expert, LigerSwiGLUMLP" in mlp.instance_statement
    assert profiles["mixtral"].identity.experts_convention == "routed"


def test_nemotron_layer_norm_1p_relu_squared_partial_rotary(profiles):
    got = values(profiles["nemotron"])
    assert (got["norm_type"], got["rms_offset"], got["rms_casting_mode"]) == ("layer", 1.0, None)
    assert got["rms_in_place"] is None  # LigerLayerNorm has no in_place option
    assert got["mlp_kind"] == "relu_squared"
    # Liger's liger_rotary_pos_emb rotates the first cos.shape[-1] dims (ops/rope.py): partial rotary is "standard"
    assert got["rope"] == "standard"
    rope = profiles["nemotron"].decisions["rope"]
    assert rope.method is Method.PROBE and rope.evidence[0].probe["matched"] == ["partial_rotary"]
    assert "n/a" in rope.evidence[0].probe["candidates"]["standard"]


@pytest.mark.slow
def test_a_weightless_norm_is_no_patch_target():
    """DeepSeek-V4's q_b_norm is an UnweightedRMSNorm: Liger's instance patch reads `self.weight`."""
    got = values(understand("deepseek_v4"))
    assert "q_a_norm" in got["norm_attrs"]["attn"] and "q_b_norm" not in got["norm_attrs"]["attn"]


def test_outputs_without_aux_loss_use_the_plain_output_class():
    """decision-matrix rule 9 is about aux_loss; DeepSeek-V2 returns router_logits only."""
    decision = understand("deepseek_v2").decisions["output_class"]
    assert decision.value == "LigerCausalLMOutputWithPast" and "no aux_loss" in decision.reason


def test_norm_outputs_reaching_an_add_are_found_through_aliases_and_augmented_adds():
    method = ast.parse(POST_NORM_LAYER).body[0].body[0]
    found = {a.attr: a for a in norm_outputs_added(method, {"input_layernorm", "post_norm", "pre_norm", "q_norm"})}
    assert set(found) == {"post_norm", "pre_norm"}
    assert found["post_norm"].bound.lineno == 7 and found["post_norm"].add.lineno == 8
    assert found["pre_norm"].add.lineno == 11  # `y += x`: an in-place add hands its gradient on as well


POST_NORM_LAYER = """
class Layer:
    def forward(self, x):
        residual = x
        x = self.input_layernorm(x)
        x = self.attn(x)
        x = self.post_norm(x).to(x.dtype)
        x = residual + x
        y = self.pre_norm(x)
        z = self.q_norm(x).view(2, -1)
        y += x
        z = self.mlp(z)
        return x + z
"""


def test_phi3_fused_gate_up(profiles):
    assert values(profiles["phi3"])["mlp_kind"] == "phi3_swiglu"


def test_every_profile_has_the_twelve_decisions_with_evidence(profiles):
    for profile in profiles.values():
        assert list(profile.decisions) == list(DECISION_KEYS)
        for key, decision in profile.decisions.items():
            assert decision.evidence, f"{profile.model_type}.{key} has no evidence"
            if decision.status is Status.NEEDS_REVIEW:
                assert decision.reason


def test_evidence_line_ranges_really_contain_the_snippet(profiles):
    checked = 0
    for profile in profiles.values():
        for decision in profile.decisions.values():
            for evidence in decision.evidence:
                lines = (site_packages() / evidence.file).read_text().splitlines()
                first, last = evidence.lines
                assert 1 <= first <= last <= len(lines)
                assert "\n".join(lines[first - 1 : last]) == evidence.snippet
                checked += 1
    assert checked > 50


def test_probe_decisions_report_every_candidates_residual(profiles):
    casting = profiles["llama"].decisions["rms_casting_mode"]
    probe = casting.evidence[0].probe
    assert probe["matched"] == ["rms/llama/offset=0"]
    assert probe["candidates"]["rms/llama/offset=0"] == {"fp32": 0.0, "bf16": 0.0}
    assert probe["candidates"]["rms/gemma/offset=0"]["bf16"] > 0  # bf16 tells llama and gemma casting apart


@pytest.mark.slow
def test_a_logit_scale_between_lm_head_and_the_loss_is_settled_as_data_with_its_evidence():
    granite = understand("granite").checks["logits_transform"]
    assert granite.status is Status.SETTLED and granite.method is Method.AST
    assert granite.value == [{"divide": "self.config.logits_scaling"}] and "logits_scaling" in granite.reason
    (evidence,) = granite.evidence
    assert evidence.file == "transformers/models/granite/modeling_granite.py" and "logits_scaling" in evidence.snippet
    source = (site_packages() / evidence.file).read_text().splitlines()
    assert "logits_scaling" in source[evidence.lines[0] - 1]
    # slicing and Gemma 2's config softcapping (a decision of its own) are no transform at all
    for model in ("llama", "gemma2"):
        check = understand(model).checks["logits_transform"]
        assert check.status is Status.SETTLED and check.value is None


def test_a_head_named_otherwise_is_the_one_get_output_embeddings_returns():
    profile = understand("rwkv")  # RwkvForCausalLM.head; no attribute named lm_head at all
    check = profile.checks["logits_transform"]
    assert profile.identity.output_head_attr == "head"
    assert check.status is Status.SETTLED and check.reason == "head's output reaches the loss unchanged"
