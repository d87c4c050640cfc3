"""Sample contexts for kernel_templates/autopatch/*.j2, built the way act builds them (one per plan variant)."""

from __future__ import annotations

from pipelines.autopatch import act
from tests.pipelines.autopatch.hand_profiles import hand_profile

# dense llama-like, MoE, Gemma-style norm partial + GeGLU, and Nemotron (ReLU^2, no RoPE, LayerNorm, **kwargs)
VARIANTS = ("hyperclovax", "mixtral", "gemma", "nemotron")


def _extras(plan: act.Plan) -> dict:
    names = act.forward_param_names(plan)
    return {
        "params": act._forward_params(plan),
        "model_args": [n for n in names if n not in act.NOT_FORWARDED],
        "hidden_states": "outputs.last_hidden_state",
        # gemma: a config softcap; hyperclovax: its logit scale folded into the hidden states
        "softcap": "self.config.final_logit_softcapping" if plan.model_type == "gemma" else None,
        "scaled_hidden_states": "kept_hidden_states * self.config.logits_scaling"
        if plan.model_type == "hyperclovax"
        else None,
        "logits_statements": ["logits = logits * self.config.logits_scaling"]
        if plan.model_type == "hyperclovax"
        else [],
        "output_class": plan.profile.value("output_class"),
        "output_fields": ["cache", "hidden_states"]
        if plan.model_type == "nemotron"
        else ["cache", "hidden_states", "attentions"],
        "lm_head_helper_module": "liger_kernel.transformers.model.llama",
        # nemotron's sample: an lm_head with a bias and a cast of its input (Phi, Mamba), both reaching FLCE
        "lm_head_bias": plan.model_type == "nemotron",
        "lm_head_input_cast": "self.lm_head.weight.dtype" if plan.model_type == "nemotron" else None,
        "uses_cache_type": True,
        "test_config": [("hidden_size", "32"), ("num_hidden_layers", "2")],
        "model_checks": [{"before": "base_model.norm is not None", "after": "base_model.norm is not None"}],
        "layer_checks": [{"before": "layer.mlp is not None", "after": "layer.mlp is not None"}],
        "extra_imports": ["from liger_kernel.transformers import LigerReLUSquared"],
        "mini_config": [("hidden_size", "1024"), ("vocab_size", "32000")],
        "attn_implementation": "eager",
        "lr": "1e-5",
        "dtype": "bfloat16" if plan.moe else "float32",
        "tolerances": ["1e-2", "5e-2", "1e-1", "1e-2", "1e-2", "1e-2"],
        # Inkling 2's lm_head writes fewer columns than vocab_size: its loss reads the logits' own width
        "loss_vocab_size": "logits.shape[-1]" if plan.model_type == "gemma" else "self.config.vocab_size",
        # nemotron's sample: a vocabulary projection not named lm_head (BioGPT's output_projection), read directly
        "output_head": "output_projection" if plan.model_type == "nemotron" else "lm_head",
        "direct_loss": plan.model_type in ("gemma", "nemotron"),  # a softcap or another head name
        # nemotron's sample also: a prediction head before the projection (ModernBERT-decoder), labels not shifted
        # (TrOCR), a vocabulary cut (Inkling) of a head that scales its rows (Dory), no logits_to_keep (xLSTM)
        "pre_heads": ["self.lm_head"] if plan.model_type == "nemotron" else [],
        "unshifted_labels": plan.model_type == "nemotron",
        "vocab_cut": "self.config.unpadded_vocab_size" if plan.model_type == "nemotron" else None,
        "head_scaled": plan.model_type == "nemotron",
        "head_weight": "self.output_projection.weight[: self.config.unpadded_vocab_size] * torch.as_tensor("
        "self.output_projection.scale).reshape(-1, 1)[: self.config.unpadded_vocab_size]"
        if plan.model_type == "nemotron"
        else "self.lm_head.weight",
        "head_bias": "self.output_projection.bias[: self.config.unpadded_vocab_size]"
        if plan.model_type == "nemotron"
        else "self.lm_head.bias",
        "keeps_logits": plan.model_type != "nemotron",
        "auto_mapped": plan.model_type != "nemotron",  # a config class in no auto mapping (Emu3TextConfig)
        **_rms_norm_subclass(plan),
    }


def _rms_norm_subclass(plan: act.Plan) -> dict:
    """rms_norm_subclass.py.j2's fields, as act writes them for a norm class its modeling file tests with isinstance."""
    return {
        "name": f"LigerRMSNormFor{plan.profile.identity.display_name.replace(' ', '')}",
        "hf_class": plan.profile.identity.norm_class or "SampleRMSNorm",
        "checked_at": f"{plan.profile.identity.modeling_file}:1",
        "offset": "1.0" if plan.model_type == "gemma" else "0.0",
        "casting_mode": "gemma" if plan.model_type == "gemma" else "llama",
        "init_fn": "zeros" if plan.model_type == "gemma" else "ones",
        "in_place": plan.model_type != "gemma",
    }


def samples() -> list[tuple[str, dict]]:
    """(variant, context) pairs; every autopatch template renders with each context."""
    out = []
    for model_type in VARIANTS:
        plan = act.plan(hand_profile(model_type))
        out.append((model_type, {**plan.context(), **_extras(plan)}))
    return out
