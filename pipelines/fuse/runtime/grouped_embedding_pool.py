"""Grouped fused gather + mean pool: K features, each its own table, ids and offsets, in one launch each way.

`grouped_embedding_partitioned_mean(tables [V_f, D_f], ids [N_f], offsets [B+1]) -> [B, sum D_f]`: column block f
is `embedding_partitioned_mean(tables[f], ids[f], offsets[f])`, what an EmbeddingBagCollection of K
`nn.EmbeddingBag(mode="mean")` (or K `nn.Embedding` + pooling) concatenated along dim 1 computes. One Triton launch
forward, one backward, whatever K: the recsys step on a GPU is host-bound (twelfth session: ~36 us host per op), so
K single ops cost K times the host time of one.

How one launch reaches K tensors: their addresses and sizes are one int64 tensor (`_build_meta`, one host-to-device copy,
pinned and non-blocking on CUDA) that the kernels cast to pointers (grouped_embedding_pool_kernels.py). Features may
differ in V, D and N; they share B (the concatenation needs it) and the table dtype (one launch reads one element
type: the pass declines mixed dtypes). The launch is the single op's bucket (embedding_pool.launch_config) for B,
the mean length over all features and the widest D: one design (span or loop) for the whole group.

Offsets: on the CPU the op checks them on the host, as the single op; on CUDA the kernel checks them while it reads
them (each offset clamped into [0, N_f], so bad offsets read no id outside the feature's; a violation clears a flag
in the meta tensor) and one `torch._assert_async` on that flag raises at the next sync: one launch for all K, no host
read. Ids are range-checked only with `check_ids=True` (a sync), as for the single op.

Backward: the tables' dense gradients as one zeroed fp32 buffer (feature f's [V_f, D_f] at base_f; one memset, one
atomics launch, one cast), split into views. With `torch.use_deterministic_algorithms(True)` each feature takes the
single op's sorted segmented sum instead (K launches, the same bits every run).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .embedding_pool import _cdiv
from .embedding_pool import _check_ids
from .embedding_pool import _check_types
from .embedding_pool import _dot_in_fp32
from .embedding_pool import _row_major
from .embedding_pool import deterministic_backward
from .embedding_pool import launch_config
from .pooling import check_offset_values
from .pooling import interpreter_active

FLAG_MESSAGE = "liger_fuse: grouped offsets must lie within [0, N] and never decrease"


def _kernels():
    from . import grouped_embedding_pool_kernels

    return grouped_embedding_pool_kernels


_TRITON_TYPES = {}


def _triton_type(dtype: torch.dtype):
    if not _TRITON_TYPES:  # built once: this runs on every call, and the step is host-bound
        import triton.language as tl

        _TRITON_TYPES.update({torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16})
        _TRITON_TYPES.update({torch.int32: tl.int32, torch.int64: tl.int64})
    return _TRITON_TYPES[dtype]


def check_features(tables: Sequence, ids: Sequence, offsets: Sequence) -> None:
    """Shapes, dtypes and devices: each feature as the single op wants it, and all of them poolable in one launch."""
    if not (len(tables) == len(ids) == len(offsets)) or not tables:
        raise ValueError(
            f"one ids and one offsets tensor per table, at least one table: got {len(tables)} tables, "
            f"{len(ids)} ids, {len(offsets)} offsets"
        )
    for f, feature in enumerate(zip(tables, ids, offsets, strict=True)):
        try:
            _check_types(*feature)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"feature {f}: {exc}") from None
    first = tables[0]
    for f, (table, feature_offsets) in enumerate(zip(tables, offsets, strict=True)):
        if table.dtype != first.dtype:
            raise TypeError(
                f"every table of a group shares a dtype: feature 0 is {first.dtype}, feature {f} {table.dtype}"
            )
        if table.device != first.device:
            raise ValueError(
                f"every feature shares a device: feature 0 is on {first.device}, feature {f} {table.device}"
            )
        if feature_offsets.shape[0] != offsets[0].shape[0]:
            raise ValueError(
                f"every feature pools the same batch: feature 0 has B={offsets[0].shape[0] - 1}, "
                f"feature {f} B={feature_offsets.shape[0] - 1}"
            )


def _common_dtype(tensors: list[torch.Tensor]) -> tuple[list[torch.Tensor], torch.dtype]:
    """The ids (or offsets) of every feature in one integer type, as the kernel reads them: int32 if all are."""
    dtype = torch.int32 if all(t.dtype == torch.int32 for t in tensors) else torch.int64
    return [(t if t.dtype == dtype else t.to(dtype)).contiguous() for t in tensors], dtype


def _plan(partitions: int, rows: list[int], widths: list[int], dtype, device, config: dict | None):
    """The launch (the single op's bucket for B, the mean length over the features, the widest D) and its grid."""
    config = dict(config or launch_config(partitions, max(sum(rows) // len(rows), 1), max(widths), dtype, device))
    per_program = config["PARTS"] if config["kernel"] == "span" else 1
    grid = (_cdiv(partitions, per_program), len(widths), _cdiv(max(widths), config["BLOCK_D"]))
    launch = {k: v for k, v in config.items() if k not in ("kernel", "num_stages")}
    if config["kernel"] == "loop":
        launch.pop("PARTS", None)
    return config["kernel"], grid, launch


def _build_meta(tables, ids, offsets, grad_bases, widths, device) -> torch.Tensor:
    """Per feature (grouped_embedding_pool_kernels.META_FIELDS): table, ids and offsets addresses, the table's row
    stride, D, the output column offset, the gradient's base, N; then the offsets flag (1: good). One host-to-device
    copy (pinned, non-blocking on CUDA); `tables` None for the backward, which reads no table."""
    values, column = [], 0
    for f, (feature_ids, feature_offsets) in enumerate(zip(ids, offsets, strict=True)):
        table = tables[f] if tables is not None else None
        values += [table.data_ptr() if table is not None else 0, feature_ids.data_ptr(), feature_offsets.data_ptr()]
        values += [table.stride(0) if table is not None else 0, widths[f], column, grad_bases[f], feature_ids.shape[0]]
        column += widths[f]
    values.append(1)
    meta = torch.tensor(values, dtype=torch.int64, pin_memory=device.type == "cuda")
    return meta.to(device, non_blocking=True)


def _raise_on_flag(meta: torch.Tensor) -> None:
    """The kernel's verdict on the offsets: a device assert on CUDA (no host read), a host check elsewhere."""
    flag = meta[-1]
    if meta.device.type == "cuda":
        torch._assert_async(flag, FLAG_MESSAGE)
    elif not int(flag):
        raise ValueError(FLAG_MESSAGE)


def grouped_forward(tables, ids, offsets, config: dict | None = None) -> torch.Tensor:
    """[B, sum D] in one launch, no host checks (the op checks); `config` overrides the bucket's launch."""
    tables = [_row_major(t) for t in tables]
    ids, id_dtype = _common_dtype(list(ids))
    offsets, offset_dtype = _common_dtype(list(offsets))
    widths = [t.shape[1] for t in tables]
    partitions, device, dtype = offsets[0].shape[0] - 1, tables[0].device, tables[0].dtype
    out = tables[0].new_empty(partitions, sum(widths))
    if partitions == 0:
        return out
    kernel, grid, launch = _plan(partitions, [i.shape[0] for i in ids], widths, dtype, device, config)
    meta = _build_meta(tables, ids, offsets, [0] * len(tables), widths, device)
    args = (meta, out, partitions, len(tables), out.shape[1])
    types = {"ELEM": _triton_type(dtype), "ID": _triton_type(id_dtype), "OFFSET": _triton_type(offset_dtype)}
    if kernel == "span":
        span = _kernels().grouped_embedding_mean_span_fwd_kernel
        span[grid](*args, **types, IEEE=_dot_in_fp32(dtype), **launch)
    else:
        _kernels().grouped_embedding_mean_loop_fwd_kernel[grid](*args, **types, **launch)
    _raise_on_flag(meta)
    return out


def grouped_backward(
    grad_out: torch.Tensor,
    ids,
    offsets,
    vocabularies: list[int],
    widths: list[int],
    dtype: torch.dtype,
    config: dict | None = None,
) -> torch.Tensor:
    """The tables' dense gradients, flat: feature f's [V_f, D_f] (row-major) at sum of V_g * D_g over g < f."""
    grad_out = grad_out.contiguous()
    sizes = [v * d for v, d in zip(vocabularies, widths, strict=True)]
    partitions = grad_out.shape[0]
    if torch.are_deterministic_algorithms_enabled():
        pieces, column = [], 0
        for feature_ids, feature_offsets, vocabulary, width in zip(ids, offsets, vocabularies, widths, strict=True):
            feature_grad = grad_out[:, column : column + width]
            column += width
            if partitions == 0 or feature_ids.shape[0] == 0:
                pieces.append(grad_out.new_zeros(vocabulary * width, dtype=torch.float32))
            else:
                pieces.append(deterministic_backward(feature_grad, feature_ids, feature_offsets, vocabulary).view(-1))
        return torch.cat(pieces).to(dtype)
    grad = torch.zeros(sum(sizes), dtype=torch.float32, device=grad_out.device)
    ids, id_dtype = _common_dtype(list(ids))
    offsets, offset_dtype = _common_dtype(list(offsets))
    if partitions > 0 and sum(i.shape[0] for i in ids) > 0:
        kernel, grid, launch = _plan(partitions, [i.shape[0] for i in ids], widths, dtype, grad_out.device, config)
        bases = [0]
        for size in sizes[:-1]:
            bases.append(bases[-1] + size)
        meta = _build_meta(None, ids, offsets, bases, widths, grad_out.device)
        args = (meta, grad_out, grad, partitions, grad_out.shape[1])
        types = {
            "ELEM": _triton_type(grad_out.dtype),
            "ID": _triton_type(id_dtype),
            "OFFSET": _triton_type(offset_dtype),
        }
        if kernel == "span":
            _kernels().grouped_embedding_mean_span_bwd_kernel[grid](*args, **types, **launch)
        else:
            _kernels().grouped_embedding_mean_loop_bwd_kernel[grid](*args, **types, **launch)
    return grad if dtype == torch.float32 else grad.to(dtype)


def split_gradients(flat: torch.Tensor, vocabularies: list[int], widths: list[int]) -> list[torch.Tensor]:
    sizes = [v * d for v, d in zip(vocabularies, widths, strict=True)]
    return [piece.view(v, d) for piece, v, d in zip(flat.split(sizes), vocabularies, widths, strict=True)]


class GroupedEmbeddingPartitionedMean(torch.autograd.Function):
    """The kernels with an explicit launch `config` (tests, benchmarks); eager only. apply(config, K, *tables,
    *ids, *offsets): an autograd.Function tracks tensors passed one by one, not inside lists."""

    @staticmethod
    def forward(ctx, config, k, *tensors):
        tables, ids, offsets = tensors[:k], tensors[k : 2 * k], tensors[2 * k :]
        ctx.save_for_backward(*ids, *offsets)
        ctx.k, ctx.config, ctx.dtype = k, config, tables[0].dtype
        ctx.vocabularies, ctx.widths = [t.shape[0] for t in tables], [t.shape[1] for t in tables]
        return grouped_forward(tables, ids, offsets, config)

    @staticmethod
    def backward(ctx, grad_out):
        saved = ctx.saved_tensors
        ids, offsets = saved[: ctx.k], saved[ctx.k :]
        flat = grouped_backward(grad_out, ids, offsets, ctx.vocabularies, ctx.widths, ctx.dtype, ctx.config)
        grads = split_gradients(flat, ctx.vocabularies, ctx.widths)
        return (None, None, *grads, *([None] * (2 * ctx.k)))


# --- the op torch.compile (and the pass's replacement) calls; fake = shapes only --------------------------------


@torch.library.custom_op("liger_fuse::grouped_embedding_partitioned_mean", mutates_args=())
def grouped_embedding_partitioned_mean_op(
    tables: list[torch.Tensor], ids: list[torch.Tensor], offsets: list[torch.Tensor]
) -> torch.Tensor:
    """Column block f = mean of tables[f][ids[f][offsets[f][b]:offsets[f][b+1]]]: what the pass puts in place of K
    fused embedding pools meeting in one torch.cat. Offsets within [0, N_f], never decreasing (checked on the host
    on the CPU, in the kernel on CUDA)."""
    check_features(tables, ids, offsets)
    if tables[0].device.type == "cpu":
        for f, (feature_ids, feature_offsets) in enumerate(zip(ids, offsets, strict=True)):
            check_offset_values(feature_offsets, feature_ids.shape[0], rows_are=f"feature {f}'s number of ids")
    return grouped_forward(tables, ids, offsets)


@grouped_embedding_partitioned_mean_op.register_fake
def _(tables, ids, offsets):
    return tables[0].new_empty(offsets[0].shape[0] - 1, sum(t.shape[1] for t in tables))


@torch.library.custom_op("liger_fuse::grouped_embedding_partitioned_mean_backward", mutates_args=())
def grouped_embedding_partitioned_mean_grad(
    grad_out: torch.Tensor,
    ids: list[torch.Tensor],
    offsets: list[torch.Tensor],
    vocabularies: list[int],
    widths: list[int],
    dtype: torch.dtype,
) -> torch.Tensor:
    return grouped_backward(grad_out, ids, offsets, vocabularies, widths, dtype)


@grouped_embedding_partitioned_mean_grad.register_fake
def _(grad_out, ids, offsets, vocabularies, widths, dtype):
    return grad_out.new_empty(sum(v * d for v, d in zip(vocabularies, widths, strict=True)), dtype=dtype)


def _setup_context(ctx, inputs, output):
    tables, ids, offsets = inputs
    ctx.save_for_backward(*ids, *offsets)
    ctx.k, ctx.dtype = len(tables), tables[0].dtype
    ctx.vocabularies, ctx.widths = [t.shape[0] for t in tables], [t.shape[1] for t in tables]


def _backward(ctx, grad_out):
    saved = ctx.saved_tensors
    ids, offsets = list(saved[: ctx.k]), list(saved[ctx.k :])
    flat = grouped_embedding_partitioned_mean_grad(grad_out, ids, offsets, ctx.vocabularies, ctx.widths, ctx.dtype)
    return split_gradients(flat, ctx.vocabularies, ctx.widths), [None] * ctx.k, [None] * ctx.k


grouped_embedding_partitioned_mean_op.register_autograd(_backward, setup_context=_setup_context)


def pass_grouped_embedding_partitioned_mean(tables, ids, offsets) -> torch.Tensor:
    """What the pass calls (families.triton_grouped_embedding_partitioned_mean): the op, on every device."""
    return grouped_embedding_partitioned_mean_op(list(tables), list(ids), list(offsets))


def grouped_embedding_partitioned_mean(
    tables: Sequence[torch.Tensor],
    ids: Sequence[torch.Tensor],
    offsets: Sequence[torch.Tensor],
    check_ids: bool = False,
    concat: bool = True,
):
    """K features pooled in one launch: [B, sum D_f] (feature f's mean pool in its column block), or with
    `concat=False` the K [B, D_f] blocks (views of that tensor).

    tables[f] [V_f, D_f], one dtype (fp32 / bf16 / fp16) and device for all (a CUDA tensor, or a CPU one under
    TRITON_INTERPRET=1); ids[f] [N_f] int32 / int64; offsets[f] [B+1] int32 / int64 from 0 to N_f, never decreasing,
    the same B for every feature. Anything else is refused with the reason (naming the feature); ids are
    range-checked only with `check_ids=True` (a device sync)."""
    check_features(tables, ids, offsets)
    if tables[0].device.type != "cuda" and not interpreter_active():
        raise RuntimeError(f"the Triton kernel needs CUDA tensors or TRITON_INTERPRET=1, got {tables[0].device}")
    for f, (table, feature_ids, feature_offsets) in enumerate(zip(tables, ids, offsets, strict=True)):
        check_offset_values(feature_offsets, feature_ids.shape[0], whole=True, rows_are=f"feature {f}'s number of ids")
        if check_ids:
            try:
                _check_ids(feature_ids, table.shape[0])
            except ValueError as exc:
                raise ValueError(f"feature {f}: {exc}") from None
    out = grouped_embedding_partitioned_mean_op(list(tables), list(ids), list(offsets))
    return out if concat else list(out.split([t.shape[1] for t in tables], dim=1))


__all__ = [
    "GroupedEmbeddingPartitionedMean",
    "check_features",
    "grouped_embedding_partitioned_mean",
    "grouped_embedding_partitioned_mean_op",
    "pass_grouped_embedding_partitioned_mean",
]
