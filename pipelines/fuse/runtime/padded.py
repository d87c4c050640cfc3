"""Masked mean over a padded [B, L, D] tensor with lengths, as a custom op torch.compile traces (ops -> autograd ->
functional, as pooling.py wires the partitioned mean).

`liger_fuse::padded_masked_mean(x [B, L, D], lengths [B], mode, out_dtype) -> [B, D]`: row b is the sum of
x[b, :clamp(lengths[b], 0, L)] (what the mask `arange(L) < lengths[:, None]` keeps), divided as `mode` says
(padded_kernels.py: 0 not at all, 1 by max(lengths[b], 1), 2 by lengths[b] as given), in fp32, stored as
`out_dtype` (the dtype the user's `(x * mask).sum(1) / counts` has: a float32 mask makes a bf16 product float32).
One launch forward (two where the L axis is split), one backward. The op is defined for any integer lengths (the
mask's clamp), so the pass needs no value check; the eager entry `padded_masked_mean` refuses lengths outside
[0, L] with the reason. Rows past a length are never read: a NaN or Inf stored in the pad does not reach the output,
where `x * mask` would turn it into NaN (the only documented difference).
"""

from __future__ import annotations

import torch

from .pooling import SUPPORTED_DTYPES
from .pooling import _cdiv
from .pooling import triton_next_power_of_2

MODES = {"sum": 0, "clamp": 1, "raw": 2}

STEP_BYTES = 4096  # bytes a forward program loads per step (PARTS x BLOCK_D x UNROLL values), as the short design
MAX_UNROLL = 16  # rows of each batch row a step loads
MAX_PARTS = 64  # batch rows a program, at most
MIN_PROGRAMS = 2048  # fewer batch rows per program, then the L axis split, until the launch has this many (H200)
SPLIT_MIN_ROWS = 128  # a split program sums at least this many rows (else the partials cost more than they save)
BACKWARD_ELEMENTS = 4096  # [ROWS, BLOCK_D] gradient values a backward program writes


def padded_config(batch: int, length: int, width: int, dtype: torch.dtype, device: torch.device) -> dict:
    """The forward launch from the shape alone (the lengths' values are not read): BLOCK_D up to 256 columns, UNROLL
    rows a step (up to L, at most 16), PARTS batch rows filling the rest of STEP_BYTES; on a GPU PARTS halves, then
    the L axis splits into SPLIT chunks of CHUNK rows, until the launch has MIN_PROGRAMS programs."""
    block_d = min(256, triton_next_power_of_2(max(width, 1)))
    step = STEP_BYTES // dtype.itemsize
    unroll = min(MAX_UNROLL, triton_next_power_of_2(max(length, 1)), max(1, step // block_d))
    parts = max(1, min(MAX_PARTS, step // (block_d * unroll), triton_next_power_of_2(max(batch, 1))))
    column_blocks = _cdiv(width, block_d)
    split = 1
    if device.type == "cuda":  # the interpreter prefers few, large programs
        while parts > 1 and _cdiv(batch, parts) * column_blocks < MIN_PROGRAMS:
            parts //= 2
        programs = _cdiv(batch, parts) * column_blocks
        split = max(1, min(_cdiv(MIN_PROGRAMS, programs), length // SPLIT_MIN_ROWS))
    chunk = _cdiv(_cdiv(max(length, 1), split), unroll) * unroll
    config = {"PARTS": parts, "BLOCK_D": block_d, "UNROLL": unroll, "SPLIT": _cdiv(max(length, 1), chunk)}
    config["CHUNK"] = chunk
    if device.type == "cuda":
        config["num_warps"] = max(1, min(8, parts * block_d * unroll // 256))
    return config


def backward_config(rows: int, width: int, device: torch.device) -> dict:
    block_d = min(256, triton_next_power_of_2(max(width, 1)))
    config = {"ROWS": max(1, min(triton_next_power_of_2(max(rows, 1)), BACKWARD_ELEMENTS // block_d))}
    config["BLOCK_D"] = block_d
    if device.type == "cuda":
        config["num_warps"] = 4
    return config


def _kernels():
    from . import padded_kernels

    return padded_kernels


def _check(x: torch.Tensor, lengths: torch.Tensor, mode: int = 1) -> None:
    torch._check(x.dim() == 3, lambda: f"x must be a padded [B, L, D] tensor, got shape {tuple(x.shape)}")
    torch._check(x.dtype in SUPPORTED_DTYPES, lambda: f"x dtype {x.dtype} is not fp32/bf16/fp16")
    torch._check(
        lengths.dim() == 1 and lengths.shape[0] == x.shape[0],
        lambda: f"lengths must be 1-D [B] with B={x.shape[0]} (x's first dim), got shape {tuple(lengths.shape)}",
    )
    torch._check(
        not lengths.dtype.is_floating_point and not lengths.dtype.is_complex and lengths.dtype != torch.bool,
        lambda: f"lengths must be an integer tensor, got {lengths.dtype}",
    )
    torch._check(lengths.device == x.device, lambda: f"lengths on {lengths.device}, x on {x.device}")
    torch._check(mode in MODES.values(), lambda: f"mode must be one of {MODES}, got {mode}")


def check_length_values(lengths: torch.Tensor, length: int) -> None:
    """The eager entry's value check: every length within [0, L] (one host read)."""
    if lengths.numel() == 0 or torch.compiler.is_compiling() or isinstance(lengths, torch._subclasses.FakeTensor):
        return
    low, high = torch.stack([lengths.min(), lengths.max()]).tolist()
    if low < 0 or high > length:
        bad = int(torch.nonzero((lengths < 0) | (lengths > length))[0, 0])
        raise ValueError(f"lengths must lie within [0, L={length}] (x's second dim), got lengths[{bad}]={lengths[bad]}")


def _finish(sums: torch.Tensor, lengths: torch.Tensor, mode: int, out_dtype: torch.dtype) -> torch.Tensor:
    """fp32 sums [B, D] divided as `mode` says, in out_dtype (the split launch's and the empty shapes' last step)."""
    raw = lengths.to(torch.float32)[:, None]
    if mode == MODES["clamp"]:
        sums = sums / raw.clamp(min=1)
    elif mode == MODES["raw"]:
        sums = sums / raw
    return sums.to(out_dtype)


def padded_masked_mean_forward(
    x: torch.Tensor, lengths: torch.Tensor, mode: int = 1, out_dtype: torch.dtype | None = None, config=None
) -> torch.Tensor:
    """One launch (SPLIT > 1: the launch, then the partials' sum and the division); `config` forces a launch."""
    _check(x, lengths, mode)
    out_dtype = out_dtype or x.dtype
    if x.stride(2) != 1:
        x = x.contiguous()
    lengths = lengths.contiguous()
    b, length, d = x.shape
    if b == 0 or length == 0 or d == 0:
        return _finish(x.new_zeros(b, d, dtype=torch.float32), lengths, mode, out_dtype)
    cfg = dict(config or padded_config(b, length, d, x.dtype, x.device))
    split, chunk = cfg.pop("SPLIT"), cfg.pop("CHUNK")
    out = torch.empty(b, d, dtype=out_dtype, device=x.device)
    partial = torch.empty(split, b, d, dtype=torch.float32, device=x.device) if split > 1 else out
    grid = (_cdiv(b, cfg["PARTS"]), _cdiv(d, cfg["BLOCK_D"]), split)
    _kernels().padded_mean_fwd_kernel[grid](
        x, lengths, out, partial, b, length, d, x.stride(0), x.stride(1), chunk, MODE=mode, SPLIT=split > 1, **cfg
    )
    return _finish(partial.sum(0), lengths, mode, out_dtype) if split > 1 else out


def padded_masked_mean_backward(
    grad_out: torch.Tensor, lengths: torch.Tensor, mode: int, length: int, dtype: torch.dtype, config=None
) -> torch.Tensor:
    """grad_x [B, L, D] in `dtype`: grad_out[b] / divisor_b on row b's first clamp(lengths[b], 0, L) rows, zero past."""
    grad_out = grad_out.contiguous()
    lengths = lengths.contiguous()
    b, d = grad_out.shape
    grad_x = torch.empty(b, length, d, dtype=dtype, device=grad_out.device)
    if grad_x.numel() == 0:
        return grad_x
    cfg = dict(config or backward_config(b * length, d, grad_out.device))
    grid = (_cdiv(b * length, cfg["ROWS"]), _cdiv(d, cfg["BLOCK_D"]))
    _kernels().padded_mean_bwd_kernel[grid](grad_out, lengths, grad_x, b, length, d, MODE=mode, **cfg)
    return grad_x


# --- opaque custom ops: what torch.compile sees (fake = shapes only), differentiable via register_autograd ---


@torch.library.custom_op("liger_fuse::padded_masked_mean", mutates_args=())
def padded_masked_mean_op(x: torch.Tensor, lengths: torch.Tensor, mode: int, out_dtype: torch.dtype) -> torch.Tensor:
    """What the pass calls: any integer lengths (clamped to [0, L] as the mask does), no host read."""
    return padded_masked_mean_forward(x, lengths, mode, out_dtype)


@padded_masked_mean_op.register_fake
def _(x, lengths, mode, out_dtype):
    _check(x, lengths, mode)
    return x.new_empty(x.shape[0], x.shape[2], dtype=out_dtype)


@torch.library.custom_op("liger_fuse::padded_masked_mean_backward", mutates_args=())
def padded_masked_mean_grad(
    grad_out: torch.Tensor, lengths: torch.Tensor, mode: int, length: int, dtype: torch.dtype
) -> torch.Tensor:
    return padded_masked_mean_backward(grad_out, lengths, mode, length, dtype)


@padded_masked_mean_grad.register_fake
def _(grad_out, lengths, mode, length, dtype):
    return grad_out.new_empty(grad_out.shape[0], length, grad_out.shape[1], dtype=dtype)


def _setup_context(ctx, inputs, output):
    x, lengths, mode, _ = inputs
    ctx.save_for_backward(lengths)
    ctx.mode, ctx.length, ctx.dtype = mode, x.shape[1], x.dtype


def _backward(ctx, grad_out):
    (lengths,) = ctx.saved_tensors
    return padded_masked_mean_grad(grad_out, lengths, ctx.mode, ctx.length, ctx.dtype), None, None, None


padded_masked_mean_op.register_autograd(_backward, setup_context=_setup_context)


def padded_masked_mean(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The eager entry point: out[b] = mean of x[b, :lengths[b]] (zeros for a length of 0).

    x [B, L, D] fp32 / bf16 / fp16 (accumulated in fp32, returned in its own dtype), lengths [B] integer, each in
    [0, L], on x's device: anything else is refused with the reason. The rows past a length are never read, and get
    a zero gradient."""
    _check(x, lengths)
    check_length_values(lengths, x.shape[1])
    return padded_masked_mean_op(x, lengths, MODES["clamp"], x.dtype)


def padded_masked_mean_reference(x: torch.Tensor, lengths: torch.Tensor, mode: int = 1) -> torch.Tensor:
    """The definition as the user writes it (mask, product, sum, division), in x's dtype."""
    mask = torch.arange(x.shape[1], device=x.device)[None, :] < lengths[:, None]
    sums = (x * mask[..., None]).sum(1)
    if mode == MODES["clamp"]:
        return sums / lengths.clamp(min=1)[:, None]
    return sums / lengths[:, None] if mode == MODES["raw"] else sums
