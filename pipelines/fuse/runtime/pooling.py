"""Partitioned mean pooling as custom ops torch.compile traces (ops -> autograd -> functional, Liger-style).

`liger_fuse::partitioned_mean(values [N, D], offsets [B+1]) -> [B, D]` and the grouped form
`liger_fuse::grouped_partitioned_mean(values[], offsets[]) -> out[]`, each one Triton launch forward and one
backward (plus the zero-fill of the fp32 output that tiles of a long partition add into). The Triton module is
imported on first use, so a CPU process can set TRITON_INTERPRET=1 before then.
"""

from __future__ import annotations

import os

import torch

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16)


def interpreter_active() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def can_run_on(device: torch.device) -> bool:
    """Triton runs on CUDA, or on the CPU through its interpreter."""
    return device.type == "cuda" or (device.type == "cpu" and interpreter_active())


def _kernels():
    from pipelines.fuse.runtime import pooling_kernels

    return pooling_kernels


def launch_config(total_rows: int, width: int, device: torch.device, dtype: torch.dtype = torch.float32) -> dict:
    """Tile sizes: enough virtual tiles to fill the GPU; the interpreter prefers few, large programs."""
    block_d = min(256, triton_next_power_of_2(max(width, 1)))
    if device.type != "cuda":
        return {"R": max(4, triton_next_power_of_2(max(total_rows // 4, 1))), "BLOCK_N": 4, "BLOCK_D": block_d}
    # H200 sweep (benchmarks/NOTES.md, fuse / pooling): best summed over uniform, skewed and single lengths
    if dtype == torch.bfloat16:
        return {"R": 128, "BLOCK_N": 8, "BLOCK_D": min(block_d, 128), "num_warps": 2, "num_stages": 3}
    return {"R": 128, "BLOCK_N": 32, "BLOCK_D": block_d, "num_warps": 4, "num_stages": 3}


def triton_next_power_of_2(n: int) -> int:
    return 1 << (int(n) - 1).bit_length() if n > 1 else 1


def _log_b(partitions: int) -> int:
    return max(1, int(partitions).bit_length())


def _check(values: torch.Tensor, offsets: torch.Tensor) -> None:
    torch._check(values.dim() == 2, lambda: f"values must be [N, D], got {tuple(values.shape)}")
    torch._check(offsets.dim() == 1 and offsets.shape[0] >= 2, lambda: "offsets must be [B+1] with B >= 1")
    torch._check(values.dtype in SUPPORTED_DTYPES, lambda: f"values dtype {values.dtype} is not fp32/bf16")


def partitioned_mean_forward(values: torch.Tensor, offsets: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    _check(values, offsets)
    values = values.contiguous()
    offsets = offsets.to(torch.int64).contiguous()
    n, d = values.shape
    b = offsets.shape[0] - 1
    cfg = config or launch_config(n, d, values.device, values.dtype)
    out = torch.zeros(b, d, dtype=torch.float32, device=values.device)
    grid = (b + n // cfg["R"], -(-d // cfg["BLOCK_D"]))
    _kernels().partitioned_mean_fwd_kernel[grid](values, offsets, out, b, d, LOG_B=_log_b(b), **cfg)
    return out if values.dtype == torch.float32 else out.to(values.dtype)


def partitioned_mean_backward(grad_out: torch.Tensor, offsets: torch.Tensor, rows: int, config: dict | None = None):
    grad_out = grad_out.contiguous()
    offsets = offsets.to(torch.int64).contiguous()
    b, d = grad_out.shape
    cfg = config or launch_config(rows, d, grad_out.device, grad_out.dtype)
    grad_values = torch.empty(rows, d, dtype=grad_out.dtype, device=grad_out.device)
    grid = (b + rows // cfg["R"], -(-d // cfg["BLOCK_D"]))
    _kernels().partitioned_mean_bwd_kernel[grid](grad_out, offsets, grad_values, b, rows, d, LOG_B=_log_b(b), **cfg)
    return grad_values


def _tables(tensors: list[torch.Tensor], device) -> torch.Tensor:
    return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64, device=device)


def _grouped_plan(rows: list[int], widths: list[int], partitions: list[int], device):
    cfg = launch_config(max(rows), max(widths), device)
    tiles = [b + n // cfg["R"] for b, n in zip(partitions, rows, strict=False)]
    tile_base = [0]
    for count in tiles:
        tile_base.append(tile_base[-1] + count)
    shapes = [v for triple in zip(partitions, rows, widths, strict=False) for v in triple]
    return cfg, tile_base, torch.tensor(shapes, dtype=torch.int64, device=device)


def grouped_partitioned_mean_forward(values: list[torch.Tensor], offsets: list[torch.Tensor]) -> list[torch.Tensor]:
    torch._check(len(values) == len(offsets) and len(values) > 0, lambda: "one offsets tensor per feature")
    dtype = values[0].dtype
    for v, o in zip(values, offsets, strict=False):
        _check(v, o)
        torch._check(v.dtype == dtype, lambda: "every feature of one group shares a dtype")
    device = values[0].device
    values = [v.contiguous() for v in values]
    offsets = [o.to(torch.int64).contiguous() for o in offsets]
    rows = [v.shape[0] for v in values]
    widths = [v.shape[1] for v in values]
    partitions = [o.shape[0] - 1 for o in offsets]
    cfg, tile_base, shapes = _grouped_plan(rows, widths, partitions, device)
    # separate buffers: a custom op's outputs must not alias each other
    outs = [torch.zeros(b, d, dtype=torch.float32, device=device) for b, d in zip(partitions, widths, strict=False)]
    grid = (tile_base[-1], -(-max(widths) // cfg["BLOCK_D"]))
    kernels = _kernels()
    kernels.grouped_partitioned_mean_fwd_kernel[grid](
        _tables(values, device),
        _tables(offsets, device),
        _tables(outs, device),
        shapes,
        torch.tensor(tile_base, dtype=torch.int64, device=device),
        F=len(values),
        ELEM=_triton_dtype(dtype),
        LOG_B=_log_b(max(partitions)),
        **cfg,
    )
    return outs if dtype == torch.float32 else [o.to(dtype) for o in outs]


def grouped_partitioned_mean_backward(grads: list[torch.Tensor], offsets: list[torch.Tensor], rows: list[int]):
    device = grads[0].device
    grads = [g.contiguous() for g in grads]
    offsets = [o.to(torch.int64).contiguous() for o in offsets]
    widths = [g.shape[1] for g in grads]
    partitions = [g.shape[0] for g in grads]
    cfg, tile_base, shapes = _grouped_plan(rows, widths, partitions, device)
    grad_values = [
        torch.empty(n, d, dtype=g.dtype, device=device) for n, d, g in zip(rows, widths, grads, strict=False)
    ]
    grid = (tile_base[-1], -(-max(widths) // cfg["BLOCK_D"]))
    _kernels().grouped_partitioned_mean_bwd_kernel[grid](
        _tables(grads, device),
        _tables(offsets, device),
        _tables(grad_values, device),
        shapes,
        torch.tensor(tile_base, dtype=torch.int64, device=device),
        F=len(grads),
        ELEM=_triton_dtype(grads[0].dtype),
        LOG_B=_log_b(max(partitions)),
        **cfg,
    )
    return grad_values


def _triton_dtype(dtype: torch.dtype):
    import triton.language as tl

    return {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16}[dtype]


# --- custom ops: what torch.compile sees (opaque to Inductor, differentiable through register_autograd) ---


@torch.library.custom_op("liger_fuse::partitioned_mean", mutates_args=())
def partitioned_mean(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return partitioned_mean_forward(values, offsets)


@partitioned_mean.register_fake
def _(values, offsets):
    return values.new_empty(offsets.shape[0] - 1, values.shape[1])


@torch.library.custom_op("liger_fuse::partitioned_mean_backward", mutates_args=())
def partitioned_mean_grad(grad_out: torch.Tensor, offsets: torch.Tensor, rows: int) -> torch.Tensor:
    return partitioned_mean_backward(grad_out, offsets, rows)


@partitioned_mean_grad.register_fake
def _(grad_out, offsets, rows):
    return grad_out.new_empty(rows, grad_out.shape[1])


def _setup_context(ctx, inputs, output):
    values, offsets = inputs
    ctx.save_for_backward(offsets)
    ctx.rows = values.shape[0]


def _backward(ctx, grad_out):
    (offsets,) = ctx.saved_tensors
    return partitioned_mean_grad(grad_out, offsets, ctx.rows), None


partitioned_mean.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op("liger_fuse::grouped_partitioned_mean", mutates_args=())
def grouped_partitioned_mean(values: list[torch.Tensor], offsets: list[torch.Tensor]) -> list[torch.Tensor]:
    return grouped_partitioned_mean_forward(values, offsets)


@grouped_partitioned_mean.register_fake
def _(values, offsets):
    return [v.new_empty(o.shape[0] - 1, v.shape[1]) for v, o in zip(values, offsets, strict=False)]


@torch.library.custom_op("liger_fuse::grouped_partitioned_mean_backward", mutates_args=())
def grouped_partitioned_mean_grad(
    grads: list[torch.Tensor], offsets: list[torch.Tensor], rows: list[int]
) -> list[torch.Tensor]:
    return grouped_partitioned_mean_backward(grads, offsets, rows)


@grouped_partitioned_mean_grad.register_fake
def _(grads, offsets, rows):
    return [g.new_empty(n, g.shape[1]) for g, n in zip(grads, rows, strict=False)]


def _grouped_setup_context(ctx, inputs, output):
    values, offsets = inputs
    ctx.save_for_backward(*offsets)
    ctx.rows = [v.shape[0] for v in values]


def _grouped_backward(ctx, grads):
    offsets = list(ctx.saved_tensors)
    return grouped_partitioned_mean_grad(list(grads), offsets, ctx.rows), [None] * len(offsets)


grouped_partitioned_mean.register_autograd(_grouped_backward, setup_context=_grouped_setup_context)


def partitioned_mean_reference(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """The definition, in plain PyTorch (empty partition -> zeros), accumulated in fp32."""
    bounds = offsets.tolist()
    rows = [values[s:e].float().sum(0) / max(e - s, 1) for s, e in zip(bounds[:-1], bounds[1:], strict=False)]
    return torch.stack(rows).to(values.dtype)
