"""Probes: run a HF module beside candidate Liger semantics on random inputs and keep the candidate that matches.

Each candidate is a pure-PyTorch re-implementation of what a Liger kernel computes (RMSNorm casting modes and
offset as in `ops/rms_norm.py`, SwiGLU/GEGLU/ReLU² MLPs as in `transformers/swiglu.py` and `geglu.py`, RoPE as
in `rope.py`, `llama4_rope.py` and `qwen2vl_mrope.py`), plus the non-Liger variants a model may use instead
(exact GELU, partial and interleaved rotary), so that "Liger cannot do this" is proven rather than guessed.

A candidate matches when it reproduces the HF output in fp32 (to `FP32_TOLERANCE`) and in bf16 — exactly,
or, when no candidate is exact, to within one bf16 rounding step. Inputs are random with a fixed seed.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

from pipelines.autopatch.act import has_field
from pipelines.autopatch.kernel_references import rms_norm as rms_reference

SEED = 0
FP32_TOLERANCE = 1e-5
BF16_ULP = 2.0**-7  # relative spacing of bf16 numbers: "close" allows one rounding step
DTYPES = (torch.float32, torch.bfloat16)
# A corrupted gradient is off by O(1) or more; the in-place emulation's own reordering of fp32 sums by ~1e-5.
IN_PLACE_TOLERANCE = 1e-3
NO_MATCH = "no candidate reproduces the HF module (residuals in the evidence)"


class UnbuildableModel(Exception):
    """The base model could not be built and run on the CPU at any tiny size: why, and whether its own default
    config builds it (on the meta device) -- the difference between our tiny config and the model's own bug."""

    def __init__(self, config_class, base_class, error: Exception):
        self.config_class, self.base_class, self.error = config_class, base_class, error
        default_error = None
        try:
            with torch.device("meta"):
                base_class(config_class())
        except Exception as exc:
            default_error = exc
        self.default_builds = default_error is None
        super().__init__(f"{type(error).__name__}: {str(error)[:200]}")


class NotApplicable(Exception):
    """The candidate cannot run on this module (a missing projection, a shape it does not handle)."""


@dataclass(frozen=True)
class Candidate:
    name: str
    value: Any  # what the decision becomes when this candidate is the match
    run: Callable[..., Any]


@dataclass
class ProbeResult:
    value: Any = None
    matched: list[str] = field(default_factory=list)
    residuals: dict[str, Any] = field(default_factory=dict)
    reason: str = ""  # set when undecided: why no single value was proven
    convention: str | None = None  # experts probes: how the module is called (ROUTED / PRE_ROUTED)

    @property
    def settled(self) -> bool:
        return not self.reason

    def to_json(self) -> dict:
        found = {
            "candidates": self.residuals,
            "matched": self.matched,
            "tolerance": {"fp32_relative": FP32_TOLERANCE, "bf16": "exact, else within rounding steps of the max"},
        }
        return found | ({"calling_convention": self.convention} if self.convention else {})


def _tensors(output) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    return [t for t in output if isinstance(t, torch.Tensor)]


def _residual(expected, got) -> tuple[float, float]:
    """Max abs difference, and the largest expected magnitude (what the tolerances scale with)."""
    worst, scale = 0.0, 0.0
    for want, have in zip(_tensors(expected), _tensors(got), strict=True):
        if want.shape != have.shape:
            raise NotApplicable(f"shape {tuple(have.shape)} != {tuple(want.shape)}")
        worst = max(worst, float((want.float() - have.float()).abs().max()))
        scale = max(scale, float(want.float().abs().max()))
    return worst, scale


def compare(
    reference: Callable,
    candidates: Sequence[Candidate],
    make_inputs: Callable[[torch.dtype], tuple],
    bf16_steps: float = 1.0,
) -> ProbeResult:
    """Run `reference` and every candidate on the same inputs per dtype; pick the single matching value.

    Exact candidates win; when none is exact, a candidate within FP32_TOLERANCE (relative) in fp32 and within
    `bf16_steps` bf16 rounding steps of the largest output in bf16 matches.
    """
    result = ProbeResult()
    scores: dict[str, dict] = {c.name: {} for c in candidates}
    for dtype in DTYPES:
        key = "fp32" if dtype == torch.float32 else "bf16"
        torch.manual_seed(SEED)
        inputs = make_inputs(dtype)
        with torch.no_grad():
            try:
                expected = reference(dtype, *inputs)
            except TypeError as exc:
                result.reason = f"the HF module takes other inputs than this probe gives it ({exc})"
                return result
            for cand in candidates:
                if "n/a" in scores[cand.name]:
                    continue
                try:
                    worst, scale = _residual(expected, cand.run(dtype, *inputs))
                except NotApplicable as exc:
                    scores[cand.name] = {"n/a": str(exc)}
                    continue
                except (RuntimeError, ValueError, IndexError) as exc:  # shapes the candidate cannot handle
                    scores[cand.name] = {"n/a": f"{type(exc).__name__}: {str(exc)[:120]}"}
                    continue
                scores[cand.name][key] = worst
                scores[cand.name][f"{key}_scale"] = scale
    result.residuals = {n: {k: v for k, v in s.items() if not k.endswith("_scale")} for n, s in scores.items()}
    exact = [c for c in candidates if _within(scores[c.name], 0.0)]
    close = [c for c in candidates if _within(scores[c.name], bf16_steps)]
    chosen = exact or close
    result.matched = [c.name for c in chosen]
    values = {repr(c.value): c.value for c in chosen}
    if not chosen:
        result.reason = NO_MATCH
    elif len(values) > 1:
        result.reason = f"candidates {', '.join(result.matched)} all match: these inputs cannot tell them apart"
    else:
        result.value = next(iter(values.values()))
    return result


def _within(score: dict, bf16_steps: float) -> bool:
    if "fp32" not in score or "bf16" not in score:
        return False
    fp32_ok = score["fp32"] <= FP32_TOLERANCE * (1.0 + score["fp32_scale"])
    return fp32_ok and score["bf16"] <= bf16_steps * BF16_ULP * score["bf16_scale"]


def _randomize(module: torch.nn.Module) -> torch.nn.Module:
    """A float32 copy with random weights (ones/zeros init would hide an offset or a weight cast)."""
    module = copy.deepcopy(module).float()
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    return module


def _per_dtype(module: torch.nn.Module) -> dict[torch.dtype, torch.nn.Module]:
    base = _randomize(module)
    return {torch.float32: base, torch.bfloat16: copy.deepcopy(base).to(torch.bfloat16)}


# -- normalization -------------------------------------------------------------------------------------------


def _norm_eps(module) -> float:
    for name in ("variance_epsilon", "eps", "epsilon"):
        value = getattr(module, name, None)
        if isinstance(value, float | int):
            return float(value)
    return 1e-6


def layer_norm_reference(x, weight, bias, eps: float, offset: float):
    """Liger's LayerNorm (fp32 statistics, output in the input dtype), with an optional weight offset."""
    w = (weight.float() + offset) if weight is not None else None
    b = bias.float() if bias is not None else None
    return F.layer_norm(x.float(), (x.shape[-1],), w, b, eps).to(x.dtype)


def norm_candidates(modules: dict[torch.dtype, torch.nn.Module]) -> list[Candidate]:
    def rms(offset: float, mode: str):
        def run(dtype, x):
            m = modules[dtype]
            return rms_reference(x, getattr(m, "weight", None), _norm_eps(m), offset, mode)

        return run

    def layer(offset: float):
        def run(dtype, x):
            m = modules[dtype]
            if getattr(m, "weight", None) is None and getattr(m, "bias", None) is None and offset:
                raise NotApplicable("no weight to offset")
            return layer_norm_reference(x, getattr(m, "weight", None), getattr(m, "bias", None), _norm_eps(m), offset)

        return run

    cands = [
        Candidate(f"rms/{mode}/offset={offset:g}", ("rms", mode, offset), rms(offset, mode))
        for mode in ("llama", "gemma", "none")
        for offset in (0.0, 1.0)
    ]
    cands += [Candidate(f"layer/offset={offset:g}", ("layer", None, offset), layer(offset)) for offset in (0.0, 1.0)]
    return cands


def probe_norm(module: torch.nn.Module, hidden_size: int) -> ProbeResult:
    """Value: (family, casting_mode, offset), e.g. ("rms", "llama", 0.0) or ("layer", None, 1.0)."""
    modules = _per_dtype(module)

    def inputs(dtype):
        return ((torch.randn(2, 5, hidden_size) * 2 + 0.3).to(dtype),)

    return compare(lambda dtype, x: modules[dtype](x), norm_candidates(modules), inputs)


# -- in-place RMSNorm backward ------------------------------------------------------------------------------


class _InPlaceBackward(torch.autograd.Function):
    """A norm whose backward writes dX into dY's storage, as Liger's `rms_norm_backward(in_place=True)` does.

    Forward and the gradient math are the HF module's own (so only the aliasing differs from a plain run);
    like Liger's `@ensure_contiguous`, a non-contiguous dY is copied first, which makes the write harmless.
    """

    @staticmethod
    def forward(ctx, run, x, *params):
        with torch.enable_grad():
            inner_x = x.detach().requires_grad_(x.requires_grad)
            inner_y = run(inner_x)
        ctx.inner = (inner_x, inner_y, params)
        return inner_y.detach()

    @staticmethod
    def backward(ctx, dy):
        inner_x, inner_y, params = ctx.inner
        wanted = [t for t in (inner_x, *params) if t.requires_grad]
        grads = iter(torch.autograd.grad(inner_y, wanted, dy, allow_unused=True))
        dx, *dparams = [next(grads) if t.requires_grad else None for t in (inner_x, *params)]
        if dx is not None and dy.is_contiguous() and dy.dtype == dx.dtype:
            dx = dy.copy_(dx)  # the aliasing under test: dY's storage now holds dX
        return (None, dx, *dparams)


def _emulate_in_place(module: torch.nn.Module) -> Callable[[], None]:
    """Make `module` backprop like Liger's in-place RMSNorm; returns the undo."""
    original = module.forward
    params = tuple(p for p in module.parameters(recurse=False))

    def forward(hidden_states, *args, **kwargs):
        return _InPlaceBackward.apply(lambda x: original(x, *args, **kwargs), hidden_states, *params)

    module.forward = forward
    return lambda: module.__dict__.pop("forward", None)


def gradients(model: torch.nn.Module, run: Callable[[], torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every parameter's gradient after one backward of `run()` against fixed random output weights."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(SEED)
    out = run()
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(SEED + 1))
    (out.float() * weights).sum().backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def gradient_difference(reference: dict[str, torch.Tensor], other: dict[str, torch.Tensor]) -> dict:
    """Largest relative gradient difference, and the parameters that differ beyond IN_PLACE_TOLERANCE."""
    worst, differing = 0.0, []
    for name, want in reference.items():
        have = other.get(name)
        if have is None:
            differing.append(name)
            worst = max(worst, 1.0)
            continue
        rel = float((want - have).abs().max()) / (float(want.abs().max()) + 1e-12)
        worst = max(worst, rel)
        if rel > IN_PLACE_TOLERANCE:
            differing.append(name)
    return {"max_relative": worst, "differing": len(differing), "of": len(reference), "first": differing[:3]}


def probe_in_place(
    model: torch.nn.Module,
    run: Callable[[], torch.Tensor],
    groups: dict[str, list[torch.nn.Module]],
    suspects: Sequence[str] = (),
) -> ProbeResult:
    """Value True when every norm in `groups` may backprop in place (all gradients unchanged), else False.

    fp32 forward/backward passes: one as is, one with every norm emulating Liger's in-place backward and, when
    that changes the gradients, one with only the norms not in `suspects` (the source's explanation, confirmed
    when those stay exact) or else one per group, to name the norms that cannot.
    """
    reference = gradients(model, run)

    def with_in_place(names) -> dict:
        undo = [_emulate_in_place(m) for name in names for m in groups[name]]
        try:
            return gradient_difference(reference, gradients(model, run))
        finally:
            for step in undo:
                step()

    result = ProbeResult()
    every = with_in_place(list(groups))
    result.residuals = {"all norms in place": every}
    if not every["differing"]:
        result.value, result.matched = True, list(groups)
        return result
    result.value = False
    others = [name for name in groups if name not in suspects]
    if suspects and others:
        rest = with_in_place(others)
        result.residuals[f"all but {', '.join(suspects)} in place"] = rest
        if not rest["differing"]:
            result.matched = [name for name in groups if name in suspects]
            return result
    for name in groups:
        alone = with_in_place([name])
        result.residuals[name] = alone
        if alone["differing"]:
            result.matched.append(name)
    return result


# -- MLP -----------------------------------------------------------------------------------------------------

ACTIVATIONS: dict[str, Callable] = {
    "silu": F.silu,
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
    "gelu_exact": F.gelu,
}
# The Liger MLP each gated activation maps to; exact GELU has no Liger kernel (its GEGLU is tanh-only).
GATED_KINDS = {"silu": "swiglu", "gelu_tanh": "geglu", "gelu_exact": "geglu (exact gelu)"}


def _need(module, *names):
    missing = [n for n in names if not hasattr(module, n)]
    if missing:
        raise NotApplicable(f"no {', '.join(missing)}")
    return [getattr(module, n) for n in names]


def mlp_candidates(modules: dict[torch.dtype, torch.nn.Module]) -> list[Candidate]:
    def gated(act: str):
        def run(dtype, x):
            gate, up, down = _need(modules[dtype], "gate_proj", "up_proj", "down_proj")
            return down(ACTIVATIONS[act](gate(x)) * up(x))

        return run

    def fused(act: str):  # Phi3: one gate_up projection, split in two halves
        def run(dtype, x):
            gate_up, down = _need(modules[dtype], "gate_up_proj", "down_proj")
            gate, up = gate_up(x).chunk(2, dim=-1)
            return down(ACTIVATIONS[act](gate) * up)

        return run

    def relu_squared(dtype, x):
        up, down = _need(modules[dtype], "up_proj", "down_proj")
        if hasattr(modules[dtype], "gate_proj"):
            raise NotApplicable("gated MLP (has gate_proj)")
        return down(torch.relu(up(x)).square())

    cands = [Candidate(f"gated/{act}", GATED_KINDS[act], gated(act)) for act in ACTIVATIONS]
    cands.append(Candidate("fused_gate_up/silu", "phi3_swiglu", fused("silu")))
    cands.append(Candidate("fused_gate_up/gelu_tanh", "phi3_geglu", fused("gelu_tanh")))
    cands.append(Candidate("ungated/relu_squared", "relu_squared", relu_squared))
    return cands


def probe_mlp(module: torch.nn.Module, hidden_size: int) -> ProbeResult:
    modules = _per_dtype(module)

    def inputs(dtype):
        return (torch.randn(2, 5, hidden_size).to(dtype),)

    return compare(lambda dtype, x: modules[dtype](x), mlp_candidates(modules), inputs)


def experts_reference(x, gate_up, down, top_k_index, top_k_weights, act: Callable):
    """Liger's fused MoE (`LigerExperts`): per token, sum_k w_k * down_e(act(gate_e x) * up_e x)."""
    out = torch.zeros(x.shape, dtype=torch.float32)
    for slot in range(top_k_index.shape[1]):
        for token in range(x.shape[0]):
            expert = int(top_k_index[token, slot])
            gate, up = F.linear(x[token], gate_up[expert]).chunk(2, dim=-1)
            y = F.linear(act(gate) * up, down[expert]) * top_k_weights[token, slot]
            out[token] += y.float()
    return out.to(x.dtype)


ROUTED = "routed"  # forward(hidden_states, top_k_index, top_k_weights): LigerExperts' convention
PRE_ROUTED = "pre_routed"  # forward(hidden_states): rows already grouped per expert and scaled (Llama 4)
# routed, but an index past the experts with weights still computes (LongCat-Flash's zero-computation experts)
WEIGHTLESS_EXPERTS = "weightless_experts"


def experts_convention(module: torch.nn.Module) -> str | None:
    """How the MoE block calls its experts, from the forward's signature: three tensors, or one pre-routed one."""
    import inspect

    params = inspect.signature(module.forward).parameters.values()
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 3:
        return ROUTED
    if len(positional) == 1:
        return PRE_ROUTED
    return None


def serves_weightless_experts(module: torch.nn.Module, hidden_size: int, tokens: int = 4) -> bool:
    """Whether routed experts still give an output when every token goes to the first index past their down_proj
    rows (an identity or other zero-computation expert). LigerExperts indexes its weights by the router's index,
    so it cannot serve such an expert. A module that rejects the index, or drops it (a zero output: the padding
    index of expert parallelism), has none."""
    import inspect

    down = getattr(module, "down_proj", None)
    if not isinstance(down, torch.Tensor) or down.dim() != 3:
        return False
    param = next(module.parameters())
    x = torch.randn(tokens, hidden_size, generator=torch.Generator().manual_seed(0)).to(param)  # the global RNG kept
    # top-2, both picks the same index: a top-1 index of shape [tokens, 1] is squeezed away by some forwards
    index = torch.full((tokens, 2), down.shape[0], dtype=torch.long, device=param.device)
    weights = torch.full((tokens, 2), 0.5, dtype=param.dtype, device=param.device)
    # the modeling file's own forward: transformers' grouped / batched kernels (`use_experts_implementation`, chosen
    # when a model is built) gather weight rows by index unchecked, so an index past them returns garbage there
    forward = inspect.unwrap(type(module).forward)
    try:
        with torch.no_grad():
            out = forward(module, x, index, weights)
    except Exception:  # one_hot past num_classes, an index error: the index is no expert
        return False
    return isinstance(out, torch.Tensor) and bool(out.abs().sum() > 0)


def pre_routed_reference(x, gate_up, down, num_experts: int, act: Callable):
    """Gated experts on pre-routed rows (`Llama4TextMoe.forward`): x holds num_experts equal blocks of rows, block
    e going through expert e, down_e(act(gate_e x) * up_e x); weights in the [experts, H, 2I] / [experts, I, H]
    layout the experts multiply by (x @ W)."""
    rows = x.view(num_experts, -1, x.shape[-1])
    gate, up = torch.bmm(rows, gate_up).chunk(2, dim=-1)
    return torch.bmm(act(gate) * up, down).view(-1, x.shape[-1])


def _routed_inputs(hidden_size: int, num_experts: int, top_k: int, tokens: int = 6):
    def inputs(dtype):
        x = torch.randn(tokens, hidden_size).to(dtype)
        index = torch.stack([torch.randperm(num_experts)[:top_k] for _ in range(tokens)])
        weights = torch.softmax(torch.randn(tokens, top_k), -1).to(dtype)
        return x, index, weights

    return inputs


def _pre_routed_inputs(hidden_size: int, num_experts: int, tokens: int = 6):
    """What `Llama4TextMoe.forward` hands its experts: the tokens repeated once per expert, each copy scaled by
    that expert's router score (0 for experts outside the top k), as [num_experts * tokens, hidden]."""

    def inputs(dtype):
        x = torch.randn(tokens, hidden_size)
        scores = torch.sigmoid(torch.randn(tokens, num_experts))
        routed = x.repeat(num_experts, 1) * scores.transpose(0, 1).reshape(-1, 1)
        return (routed.to(dtype),)

    return inputs


def _fused_weights(module, hidden_size: int, layout: str):
    gate_up, down = _need(module, "gate_up_proj", "down_proj")
    if not isinstance(gate_up, torch.Tensor) or gate_up.dim() != 3:
        raise NotApplicable("gate_up_proj is not a fused [experts, ., .] parameter")
    axis = -1 if layout == "linear" else 1
    if gate_up.shape[axis] != hidden_size:
        wanted = f"[experts, 2I, {hidden_size}]" if layout == "linear" else f"[experts, {hidden_size}, 2I]"
        raise NotApplicable(f"gate_up_proj is {tuple(gate_up.shape)}, not {wanted}")
    return gate_up, down


def probe_experts(module: torch.nn.Module, hidden_size: int, num_experts: int, top_k: int) -> ProbeResult:
    """Gated activations over the fused expert weights, called the way the MoE block calls this experts module:
    (x, top_k_index, top_k_weights) as LigerExperts is, or pre-routed rows (`experts_convention`)."""
    modules = _per_dtype(module)
    convention = experts_convention(module)
    if convention is None:
        return ProbeResult(reason=f"{type(module).__name__}.forward takes neither 3 routed tensors nor 1 pre-routed")

    def routed(act: str):
        def run(dtype, x, index, weights):
            gate_up, down = _fused_weights(modules[dtype], hidden_size, "linear")
            return experts_reference(x, gate_up, down, index, weights, ACTIVATIONS[act])

        return run

    def pre_routed(act: str):
        def run(dtype, x):
            gate_up, down = _fused_weights(modules[dtype], hidden_size, "matmul")
            return pre_routed_reference(x, gate_up, down, gate_up.shape[0], ACTIVATIONS[act])

        return run

    if convention == PRE_ROUTED:
        cands = [Candidate(f"pre_routed_experts/{act}", GATED_KINDS[act], pre_routed(act)) for act in ACTIVATIONS]
        result = compare(lambda dtype, x: modules[dtype](x), cands, _pre_routed_inputs(hidden_size, num_experts))
    else:
        cands = [Candidate(f"experts/{act}", GATED_KINDS[act], routed(act)) for act in ACTIVATIONS]
        inputs = _routed_inputs(hidden_size, num_experts, top_k)
        # bf16 sums over experts round in a different order than ours: allow a few rounding steps
        result = compare(lambda dtype, x, i, w: modules[dtype](x, i, w), cands, inputs, bf16_steps=4)
    result.convention = convention
    return result


# -- RoPE ----------------------------------------------------------------------------------------------------


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def standard_rope(q, k, cos, sin, unsqueeze_dim=1):
    """Liger's `liger_rotary_pos_emb`: rotate_half over the full head_dim."""
    if cos.shape[-1] != q.shape[-1]:
        raise NotApplicable(f"cos covers {cos.shape[-1]} of {q.shape[-1]} head dims (Liger rotates all of them)")
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def partial_rope(q, k, cos, sin, unsqueeze_dim=1):
    """Liger's `liger_rotary_pos_emb` when cos is narrower than the head: rotate_half over the first
    cos.shape[-1] dims, the rest passed through (ops/rope.py `_resolve_rotary_dim`: rotary_dim defaults to
    min(cos.shape[-1], head_dim), and the kernel leaves [rotary_dim:head_dim] untouched)."""
    rot = cos.shape[-1]
    if rot >= q.shape[-1]:
        raise NotApplicable("cos covers the whole head_dim")
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)

    def one(x):
        x_rot, x_pass = x[..., :rot], x[..., rot:]
        return torch.cat((x_rot * cos + rotate_half(x_rot) * sin, x_pass), dim=-1)

    return one(q), one(k)


def half_width_rope(q, k, cos, sin, unsqueeze_dim=1):
    """Liger's `liger_rotary_pos_emb_gpt_oss`: cos/sin hold one entry per rotated pair (half of head_dim)."""
    if cos.shape[-1] * 2 != q.shape[-1]:
        raise NotApplicable(f"cos covers {cos.shape[-1]} entries, not half of head_dim {q.shape[-1]}")
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)

    def one(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    return one(q), one(k)


def interleaved_rope(q, k, cos, sin, unsqueeze_dim=1):
    """Not a Liger kernel (Liger's pairs are (i, i + rotary_dim/2)): GPT-J style pairs (x0, x1) rotated, over the first cos.shape[-1] dims."""
    rot = cos.shape[-1]
    if rot > q.shape[-1]:
        raise NotApplicable("cos is wider than the head")
    cos = cos[..., : rot // 2].repeat_interleave(2, dim=-1).unsqueeze(unsqueeze_dim)
    sin = sin[..., : rot // 2].repeat_interleave(2, dim=-1).unsqueeze(unsqueeze_dim)

    def one(x):
        x_rot, x_pass = x[..., :rot], x[..., rot:]
        return torch.cat((x_rot * cos + rotate_every_two(x_rot) * sin, x_pass), dim=-1)

    return one(q), one(k)


def llama4_rope(xq, xk, freqs_cis):
    """Liger's `liger_llama4_text_rotary_pos_emb`: complex multiply of adjacent pairs by freqs_cis."""
    if not torch.is_complex(freqs_cis):
        raise NotApplicable("freqs_cis is not complex")

    def one(x):
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * freqs_cis[:, :, None, :]).flatten(3).type_as(x)

    return one(xq), one(xk)


def mrope(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
    """Liger's `liger_multimodal_rotary_pos_emb` (Qwen2-VL): cos/sin picked per section from 3 position axes."""
    if cos.dim() != 4 or cos.shape[0] != 3:
        raise NotApplicable("cos has no leading 3-axis (temporal, height, width) dimension")
    sections = list(mrope_section) * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(sections, dim=-1))], dim=-1)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(sections, dim=-1))], dim=-1)
    return standard_rope(q, k, cos, sin, unsqueeze_dim)


def _args(c: dict, *names: str) -> list:
    missing = [n for n in names if n not in c]
    if missing:
        raise NotApplicable(f"the HF function takes no {', '.join(missing)}")
    return [c[n] for n in names]


ROPE_CANDIDATES: dict[str, tuple[str, Callable[[dict], Any]]] = {
    "standard": ("standard", lambda c: standard_rope(*_args(c, "q", "k", "cos", "sin"), c.get("unsqueeze_dim", 1))),
    "half_width_cos": (
        "gpt_oss",
        lambda c: half_width_rope(*_args(c, "q", "k", "cos", "sin"), c.get("unsqueeze_dim", 1)),
    ),
    "llama4_complex": ("llama4", lambda c: llama4_rope(*_args(c, "q", "k", "freqs_cis"))),
    "qwen2vl_mrope": (
        "mrope",
        lambda c: mrope(*_args(c, "q", "k", "cos", "sin", "mrope_section"), c.get("unsqueeze_dim", 1)),
    ),
    "partial_rotary": (
        "standard",
        lambda c: partial_rope(*_args(c, "q", "k", "cos", "sin"), c.get("unsqueeze_dim", 1)),
    ),
    "interleaved": ("none", lambda c: interleaved_rope(*_args(c, "q", "k", "cos", "sin"), c.get("unsqueeze_dim", 1))),
}
_CANONICAL = {"cos": "cos", "sin": "sin", "freqs_cis": "freqs_cis", "freqs_ci": "freqs_cis"}
_CANONICAL |= {"unsqueeze_dim": "unsqueeze_dim", "mrope_section": "mrope_section"}


def canonical_arguments(names: Sequence[str], args: tuple, kwargs: dict) -> dict:
    """The HF call's arguments under the candidates' names: the first two are the query and the key."""
    named = dict(zip(names, args, strict=False)) | kwargs
    out = {}
    for position, (name, value) in enumerate(named.items()):
        if position < 2 and names and name in names[:2] and name not in _CANONICAL:
            out["q" if name == names[0] else "k"] = value
        elif name in _CANONICAL:
            out[_CANONICAL[name]] = value
    return out


def probe_rope(fn: Callable, names: Sequence[str], args: tuple, kwargs: dict) -> ProbeResult:
    """Run the HF rotary function on the arguments its own attention passed it, in fp32 and bf16."""

    def cast(value, dtype):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.detach().to(dtype)
        return value

    def inputs(dtype):
        a = tuple(cast(v, dtype) for v in args)
        kw = {k: cast(v, dtype) for k, v in kwargs.items()}
        return a, kw, canonical_arguments(names, a, kw)

    cands = [
        Candidate(name, value, lambda dtype, a, kw, c, run=run: run(c))
        for name, (value, run) in ROPE_CANDIDATES.items()
    ]
    return compare(lambda dtype, a, kw, c: fn(*a, **kw), cands, inputs)


# -- the tiny model the probes run on ------------------------------------------------------------------------

# Small sizes for every config field that exists; fields a config lacks are left alone.
TINY_CONFIG = {
    # the hidden size under its own name where attribute_map makes hidden_size an alias of it: a __post_init__ that
    # copies it into a sub-config runs before aliases apply (DbrxConfig(hidden_size=64).ffn_config.hidden_size is
    # the default 2048; with d_model=64 it is 64). First, so hidden_size is then skipped as its alias.
    "d_model": 64,
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,  # = heads: MLA-style attentions (DeepSeek) assume no grouping
    "head_dim": 16,
    "num_hidden_layers": 4,
    "vocab_size": 128,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,  # Dots1's default None builds no model; its checkpoints have shared experts
    "rotary_dim": 8,  # CodeGen / GPT-J: a partial rotary width within the tiny head_dim
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    "max_position_embeddings": 256,
    "kv_lora_rank": 16,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 16,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    "sliding_window": 64,
    "pad_token_id": 0,
    # training runs without a KV cache; a tiny hybrid whose layers are all Mamba / linear attention (Jamba, Bamba,
    # Kimi-Linear) has no attention layer for the cache to measure and fails a cached forward
    "use_cache": False,
    # the rest keep a tiny model tiny where a family adds its own wide parts
    "vocab_size_per_layer_input": 128,  # Gemma 3n/4 per-layer embeddings
    "hidden_size_per_layer_input": 16,
    "mamba_d_ssm": 64,  # Falcon-H1 Mamba mixers
    "mamba_n_heads": 8,
    "mamba_d_state": 16,
    "mamba_chunk_size": 16,
    "linear_key_head_dim": 16,  # Gated DeltaNet (Qwen3-Next, Qwen3.5)
    "linear_value_head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "o_lora_rank": 32,  # DeepSeek-V4
    "index_head_dim": 16,
    "num_heads": 8,  # Mamba-2's SSM heads: hidden_size * expand == num_heads * head_dim (64 * 2 == 8 * 16)
    "decoder_attention_heads": 4,  # Whisper / TrOCR decoders: heads must divide the tiny d_model (hidden_size)
    "encoder_attention_heads": 4,
}
# Fields a config class does not declare but its modeling code reads, so real checkpoints' config.json carries them
# (v5's DbrxAttentionConfig dropped rope_theta; DbrxAttention still reads attn_config.rope_theta): the value every
# tiny config of that class gets, on the config or on the sub-config the error names.
CHECKPOINT_FIELDS = {"rope_theta": 10000.0, "pad_token_id": 0, "rms_norm_eps": 1e-6, "layer_norm_eps": 1e-5}
# Fields whose default (None) builds no model, which real checkpoints set: given when the tiny model fails to build
# or run and the class defaults them to None (DBRX's clip_qkv, LFM2-MoE's layer_types, Qwen4-Exp's indexer).
CHECKPOINT_NONE_FIELDS: dict[str, Any] = {
    "clip_qkv": 8.0,
    "layer_types": lambda config: ["full_attention"] * int(config.num_hidden_layers),  # the v5 configs' default
    "indexer_n_heads": 4,
    "indexer_kv_heads": 1,
    "indexer_head_dim": 16,
    "indexer_budget": 8,
    "indexer_compress_ratio": 4,
}
_MISSING_FIELD = re.compile(r"'(\w+)' object has no attribute '(\w+)'")
# Such fields per config class (found by TinyModel.build), passed with the tiny config and every generated test's.
_REPAIRS: dict[type, dict[str, Any]] = {}
# Fields that choose which layers are MoE: the structure probe keeps their defaults.
STRUCTURE_FIELDS = ("num_hidden_layers", "first_k_dense_replace")


# What sizes the model (the tiny model stays tiny only with these): never dropped to satisfy a validator.
SIZE_FIELDS = (
    "d_model",
    "hidden_size",
    "intermediate_size",
    "moe_intermediate_size",
    "vocab_size",
    "max_position_embeddings",
)
# Fields of a config class that its tiny model could not be built or run with (found by TinyModel.build): its
# default stands for them, here and in every later tiny config of that class (verify's CPU numerics included).
_UNBUILDABLE: dict[type, tuple[str, ...]] = {}


def _settable(config_class, name: str) -> bool:
    """Falcon's `head_dim` is a read-only property computed from the other fields: it cannot be passed in."""
    attr = getattr(config_class, name, None)
    return not (isinstance(attr, property) and attr.fset is None)


def checkpoint_field(config_class, error: Exception) -> dict[str, Any] | None:
    """The kwargs that give the config (or its sub-config) a CHECKPOINT_FIELDS field the error says it lacks."""
    found = _MISSING_FIELD.search(str(error)) if isinstance(error, AttributeError) else None
    if found is None or found[2] not in CHECKPOINT_FIELDS:
        return None
    owner, name = found[1], found[2]
    value = CHECKPOINT_FIELDS[name]
    if owner == config_class.__name__:
        return {name: value}
    for key, sub in (getattr(config_class, "sub_configs", None) or {}).items():
        if getattr(sub, "__name__", None) == owner:
            return {key: {name: value}}
    return None


def none_fields(config_class) -> dict[str, Any]:
    """CHECKPOINT_NONE_FIELDS values for the fields this class (or a sub-config of it) defaults to None."""
    config = config_class(**tiny_config_kwargs(config_class))
    found: dict[str, Any] = {}
    owners = [("", config)] + [(k, getattr(config, k, None)) for k in getattr(config_class, "sub_configs", None) or {}]
    for key, owner in owners:
        values = {
            name: value  # a callable (layer_types) is evaluated against each config's own sizes by `repairs`
            for name, value in CHECKPOINT_NONE_FIELDS.items()
            if owner is not None and has_field(owner, name) and getattr(owner, name) is None
        }
        if values:
            found |= {key: values} if key else values
    return found


def layer_rope_parameters(config_class, error: Exception) -> dict[str, Any] | None:
    """Per-layer-type RoPE parameters where the model reads `rope_parameters[layer_type]` and the class's default
    keys them otherwise (Cohere Compass: `KeyError: 'full_attention'`), as Gemma 3's configs key them."""
    config = config_class(**tiny_config_kwargs(config_class))
    layer_types = list(dict.fromkeys(getattr(config, "layer_types", None) or []))
    if not (isinstance(error, KeyError) and error.args and error.args[0] in layer_types):
        return None
    if not has_field(config, "rope_parameters"):
        return None
    return {"rope_parameters": {t: {"rope_type": "default", "rope_theta": 10000.0} for t in layer_types}}


def repairs(config_class, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """The checkpoint fields this config class's tiny model needed (empty until TinyModel.build found one), for a
    config of `fields`: a per-layer value (layer_types) gets as many entries as that config has layers."""
    found = _REPAIRS.get(config_class, {})
    if not found:
        return {}
    default = config_class()
    sizes = SimpleNamespace(**{"num_hidden_layers": getattr(default, "num_hidden_layers", 0)} | (fields or {}))

    def value(v):
        if callable(v):
            return v(sizes)
        return {k: value(x) for k, x in v.items()} if isinstance(v, dict) else copy.deepcopy(v)

    return {k: value(v) for k, v in found.items()}


def _add_repair(config_class, fields: dict[str, Any]) -> bool:
    """Record `fields` for the class; False when they were recorded already (the repair did not help)."""
    known = _REPAIRS.setdefault(config_class, {})
    changed = False
    for key, value in fields.items():
        if isinstance(value, dict) and isinstance(known.get(key), dict):
            changed |= any(known[key].get(k) != v for k, v in value.items())
            known[key] = known[key] | value
        elif known.get(key) != value:
            known[key], changed = value, True
    return changed


def _aliased(config_class, name: str, chosen: dict) -> bool:
    """Whether `name` is the same config field as one already chosen, under the class's attribute_map (GPT-Neo maps
    num_attention_heads to num_heads: the first in TINY_CONFIG wins, not the last)."""
    aliases = getattr(config_class, "attribute_map", None) or {}
    return aliases.get(name, name) in {aliases.get(k, k) for k in chosen}


def _constructs(config_class, kwargs: dict) -> Exception | None:
    try:
        config_class(**kwargs)
    except Exception as exc:  # strict validators (GPT-Neo's layer pattern, Mamba-2's head arithmetic, ZAYA's top-1)
        return exc
    return None


def tiny_config_kwargs(config_class, keep_defaults: tuple[str, ...] = ()) -> dict[str, Any]:
    """The TINY_CONFIG fields this config class has and accepts: what shrinks its model to a CPU-sized one.

    A field the class's own validator refuses at the tiny size keeps its default (tried one at a time, the
    size fields never), so a strict config still gets the smallest model it allows."""
    default = config_class()
    skip = set(keep_defaults) | set(_UNBUILDABLE.get(config_class, ()))
    kwargs: dict[str, Any] = {}
    for k, v in TINY_CONFIG.items():
        if (
            has_field(default, k)
            and k not in skip
            and _settable(config_class, k)
            and not _aliased(config_class, k, kwargs)
        ):
            kwargs[k] = v

    def repaired(chosen: dict) -> dict:
        return chosen | repairs(config_class, chosen)

    if _constructs(config_class, repaired(kwargs)) is None:
        return repaired(kwargs)
    for key in [k for k in kwargs if k not in SIZE_FIELDS]:
        fewer = {k: v for k, v in kwargs.items() if k != key}
        if _constructs(config_class, repaired(fewer)) is None:
            return repaired(fewer)
    return repaired(kwargs)  # nothing single helps: the validator's own message reaches the caller


def tiny_config(config_class, keep_defaults: tuple[str, ...] = ()):
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # tiny vocabularies trip harmless token-id warnings
    try:
        config = config_class(**tiny_config_kwargs(config_class, keep_defaults))
    finally:
        hf_logging.set_verbosity(verbosity)
    config._attn_implementation = "eager"
    return config


@dataclass
class TinyModel:
    """The base model built tiny on the CPU (probes) and at default size on the meta device (structure)."""

    module: Any  # the imported modeling module
    config: Any
    config_class: Any
    model: torch.nn.Module

    @classmethod
    def build(cls, module, config_class, facts) -> TinyModel:
        """The tiny base model, built and run once; a field it cannot be built or run with at the tiny size keeps
        its default (Zamba's shared-layer pattern, GPT-J's rotary_dim). None that works: UnbuildableModel."""
        base_class = getattr(module, facts.base_class)
        built, error = cls._try(module, config_class, base_class)
        for find in (checkpoint_field, lambda c, e: none_fields(c), layer_rope_parameters, checkpoint_field):
            while not built and (missing := find(config_class, error)) and _add_repair(config_class, missing):
                built, error = cls._try(module, config_class, base_class)
        if built:
            return built
        tried = tiny_config_kwargs(config_class)
        for key in [k for k in tried if k not in SIZE_FIELDS]:
            _UNBUILDABLE[config_class] = (*_UNBUILDABLE.get(config_class, ()), key)
            built, _ = cls._try(module, config_class, base_class)
            if built:
                return built
            _UNBUILDABLE[config_class] = _UNBUILDABLE[config_class][:-1]
        raise UnbuildableModel(config_class, base_class, error)

    @classmethod
    def _try(cls, module, config_class, base_class) -> tuple[TinyModel | None, Exception | None]:
        try:
            config = tiny_config(config_class)
            torch.manual_seed(SEED)
            built = cls(module, config, config_class, base_class(config).eval())
            with torch.no_grad():
                built.run_forward()
        except Exception as exc:  # the model's own code refused this config: try the next, report the first
            return None, exc
        return built, None

    @property
    def num_experts(self) -> int:
        for name in ("num_experts", "num_local_experts", "n_routed_experts"):
            if getattr(self.config, name, None):
                return int(getattr(self.config, name))
        return 1

    @property
    def top_k(self) -> int:
        return int(getattr(self.config, "num_experts_per_tok", 1) or 1)

    def layers(self, facts) -> list[torch.nn.Module]:
        return list(getattr(self.model, facts.layers_attr))

    def _first(self, class_names) -> torch.nn.Module | None:
        for module in self.model.modules():
            if type(module).__name__ in class_names:
                return module
        return None

    def norm_modules(self, facts) -> dict[str, torch.nn.Module]:
        """One instance per norm class: decoder norms first, then the final norm, then attention norms."""
        found: dict[str, torch.nn.Module] = {}
        layer = self.layers(facts)[0]
        attn = getattr(layer, facts.attn_attr, None) if facts.attn_attr else None
        owners = [(layer, facts.decoder_norms), (self.model, facts.final_norms), (attn, facts.attn_norms)]
        for owner, attrs in owners:
            for attr in attrs:
                module = getattr(owner, attr, None) if owner is not None else None
                if isinstance(module, torch.nn.Module):
                    found.setdefault(type(module).__name__, module)
        return found

    @staticmethod
    def hidden_size_of(module) -> int:
        weight = getattr(module, "weight", None)
        if isinstance(weight, torch.Tensor):
            return int(weight.shape[-1])
        shape = getattr(module, "normalized_shape", None)
        return int(shape[-1]) if shape else 64

    def norm_groups(self, facts) -> dict[str, list[torch.nn.Module]]:
        """Norm instances by attribute over all layers: `input_layernorm`, `final.norm`, `self_attn.q_norm`."""
        layers = self.layers(facts)
        attns = [getattr(layer, facts.attn_attr, None) for layer in layers] if facts.attn_attr else []
        owners = [("", layers, facts.decoder_norms), ("final.", [self.model], facts.final_norms)]
        owners.append((f"{facts.attn_attr}.", [a for a in attns if a is not None], facts.attn_norms))
        groups: dict[str, list[torch.nn.Module]] = {}
        for prefix, modules, attrs in owners:
            for attr in attrs:
                found = [getattr(m, attr) for m in modules if isinstance(getattr(m, attr, None), torch.nn.Module)]
                if found:
                    groups[prefix + attr] = found
        # the class swap reaches every instance of these classes, also those no attribute above names (A.X-K1's
        # `mlp.post_mlp_layernorm`, the MoE block's output, which the decoder layer adds to its residual)
        classes = {type(m) for found in groups.values() for m in found}
        named = {id(m) for found in groups.values() for m in found}
        for path, module in self.model.named_modules():
            if type(module) in classes and id(module) not in named:
                key = "other." + ".".join(p for p in path.split(".") if not p.isdigit())
                groups.setdefault(key, []).append(module)
        return groups

    def run_forward(self) -> torch.Tensor:
        """The base model's last hidden state for a fixed batch of random token ids (with autograd on)."""
        input_ids = torch.randint(0, int(self.config.vocab_size), (2, 8), generator=torch.Generator().manual_seed(SEED))
        return self.model(input_ids=input_ids, use_cache=False)[0]

    def dense_mlp(self, facts) -> torch.nn.Module | None:
        return self._first(set(facts.mlp_classes)) if facts.mlp_classes else None

    def experts(self, facts) -> torch.nn.Module | None:
        return self._first({facts.experts_class}) if facts.experts_class else None

    def layer_kinds(self, facts) -> list[str]:
        """Per layer, with the default config's layer count and MoE placement (on the meta device): moe/dense."""
        if not facts.mlp_attr:
            return []
        config = tiny_config(self.config_class, keep_defaults=STRUCTURE_FIELDS)
        with torch.device("meta"):
            layers = getattr(getattr(self.module, facts.base_class)(config), facts.layers_attr)
        kinds = []
        for layer in layers:
            mlp = getattr(layer, facts.mlp_attr, None)
            kinds.append("moe" if type(mlp).__name__ in facts.moe_classes else "dense")
        return kinds

    def capture_rotary(self, facts):
        """The (function, args, kwargs) of the first call the model's own attention makes to its rotary fn."""
        original = getattr(self.module, facts.rotary_fn)
        calls: list[tuple[tuple, dict]] = []

        def record(*args, **kwargs):
            calls.append((args, kwargs))
            return original(*args, **kwargs)

        setattr(self.module, facts.rotary_fn, record)
        try:
            torch.manual_seed(SEED)
            input_ids = torch.randint(0, int(self.config.vocab_size), (1, 6))
            with torch.no_grad():
                self.model(input_ids=input_ids, use_cache=False)
        finally:
            setattr(self.module, facts.rotary_fn, original)
        if not calls:
            return None
        args, kwargs = calls[0]
        return original, args, kwargs
