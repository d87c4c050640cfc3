"""PyTorch references of exactly the Liger kernels a generated patch swaps in, for the whole-model gate on a CPU host.

Triton's interpreter runs some of Liger's kernels on the CPU (RoPE, the cross entropies: the "CPU numerics" gate runs
them there, on a tiny model) but too slowly for a whole model trained several steps, and others not at all (RMSNorm,
SwiGLU, GeGLU, LayerNorm, ReLU^2, the fused MoE). Each row below names a Liger autograd Function and a reference
with that kernel's semantics: the same casting mode, offset and in-place rule, differentiated by autograd. `install` swaps a Function's `apply` for its reference's, so every Liger module that calls the Function
(however it imported it) runs the reference; the gate says which kernels ran as Triton and which as reference.
On a GPU host nothing is swapped: the real kernels run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps: float, offset: float, casting_mode: str):
    """Liger's `_rms_norm_forward_kernel`: llama casts x*rstd back before the weight, gemma stays fp32 to the end."""
    dtype = x.dtype
    if casting_mode == "none":
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return x * rstd * (offset + weight) if weight is not None else x * rstd
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if casting_mode == "llama":
        normed = (xf * rstd).to(dtype)
        return normed * (offset + weight) if weight is not None else normed
    normed = xf * rstd
    out = normed * (offset + weight.float()) if weight is not None else normed
    return out.to(dtype)


def layer_norm(x, weight, bias, eps: float):
    """Liger's LayerNorm: statistics in fp32, the output in the input's dtype."""
    w = weight.float() if weight is not None else None
    b = bias.float() if bias is not None else None
    return F.layer_norm(x.float(), (x.shape[-1],), w, b, eps).to(x.dtype)


def silu_mul(a, b, gate_multiplier: float = 1.0, down_multiplier: float = 1.0):
    """`_swiglu_forward_kernel`: silu in fp32, cast to b's dtype, times b."""
    c = F.silu(a.float() * float(gate_multiplier)).to(b.dtype) * b
    return c * float(down_multiplier) if float(down_multiplier) != 1.0 else c


def gelu_tanh_mul(a, b):
    return F.gelu(a.float(), approximate="tanh").to(b.dtype) * b


def relu_squared(x):
    return torch.relu(x).square()


def fused_moe(x, gate_up_proj, down_proj, top_k_index, top_k_weights):
    """`LigerFusedMoEFunction`: per token, sum over its k experts of w * down(silu(gate x) * up x)."""
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    index = top_k_index.long()
    for expert in range(gate_up_proj.shape[0]):
        token, slot = torch.nonzero(index == expert, as_tuple=True)
        if token.numel() == 0:
            continue
        gate, up = F.linear(x[token], gate_up_proj[expert]).chunk(2, dim=-1)
        y = F.linear(silu_mul(gate, up), down_proj[expert]) * top_k_weights[token, slot, None]
        out = out.index_add(0, token, y.float())
    return out.to(x.dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope(q, k, cos, sin, position_ids=None, unsqueeze_dim=1, rotary_dim=None):
    """`LigerRopeFunction` (HF's rotate_half form; partial rotary over the first `rotary_dim` entries of a head)."""
    cos, sin = (_rope_table(t, unsqueeze_dim) for t in (cos, sin))
    rotated = rotary_dim or cos.shape[-1]
    half = rotated // 2  # Liger reads only the first half of cos/sin (HF's tables repeat it) and uses it twice
    cos, sin = (torch.cat((t[..., :half], t[..., :half]), dim=-1) for t in (cos, sin))
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)

    def one(x):
        head, rest = x[..., :rotated], x[..., rotated:]
        return torch.cat((head * cos + rotate_half(head) * sin, rest), dim=-1).to(x.dtype)

    return one(q), one(k)


def _rope_table(table, unsqueeze_dim: int):
    if table.ndim == 4:
        table = table.squeeze(unsqueeze_dim) if table.shape[unsqueeze_dim] == 1 else table.squeeze(1)
    return table.unsqueeze(0) if table.ndim == 2 else table


def cross_entropy_outputs(
    logits,
    target,
    ce_weight=None,
    ignore_index=-100,
    lse_square_scale=0.0,
    label_smoothing=0.0,
    reduction="mean",
    softcap=None,
    return_z_loss=False,
    return_token_accuracy=False,
    return_predicted_tokens=False,
):
    """Liger's cross entropy outputs (loss, z_loss, token_accuracy, predicted_tokens), computed in fp32."""
    logits = logits.float()
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    loss = F.cross_entropy(
        logits,
        target,
        weight=ce_weight,
        ignore_index=ignore_index,
        label_smoothing=label_smoothing,
        reduction=reduction,
    )
    valid = target != ignore_index
    z_tokens = lse_square_scale * torch.logsumexp(logits, dim=-1).pow(2) * valid
    z_loss = z_tokens if reduction == "none" else z_tokens.sum() / (valid.sum() if reduction == "mean" else 1)
    loss = loss + z_loss if lse_square_scale else loss
    predicted = logits.argmax(dim=-1)
    accuracy = ((predicted == target) & valid).sum() / valid.sum().clamp(min=1)
    return (
        loss,
        z_loss if return_z_loss else None,
        accuracy.detach() if return_token_accuracy else None,
        predicted.detach() if return_predicted_tokens else None,
    )


def cross_entropy(_input, target, *options):
    """`LigerCrossEntropyFunction.apply(input, target, weight, ignore_index, ...)`: the options in its order."""
    return cross_entropy_outputs(_input, target, *options)


# `LigerFusedLinearCrossEntropyFunction.apply`'s options after (input, weight, target, bias), in its order
FLCE_OPTIONS = (
    "ce_weight",
    "ignore_index",
    "lse_square_scale",
    "label_smoothing",
    "reduction",
    "softcap",
    "return_z_loss",
    "accum_dtype",
    "use_token_scaling",
    "return_token_accuracy",
    "return_predicted_tokens",
)


def fused_linear_cross_entropy(_input, weight, target, bias=None, *options):
    """The fused kernel's loss with the logits materialized (the reference may; the kernel does not)."""
    given = dict(zip(FLCE_OPTIONS, options, strict=False))  # the backend choice and chunk size come after: unused
    if given.pop("use_token_scaling", False):
        raise NotImplementedError("the reference has no use_token_scaling")
    given.pop("accum_dtype", None)
    return cross_entropy_outputs(F.linear(_input, weight, bias), target, *given.values())


class _Reference(torch.autograd.Function):
    """Forward through a differentiable reference; backward by autograd. With `in_place`, dX is written into dY's
    storage when dY can take it (contiguous, same dtype), as Liger's in-place backward does (its
    `ensure_contiguous` copies a non-contiguous dY first, which makes the write harmless)."""

    @staticmethod
    def forward(ctx, fn, in_place, *args):
        inputs = [a.detach().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]
        with torch.enable_grad():
            out = fn(*inputs)
        outputs = out if isinstance(out, tuple) else (out,)
        ctx.inner, ctx.in_place, ctx.single = (inputs, outputs), in_place, not isinstance(out, tuple)
        detached = tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in outputs)
        return detached[0] if ctx.single else detached

    @staticmethod
    def backward(ctx, *grad_outputs):
        inputs, outputs = ctx.inner
        pairs = [(o, g) for o, g in zip(outputs, grad_outputs, strict=True) if _differentiable(o) and g is not None]
        wanted = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
        grads = torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True)
        found = iter(grads if pairs else [None] * len(wanted))
        result = [next(found) if isinstance(t, torch.Tensor) and t.requires_grad else None for t in inputs]
        dy, dx = grad_outputs[0], result[0]
        if ctx.in_place and dx is not None and dy is not None and dy.is_contiguous() and dy.dtype == dx.dtype:
            result[0] = dy.copy_(dx)  # the aliasing Liger's kernel does: dY's storage now holds dX
        return (None, None, *result)


def _differentiable(value) -> bool:
    return isinstance(value, torch.Tensor) and value.requires_grad


def _rms_norm_apply(X, W, eps, offset=0.0, casting_mode="llama", in_place=True, row_mode=None):
    return _Reference.apply(lambda x, w: rms_norm(x, w, eps, offset, casting_mode), bool(in_place), X, W)


def _plain(fn: Callable) -> Callable:
    def apply(*args):
        return _Reference.apply(fn, False, *args)

    return apply


@dataclass(frozen=True)
class ReferenceKernel:
    name: str  # the kernel flag's name in an apply function (rms_norm, swiglu, ...)
    function: str  # the Liger autograd Function in liger_kernel.ops
    apply: Callable


# One row per Liger kernel a generated patch can swap in.
REFERENCES: tuple[ReferenceKernel, ...] = (
    ReferenceKernel("rms_norm", "LigerRMSNormFunction", _rms_norm_apply),
    ReferenceKernel("layer_norm", "LigerLayerNormFunction", _plain(layer_norm)),
    ReferenceKernel("swiglu", "LigerSiLUMulFunction", _plain(silu_mul)),
    ReferenceKernel("swiglu (fused MoE experts)", "LigerFusedMoEFunction", _plain(fused_moe)),
    ReferenceKernel("geglu", "LigerGELUMulFunction", _plain(gelu_tanh_mul)),
    ReferenceKernel("relu_squared", "LigerReLUSquaredFunction", _plain(relu_squared)),
    ReferenceKernel("rope", "LigerRopeFunction", _plain(rope)),
    ReferenceKernel("cross_entropy", "LigerCrossEntropyFunction", _plain(cross_entropy)),
    ReferenceKernel(
        "fused_linear_cross_entropy", "LigerFusedLinearCrossEntropyFunction", _plain(fused_linear_cross_entropy)
    ),
)


@dataclass
class Installed:
    """Which kernels a run called, and whether as Triton or as their reference."""

    use_references: bool
    calls: dict[str, int] = field(default_factory=dict)

    @property
    def triton(self) -> list[str]:
        return [] if self.use_references else sorted(self.calls)

    @property
    def reference(self) -> list[str]:
        return sorted(self.calls) if self.use_references else []


def install(use_references: bool) -> Installed:
    """Swap each kernel's Function for its reference (a CPU host), counting the calls either way."""
    ops = importlib.import_module("liger_kernel.ops")
    installed = Installed(use_references)
    for row in REFERENCES:
        function = getattr(ops, row.function, None)
        if function is not None:
            function.apply = _counted(row.name, row.apply if use_references else function.apply, installed.calls)
    return installed


def _counted(name: str, apply: Callable, calls: dict[str, int]) -> Callable:
    def counted(*args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        return apply(*args, **kwargs)

    return counted
