"""Liger's families: RMSNorm and SwiGLU in HF's eager forms, as pattern / replacement pairs (LIGER_PAIRS).

Spellings: the input cast (`x.to(torch.float32)`, `x.float()` or none), the weight on either side, the output
cast (`.to(input_dtype)` or none) for RMSNorm; the product in either order for SwiGLU.
"""

from __future__ import annotations

import torch
from torch.nn.functional import silu

from .pairs import Pair
from .pairs import spellings

_CASTS_IN = (lambda t, dtype: t.to(dtype), lambda t, dtype: t.float(), lambda t, dtype: t)
_CASTS_OUT = (lambda t, dtype: t.to(dtype), lambda t, dtype: t)


def _rms_norm(cast_in, cast_out, weight_left):
    def rms_norm_pattern(x, weight, eps, dtype_in, dtype_out):
        xf = cast_in(x, dtype_in)
        normed = cast_out(xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps), dtype_out)
        return weight * normed if weight_left else normed * weight

    return rms_norm_pattern


def rms_norm_replacement(x, weight, eps, *, pool):
    return pool(x, weight, eps)


def _rms_norm_check(bindings) -> str | None:
    """eps a float literal (a tensor eps is another form); the input cast, when there is one, to float32."""
    if not isinstance(bindings["eps"], float) or bindings.get("dtype_in", torch.float32) != torch.float32:
        return None
    return ""


def _swiglu(gate_left):
    def swiglu_pattern(gate, up):
        return silu(gate) * up if gate_left else up * silu(gate)

    return swiglu_pattern


def swiglu_replacement(gate, up, *, pool):
    return pool(gate, up)


_BOTH = (True, False)

LIGER_PAIRS = (
    Pair(
        "rms_norm",
        "rms_norm",
        spellings(_rms_norm, cast_in=_CASTS_IN, cast_out=_CASTS_OUT, weight_left=_BOTH),
        rms_norm_replacement,
        _rms_norm_check,
        operand="x",
    ),
    Pair(
        "swiglu",
        "swiglu",
        spellings(_swiglu, gate_left=_BOTH),
        swiglu_replacement,
        operand="gate",
    ),
)
