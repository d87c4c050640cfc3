"""Probes on synthetic modules: the right candidate wins, a deliberately wrong one is rejected."""

from __future__ import annotations

import torch
from torch import nn

from pipelines.autopatch import probes


class LlamaStyleRMSNorm(nn.Module):
    def __init__(self, size, offset=0.0):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = 1e-6
        self.offset = offset

    def forward(self, x):
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return (self.offset + self.weight) * h.to(dtype)


class GemmaStyleRMSNorm(LlamaStyleRMSNorm):
    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return (h * (1.0 + self.weight.float())).type_as(x)


class MeanCenteredNorm(LlamaStyleRMSNorm):
    """Neither an RMSNorm nor a LayerNorm: no candidate may claim it."""

    def forward(self, x):
        return (x - x.mean(-1, keepdim=True)) * self.weight


def test_llama_casting_wins_and_gemma_casting_is_rejected():
    result = probes.probe_norm(LlamaStyleRMSNorm(32), 32)
    assert result.settled and result.value == ("rms", "llama", 0.0)
    assert result.residuals["rms/gemma/offset=0"]["bf16"] > 0
    assert result.residuals["rms/llama/offset=1"]["fp32"] > 0.1


def test_gemma_casting_with_offset():
    result = probes.probe_norm(GemmaStyleRMSNorm(32), 32)
    assert result.value == ("rms", "gemma", 1.0)
    assert result.matched == ["rms/gemma/offset=1"]


def test_offset_is_told_apart_even_in_llama_mode():
    assert probes.probe_norm(LlamaStyleRMSNorm(32, offset=1.0), 32).value == ("rms", "llama", 1.0)


def test_a_norm_no_candidate_reproduces_needs_review():
    result = probes.probe_norm(MeanCenteredNorm(32), 32)
    assert not result.settled and result.value is None
    assert "no candidate" in result.reason


class GatedMLP(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = nn.Linear(16, 24), nn.Linear(16, 24), nn.Linear(24, 16)
        self.act = act

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


def test_mlp_activation_is_proven():
    assert probes.probe_mlp(GatedMLP(nn.functional.silu), 16).value == "swiglu"
    tanh = probes.probe_mlp(GatedMLP(lambda t: nn.functional.gelu(t, approximate="tanh")), 16)
    assert tanh.value == "geglu" and tanh.matched == ["gated/gelu_tanh"]
    exact = probes.probe_mlp(GatedMLP(nn.functional.gelu), 16)
    assert exact.value == "geglu (exact gelu)"  # Liger's GEGLU is tanh-only: not silently "geglu"
    assert exact.residuals["gated/gelu_tanh"]["fp32"] > probes.FP32_TOLERANCE


def _llama4_experts(hidden_act: str):
    """Llama 4's own experts module (pre-routed: forward(hidden_states) only), built tiny."""
    from transformers.models.llama4.configuration_llama4 import Llama4TextConfig
    from transformers.models.llama4.modeling_llama4 import Llama4TextExperts

    config = Llama4TextConfig(hidden_size=32, intermediate_size=48, num_local_experts=4, hidden_act=hidden_act)
    return Llama4TextExperts(config)


def test_pre_routed_experts_are_driven_as_the_moe_block_drives_them():
    result = probes.probe_experts(_llama4_experts("silu"), 32, num_experts=4, top_k=1)
    assert result.convention == probes.PRE_ROUTED and result.to_json()["calling_convention"] == "pre_routed"
    assert (result.value, result.matched) == ("swiglu", ["pre_routed_experts/silu"])
    assert result.residuals["pre_routed_experts/silu"] == {"fp32": 0.0, "bf16": 0.0}
    # the deliberately wrong GeGLU candidate runs on the same inputs and is rejected by its residual
    assert result.residuals["pre_routed_experts/gelu_tanh"]["fp32"] > 100 * probes.FP32_TOLERANCE


def test_pre_routed_gelu_experts_are_not_called_swiglu():
    result = probes.probe_experts(_llama4_experts("gelu_pytorch_tanh"), 32, num_experts=4, top_k=1)
    assert (result.value, result.matched) == ("geglu", ["pre_routed_experts/gelu_tanh"])
    assert result.residuals["pre_routed_experts/silu"]["fp32"] > 100 * probes.FP32_TOLERANCE


def test_experts_convention_is_read_from_the_forward_signature():
    from transformers.models.mixtral.configuration_mixtral import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralExperts

    routed = MixtralExperts(MixtralConfig(hidden_size=32, intermediate_size=48, num_local_experts=4))
    assert probes.experts_convention(routed) == probes.ROUTED
    assert probes.experts_convention(_llama4_experts("silu")) == probes.PRE_ROUTED
    assert probes.experts_convention(nn.Bilinear(2, 2, 2)) is None  # forward(input1, input2): neither


def test_rope_standard_and_partial():
    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    angles = torch.randn(1, 5, 4)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    names = ("q", "k", "cos", "sin")
    full = probes.probe_rope(probes.standard_rope, names, (q, k, cos, sin), {})
    assert full.value == "standard" and full.matched == ["standard"]
    half = probes.probe_rope(probes.partial_rope, names, (q, k, cos[..., :4], sin[..., :4]), {})
    # Liger's kernel takes rotary_dim from cos's width: partial rotary is its standard function too
    assert half.value == "standard" and half.matched == ["partial_rotary"] and "n/a" in half.residuals["standard"]
    pairs = probes.probe_rope(probes.interleaved_rope, names, (q, k, cos, sin), {})
    assert pairs.value == "none" and pairs.matched == ["interleaved"]


class Block(nn.Module):
    """A residual block with its norm before (pre-norm, like Llama) or after (post-norm, like OLMo 2) the mixer."""

    def __init__(self, post_norm: bool):
        super().__init__()
        self.norm, self.mixer, self.post_norm = LlamaStyleRMSNorm(16), nn.Linear(16, 16), post_norm
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)

    def forward(self, x):
        if self.post_norm:
            return x + self.norm(self.mixer(x))
        return x + self.mixer(self.norm(x))


class Stack(nn.Module):
    def __init__(self, post_norm: bool):
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.blocks = nn.ModuleList([Block(post_norm), Block(post_norm)])

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return x


def in_place_probe(post_norm: bool):
    torch.manual_seed(0)
    model, inputs = Stack(post_norm), torch.randn(3, 8)
    return probes.probe_in_place(model, lambda: model(inputs), {"norm": [b.norm for b in model.blocks]})


def test_in_place_backward_is_safe_before_the_mixer():
    result = in_place_probe(post_norm=False)
    assert result.value is True and result.residuals["all norms in place"]["differing"] == 0


def test_in_place_backward_corrupts_the_residual_when_the_norm_output_is_added():
    result = in_place_probe(post_norm=True)
    assert result.value is False and result.matched == ["norm"]
    moved = result.residuals["all norms in place"]
    assert moved["differing"] > 0 and moved["max_relative"] > 1e-2


def _longcat_experts(zero_experts: int):
    """LongCat-Flash's experts: n_routed_experts with weights, then zero_expert_num identity experts."""
    from transformers.models.longcat_flash.configuration_longcat_flash import LongcatFlashConfig
    from transformers.models.longcat_flash.modeling_longcat_flash import LongcatFlashExperts

    config = LongcatFlashConfig(
        hidden_size=32, expert_ffn_hidden_size=16, n_routed_experts=4, zero_expert_num=zero_experts
    )
    experts = LongcatFlashExperts(config)
    with torch.no_grad():
        for param in experts.parameters():
            param.normal_()
    return experts


def _mixtral_experts():
    from transformers.models.mixtral.configuration_mixtral import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralExperts

    return MixtralExperts(MixtralConfig(hidden_size=32, intermediate_size=16, num_local_experts=4))


def _built_mixtral_experts():
    """Experts inside a built model: transformers picks its grouped_mm forward, which gathers rows unchecked."""
    from transformers.models.mixtral.configuration_mixtral import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralForCausalLM

    sizes = {"hidden_size": 32, "intermediate_size": 16, "num_local_experts": 4, "num_hidden_layers": 1}
    config = MixtralConfig(**sizes, num_attention_heads=4, num_key_value_heads=2, vocab_size=64)
    return MixtralForCausalLM(config).model.layers[0].mlp.experts


class _IdentityServingExperts(torch.nn.Module):
    """LongCat-Flash's experts up to transformers 5.24: indices past down_proj's rows are identity experts, served
    inside the experts module (5.25 moved them into the MoE block, so the modeling file's class no longer shows it)."""

    def __init__(self, hidden_size: int, intermediate_size: int, routed: int, identities: int):
        super().__init__()
        self.routed, self.total = routed, routed + identities
        self.gate_up_proj = torch.nn.Parameter(torch.randn(self.total, 2 * intermediate_size, hidden_size))
        self.down_proj = torch.nn.Parameter(torch.randn(routed, hidden_size, intermediate_size))

    def forward(self, hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        for slot in range(top_k_index.shape[1]):
            for token, expert in enumerate(top_k_index[:, slot].tolist()):
                row = hidden_states[token]
                if expert >= self.routed:
                    served = row
                else:
                    gate, up = (self.gate_up_proj[expert] @ row).chunk(2)
                    served = self.down_proj[expert] @ (torch.nn.functional.silu(gate) * up)
                out[token] += served * top_k_weights[token, slot]
        return out


def test_experts_serving_an_index_past_their_weights_are_found():
    # LigerExperts would read gate_up_proj / down_proj rows the identity experts do not have
    assert probes.serves_weightless_experts(_IdentityServingExperts(32, 16, routed=4, identities=2), 32)
    assert not probes.serves_weightless_experts(_longcat_experts(zero_experts=0), 32)  # the index is dropped
    assert not probes.serves_weightless_experts(_mixtral_experts(), 32)  # its padding index: dropped
    assert not probes.serves_weightless_experts(_built_mixtral_experts(), 32)  # judged by the modeling file's forward
    assert not probes.serves_weightless_experts(_llama4_experts("silu"), 32)  # pre-routed: the call fails
