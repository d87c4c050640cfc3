"""Profiles written by hand from the HF modeling source, for testing act/verify/pipeline apart from `understand`.

Class names follow transformers' fixed formats (`<Prefix>ForCausalLM`, `<Prefix>RMSNorm` ...); each decision
below was read from the named modeling file of transformers 5.x. The forward parameters are read from the class.
"""

from __future__ import annotations

import importlib
import inspect

from pipelines.autopatch.profile import Decision
from pipelines.autopatch.profile import Identity
from pipelines.autopatch.profile import Method
from pipelines.autopatch.profile import Profile
from pipelines.autopatch.profile import Status

STANDARD_NORMS = {"decoder": ["input_layernorm", "post_attention_layernorm"], "final": "norm"}
QK_NORMS = {**STANDARD_NORMS, "attn": ["q_norm", "k_norm"]}
DENSE = {
    "norm_type": "rms",
    "rms_casting_mode": "llama",
    "rms_offset": 0.0,
    "rms_in_place": True,
    "mlp_kind": "swiglu",
    "structure": "dense",
    "has_vision": False,
    "rope": "standard",
    "output_class": "LigerCausalLMOutputWithPast",
    "hidden_state_access": "outputs.last_hidden_state",
    "logit_softcapping": False,
    "norm_attrs": STANDARD_NORMS,
}
MOE = {**DENSE, "structure": "moe", "output_class": "LigerMoeCausalLMOutputWithPast"}

# model_type -> (display name, class prefix, decision overrides on DENSE/MOE, identity overrides)
MODELS = {
    "llama": ("Llama", "Llama", DENSE, {}),
    "mistral": ("Mistral", "Mistral", DENSE, {}),
    "qwen2": ("Qwen2", "Qwen2", DENSE, {}),
    "qwen3": ("Qwen3", "Qwen3", {**DENSE, "norm_attrs": QK_NORMS}, {}),
    "gemma": (
        "Gemma",
        "Gemma",
        {**DENSE, "rms_casting_mode": "gemma", "rms_offset": 1.0, "mlp_kind": "geglu"},
        {},
    ),
    "mixtral": ("Mixtral", "Mixtral", MOE, {"experts_class": "MixtralExperts", "experts_attr": "experts"}),
    "qwen3_moe": (
        "Qwen3 MoE",
        "Qwen3Moe",
        {**MOE, "norm_attrs": QK_NORMS},
        {"experts_class": "Qwen3MoeExperts", "experts_attr": "experts"},
    ),
    "nemotron": (
        "Nemotron",
        "Nemotron",
        {**DENSE, "norm_type": "layer", "mlp_kind": "relu_squared", "rope": "partial"},
        {"norm_class": None},
    ),
    # unsupported by liger-kernel 0.8.5: llama-like dense decoders
    "helium": ("Helium", "Helium", {**DENSE, "rope": "interleaved"}, {}),  # rotate_half on even/odd pairs
    "seed_oss": ("Seed-OSS", "SeedOss", DENSE, {}),
    "hyperclovax": ("HyperCLOVA X", "HyperCLOVAX", DENSE, {}),
    # a CausalLM built with a text config that no auto mapping knows (model_type emu3_text_model)
    "emu3": (
        "Emu3",
        "Emu3",
        DENSE,
        {
            "config_class": "Emu3TextConfig",
            "base_model_class": "Emu3TextModel",
            "registry_keys": ("emu3", "emu3_text_model"),
        },
    ),
    "olmoe": (
        "OLMoE",
        "Olmoe",
        {**MOE, "norm_attrs": QK_NORMS},
        {"experts_class": "OlmoeExperts", "experts_attr": "experts"},
    ),
}


def decisions(values: dict, needs_review: tuple[str, ...] = ()) -> dict[str, Decision]:
    out = {}
    for key, value in values.items():
        status = Status.NEEDS_REVIEW if key in needs_review else Status.SETTLED
        reason = "hand profile: marked for review" if key in needs_review else ""
        out[key] = Decision(value, Method.AST, (), status, reason)
    return out


def hand_profile(model_type: str, needs_review: tuple[str, ...] = (), supported_by: str | None = None) -> Profile:
    display, prefix, values, identity_overrides = MODELS[model_type]
    module_name = f"transformers.models.{model_type}.modeling_{model_type}"
    module = importlib.import_module(module_name)
    causal_lm = getattr(module, f"{prefix}ForCausalLM")
    params = tuple(p for p in inspect.signature(causal_lm.forward).parameters if p not in ("self", "kwargs"))
    fields = {
        "model_type": model_type,
        "display_name": display,
        "causal_lm_class": causal_lm.__name__,
        "base_model_class": f"{prefix}Model",
        "config_class": f"{prefix}Config",
        "decoder_layer_class": f"{prefix}DecoderLayer",
        "modeling_module": module_name,
        "modeling_file": f"transformers/models/{model_type}/modeling_{model_type}.py",
        "norm_class": f"{prefix}RMSNorm",
        "mlp_class": f"{prefix}MLP",
        "rotary_fn": "apply_rotary_pos_emb",
        "forward_params": params,
        "supported_by": supported_by,
        **identity_overrides,
    }
    return Profile(Identity(**fields), decisions(values, needs_review))
