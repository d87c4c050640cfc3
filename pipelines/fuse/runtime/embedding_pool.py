"""Fused gather + mean pool: `embedding_partitioned_mean(table [V, D], ids [N], offsets [B+1]) -> [B, D]`.

out[b] = mean of table[ids[offsets[b]:offsets[b+1]]] (zeros for an empty partition), what
`nn.EmbeddingBag(mode="mean")` or `F.embedding` + a partitioned mean compute, in one launch that never writes the
[N, D] rows it gathers. Accumulation is fp32 for fp32 / bf16 / fp16 tables; the output has the table's dtype.

The launch is picked by a shape bucket (B, mean length N / B, D, dtype; `launch_bucket`) from data,
embedding_pool_launch.json, which holds the bucket rule's defaults until benchmarks/pooling_grid_gpu.py measures
and rewrites it: many short partitions take the span design (several partitions per program), long ones the loop
design (see embedding_pool_kernels.py).

Backward: the table's dense gradient, grad[v] = sum over the positions i with ids[i] = v of grad_out[b(i)] / len(b(i)).
Repeated ids collide, so the default scatters with fp32 atomic adds into a zeroed [V, D] fp32 buffer (cast to the
table's dtype at the end): one pass over the ids, no sort, the cost nn.EmbeddingBag's own backward pays in its sort.
Float addition in the order the atomics land is not reproducible bit for bit; with
`torch.use_deterministic_algorithms(True)` the gradient comes instead from a stable sort of the ids and a segmented
sum per distinct id (torch ops, one host sync for the number of distinct ids), the same bits on every run.

Ids are not range-checked by default: that is a reduction over N and a device sync per call, more than the kernel
costs at short lengths; an id outside [0, V) reads (forward) or writes (backward) outside the table. Pass
`check_ids=True` while debugging. The offsets are checked (one sync): 1-D, from 0 to N, never decreasing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from .pooling import SUPPORTED_DTYPES
from .pooling import check_offset_values
from .pooling import interpreter_active

LAUNCH_TABLE = Path(__file__).with_name("embedding_pool_launch.json")
ID_DTYPES = (torch.int32, torch.int64)
SHORT_MEAN_LENGTH = 32  # up to this mean length the span design; above it the loop design
LENGTH_EDGES = ((2, "L2"), (8, "L8"), (32, "L32"), (256, "L256"))  # mean length N / B; above: "Llong"
WIDTH_EDGES = ((64, "D64"), (128, "D128"), (256, "D256"))  # D; above: "Dwide"
FEW_PARTITIONS = 4096  # under this B, fewer partitions per program, so the programs still fill the GPU
SPAN_ROWS = 128  # rows a span program aims to own: PARTS * mean length


def _kernels():
    from . import embedding_pool_kernels

    return embedding_pool_kernels


def _next_power_of_2(n: float) -> int:
    n = max(int(-(-n // 1)), 1)
    return 1 << (n - 1).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _class_of(value: float, edges) -> str:
    for limit, name in edges:
        if value <= limit:
            return name
    return {LENGTH_EDGES: "Llong", WIDTH_EDGES: "Dwide"}[edges]


def launch_bucket(partitions: int, rows: int, width: int, dtype: torch.dtype) -> str:
    """The shape bucket, e.g. "Blarge/L8/D128/fp32": B few or large, mean length class, D class, dtype class."""
    mean_length = rows / max(partitions, 1)
    b_class = "Bfew" if partitions < FEW_PARTITIONS else "Blarge"
    dtype_class = "fp32" if dtype == torch.float32 else "16bit"
    return "/".join((b_class, _class_of(mean_length, LENGTH_EDGES), _class_of(width, WIDTH_EDGES), dtype_class))


def rule_config(bucket: str) -> dict:
    """The rule's launch for a bucket (what the table holds until measured): span below SHORT_MEAN_LENGTH."""
    b_class, length_class, width_class, dtype_class = bucket.split("/")
    typical_length = {"L2": 1.5, "L8": 6, "L32": 24, "L256": 160, "Llong": 1024}[length_class]
    width = {"D64": 64, "D128": 128, "D256": 256, "Dwide": 1024}[width_class]
    if typical_length <= SHORT_MEAN_LENGTH:
        return _span_rule(16 if b_class == "Bfew" else _span_parts(typical_length), width)
    block_n = 32 if dtype_class == "fp32" else 64
    return {"kernel": "loop", "BLOCK_N": block_n, "BLOCK_D": min(256, width), "num_warps": 4}


def _span_parts(mean_length: float) -> int:
    """Partitions a span program owns: PARTS x mean length about SPAN_ROWS, 16-64."""
    return min(64, max(16, _next_power_of_2(SPAN_ROWS / max(mean_length, 1.0))))


def _span_rule(parts: int, width: int) -> dict:
    return {"kernel": "span", "PARTS": parts, "BLOCK_N": 64, "BLOCK_D": min(128, width), "num_warps": 4}


def every_bucket() -> list[str]:
    names = [name for _, name in LENGTH_EDGES] + ["Llong"]
    widths = [name for _, name in WIDTH_EDGES] + ["Dwide"]
    combos = (
        (b, length, w, t) for b in ("Bfew", "Blarge") for length in names for w in widths for t in ("fp32", "16bit")
    )
    return ["/".join(combo) for combo in combos]


def load_launch_table(path: Path = LAUNCH_TABLE) -> dict:
    """{bucket: config}; a bucket the file lacks (or no file) takes the rule's config."""
    table = {bucket: rule_config(bucket) for bucket in every_bucket()}
    if path.is_file():
        table.update(json.loads(path.read_text()).get("buckets", {}))
    return table


_LAUNCH = {}


def launch_config(partitions: int, rows: int, width: int, dtype: torch.dtype, device: torch.device) -> dict:
    """The bucket's launch; BLOCK_D fitted to D (at least 16, the tensor-core tile's least side)."""
    if not _LAUNCH:
        _LAUNCH.update(load_launch_table())
    return _fitted(_LAUNCH[launch_bucket(partitions, rows, width, dtype)], width, device)


def _fitted(config: dict, width: int, device: torch.device) -> dict:
    """A launch fitted to D (BLOCK_D at least 16, the tensor-core tile's least side) and the device."""
    config = dict(config)
    config["BLOCK_D"] = max(16, min(config["BLOCK_D"], _next_power_of_2(width)))
    if device.type != "cuda":
        config.pop("num_warps", None)
        config.pop("num_stages", None)
    return config


def _check_types(table: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor) -> None:
    if table.dim() != 2:
        raise ValueError(f"table must be [V, D], got shape {tuple(table.shape)}")
    if table.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"table dtype {table.dtype} is not fp32/bf16/fp16")
    if ids.dim() != 1:
        raise ValueError(f"ids must be 1-D [N], got shape {tuple(ids.shape)}")
    if ids.dtype not in ID_DTYPES:
        raise TypeError(f"ids must be int32 or int64, got {ids.dtype}")
    if offsets.dim() != 1 or offsets.shape[0] < 1:
        raise ValueError(f"offsets must be 1-D [B+1] with B >= 0, got shape {tuple(offsets.shape)}")
    if offsets.dtype not in ID_DTYPES:
        raise TypeError(f"offsets must be int32 or int64, got {offsets.dtype}")
    if not (table.device == ids.device == offsets.device):
        raise ValueError(
            f"table, ids and offsets must share a device, got {table.device}, {ids.device}, {offsets.device}"
        )


def _check_ids(ids: torch.Tensor, vocabulary: int) -> None:
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocabulary):
        raise ValueError(f"ids must lie in [0, V={vocabulary}), got {int(ids.min())}..{int(ids.max())}")


def _row_major(table: torch.Tensor) -> torch.Tensor:
    return table if table.stride(1) == 1 else table.contiguous()


def _grid(config: dict, partitions: int, width: int) -> tuple[int, int]:
    per_program = config["PARTS"] if config["kernel"] == "span" else 1
    return (_cdiv(partitions, per_program), _cdiv(width, config["BLOCK_D"]))


def _launch_args(config: dict) -> dict:
    return {k: v for k, v in config.items() if k != "kernel" and not (config["kernel"] == "loop" and k == "PARTS")}


def _dot_in_fp32(dtype: torch.dtype) -> bool:
    """fp32 tables take IEEE fp32 products (tf32 would round the rows); a 16-bit table multiplies natively, except
    bf16 under the interpreter, whose numpy dot has no bf16 (it returned garbage there), so the CPU tests widen it."""
    return dtype == torch.float32 or (dtype == torch.bfloat16 and interpreter_active())


def _span_dot(dtype: torch.dtype) -> dict:
    """The span forward's product flags: fp32 split into three bf16 parts (`_split_dot`), widened to IEEE fp32
    products under the interpreter as bf16 is (its numpy dot has no bf16); 16-bit native otherwise."""
    return {"IEEE": _dot_in_fp32(dtype) and interpreter_active(), "SPLIT": dtype == torch.float32}


def embedding_mean_forward(
    table: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor, config: dict | None = None
) -> torch.Tensor:
    """One launch, no checks (the functional entry point checks); `config` overrides the bucket's launch."""
    table = _row_major(table)
    ids, offsets = ids.contiguous(), offsets.contiguous()
    partitions, width, rows = offsets.shape[0] - 1, table.shape[1], ids.shape[0]
    if partitions == 0 or rows == 0:
        return table.new_zeros(partitions, width)
    config = config or launch_config(partitions, rows, width, table.dtype, table.device)
    out = table.new_empty(partitions, width)
    grid = _grid(config, partitions, width)
    args = (table, ids, offsets, out, partitions, width, table.stride(0))
    if config["kernel"] == "span":
        span = _kernels().embedding_mean_span_fwd_kernel
        span[grid](*args, **_span_dot(table.dtype), GATHER=True, **_launch_args(config))
    else:
        _kernels().embedding_mean_loop_fwd_kernel[grid](*args, **_launch_args(config))
    return out


def span_config_for_plain_mean(partitions: int, rows: int, width: int, dtype, device) -> dict | None:
    """The span launch for a plain partitioned mean when its bucket is many (B >= FEW_PARTITIONS) short partitions,
    else None (the tile kernel of pooling_kernels.py keeps the rest: it splits long partitions over programs)."""
    if partitions < FEW_PARTITIONS:
        return None
    config = launch_config(partitions, rows, width, dtype, device)
    return config if config["kernel"] == "span" else None


def span_config_at(partitions: int, rows: int, width: int, dtype, device) -> dict:
    """A span launch at any shape (the design forced): the bucket's own where it is a span one, else the rule's
    span launch for this mean length."""
    config = launch_config(partitions, rows, width, dtype, device)
    if config["kernel"] == "span":
        return config
    return _fitted(_span_rule(_span_parts(rows / max(partitions, 1)), _next_power_of_2(width)), width, device)


def plain_mean_span_forward(values: torch.Tensor, offsets: torch.Tensor, config: dict) -> torch.Tensor:
    """The partitioned mean of values [N, D] (contiguous, N > 0) through the span kernel; offsets int64 within
    [0, N], never decreasing (rows outside them belong to no partition: a span reads only its partitions' rows)."""
    partitions, width = offsets.shape[0] - 1, values.shape[1]
    out = values.new_empty(partitions, width)
    args = (values, values, offsets, out, partitions, width, width)  # ids unread with GATHER off
    _kernels().embedding_mean_span_fwd_kernel[_grid(config, partitions, width)](
        *args, **_span_dot(values.dtype), GATHER=False, **_launch_args(config)
    )
    return out


def embedding_mean_backward(
    grad_out: torch.Tensor,
    ids: torch.Tensor,
    offsets: torch.Tensor,
    vocabulary: int,
    dtype: torch.dtype,
    config: dict | None = None,
) -> torch.Tensor:
    """The table's dense gradient [V, D] in `dtype`: atomics, or the sorted segmented sum when torch is asked to be
    deterministic."""
    grad_out = grad_out.contiguous()
    partitions, width = grad_out.shape
    rows = ids.shape[0]
    if partitions == 0 or rows == 0:
        return grad_out.new_zeros(vocabulary, width, dtype=dtype)
    if torch.are_deterministic_algorithms_enabled():
        return deterministic_backward(grad_out, ids, offsets, vocabulary).to(dtype)
    config = config or launch_config(partitions, rows, width, dtype, grad_out.device)
    grad_table = torch.zeros(vocabulary, width, dtype=torch.float32, device=grad_out.device)
    grid = _grid(config, partitions, width)
    args = (grad_out, ids.contiguous(), offsets.contiguous(), grad_table, partitions, width)
    launch = {k: v for k, v in _launch_args(config).items() if k not in ("num_stages",)}
    if config["kernel"] == "span":
        _kernels().embedding_mean_span_bwd_kernel[grid](*args, **launch)
    else:
        _kernels().embedding_mean_loop_bwd_kernel[grid](*args, **launch)
    return grad_table if dtype == torch.float32 else grad_table.to(dtype)


def deterministic_backward(
    grad_out: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor, vocabulary: int
) -> torch.Tensor:
    """fp32 [V, D]: each distinct id's rows summed in one fixed order (stable sort, then a segmented sum)."""
    first, last = offsets[[0, -1]].tolist()  # the pass's op allows rows outside the partitions: no gradient there
    ids, offsets = ids[first:last], offsets - first
    partitions, rows = grad_out.shape[0], ids.shape[0]
    lengths = (offsets[1:] - offsets[:-1]).to(torch.int64)
    owner = torch.repeat_interleave(torch.arange(partitions, device=ids.device), lengths, output_size=rows)
    scaled = grad_out.float() / lengths.clamp(min=1).unsqueeze(1)
    order = torch.sort(ids.to(torch.int64), stable=True)
    distinct, counts = torch.unique_consecutive(order.values, return_counts=True)
    sums = torch.segment_reduce(scaled[owner[order.indices]], "sum", lengths=counts)
    grad_table = grad_out.new_zeros(vocabulary, grad_out.shape[1], dtype=torch.float32)
    grad_table[distinct] = sums
    return grad_table


class EmbeddingPartitionedMean(torch.autograd.Function):
    """The kernels with an explicit launch `config` (the launch sweep's benchmarks); eager only."""

    @staticmethod
    def forward(ctx, table, ids, offsets, config=None):
        ctx.save_for_backward(ids, offsets)
        ctx.vocabulary, ctx.dtype, ctx.config = table.shape[0], table.dtype, config
        return embedding_mean_forward(table, ids, offsets, config)

    @staticmethod
    def backward(ctx, grad_out):
        ids, offsets = ctx.saved_tensors
        grad_table = embedding_mean_backward(grad_out, ids, offsets, ctx.vocabulary, ctx.dtype, ctx.config)
        return grad_table, None, None, None


# --- opaque custom ops: what torch.compile (and the pass's replacement) calls; fake = shapes only -------------


@torch.library.custom_op("liger_fuse::embedding_partitioned_mean", mutates_args=())
def embedding_partitioned_mean_op(table: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """out[b] = mean of table[ids[offsets[b]:offsets[b+1]]]: what the pass puts in place of embedding -> pool."""
    _check_types(table, ids, offsets)
    check_offset_values(offsets, ids.shape[0], rows_are="the number of ids", on_device=True)
    return embedding_mean_forward(table, ids, offsets)


@embedding_partitioned_mean_op.register_fake
def _(table, ids, offsets):
    return table.new_empty(offsets.shape[0] - 1, table.shape[1])


@torch.library.custom_op("liger_fuse::embedding_partitioned_mean_backward", mutates_args=())
def embedding_partitioned_mean_grad(
    grad_out: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor, vocabulary: int, dtype: torch.dtype
) -> torch.Tensor:
    return embedding_mean_backward(grad_out, ids, offsets, vocabulary, dtype)


@embedding_partitioned_mean_grad.register_fake
def _(grad_out, ids, offsets, vocabulary, dtype):
    return grad_out.new_empty(vocabulary, grad_out.shape[1], dtype=dtype)


def _setup_context(ctx, inputs, output):
    table, ids, offsets = inputs
    ctx.save_for_backward(ids, offsets)
    ctx.vocabulary, ctx.dtype = table.shape[0], table.dtype


def _backward(ctx, grad_out):
    ids, offsets = ctx.saved_tensors
    return embedding_partitioned_mean_grad(grad_out, ids, offsets, ctx.vocabulary, ctx.dtype), None, None


embedding_partitioned_mean_op.register_autograd(_backward, setup_context=_setup_context)


# --- the pass's path off the CPU: the offsets check in the graph, the ops without a Python autograd kernel ---------
# The recsys step on the H200 is host-bound (twelfth session: GPU busy 0.26 ms of a 1.7 ms step), and the checked op
# above cost the host 149 us per call against 28 for its launch: 70 us in `assert_offsets_on_device`'s six eager ops,
# the rest in torch.library.custom_op's Python dispatch (its autograd kernel runs in Python on every call, even with
# grad off). So on a GPU the pass (families.triton_embedding_partitioned_mean) calls `pass_embedding_partitioned_mean`:
# the check as aten ops in the graph it writes (Inductor fuses them into one kernel with a device assert:
# aten._assert_async.msg lowers to tl.device_assert), then ops defined with torch.library.Library and no autograd
# kernel (a C++ fall-through with grad off, as inside a compiled graph), differentiated by an autograd.Function that
# AOTAutograd traces through at compile time. The CPU keeps the checked op (precise host checks and messages).

CHECKS_IN_GRAPH_ON = ("cuda",)  # device types whose pass calls take the in-graph check; tests add "cpu"
IN_GRAPH_CHECK_MESSAGE = "liger_fuse: offsets must lie within [0, N] and never decrease"
_LIB = torch.library.Library("liger_fuse", "FRAGMENT")
_LIB.define("embedding_mean_prechecked(Tensor table, Tensor ids, Tensor offsets) -> Tensor")
_LIB.define(
    "embedding_mean_prechecked_backward(Tensor grad_out, Tensor ids, Tensor offsets, SymInt vocabulary, "
    "ScalarType dtype) -> Tensor"
)


def checks_in_graph(device: torch.device) -> bool:
    """Whether the pass's call on this device checks its offsets in the graph (LIGER_FUSE_CHECKS_IN_GRAPH=0: never,
    the checked op instead: the before / after switch of benchmarks/recsys_host_gpu.py)."""
    if os.environ.get("LIGER_FUSE_CHECKS_IN_GRAPH", "1") == "0":
        return False
    return device.type in CHECKS_IN_GRAPH_ON


def offsets_checked_in_graph(offsets: torch.Tensor, rows) -> torch.Tensor:
    """The offsets when they lie within [0, rows] and never decrease, else zeros (every partition empty: the kernels
    then read and write nothing), with a device assert naming the rule; no host read, no branch on sizes (rows may be
    symbolic), so a trace records plain aten ops. The kernels read the result, so no scheduler can launch them
    before the check."""
    ok = (offsets[0] >= 0) & (offsets[-1] <= rows) & (offsets[1:] >= offsets[:-1]).all()
    torch._assert_async(ok, IN_GRAPH_CHECK_MESSAGE)
    return offsets * ok


def _prechecked_forward(table, ids, offsets):
    _check_types(table, ids, offsets)
    return embedding_mean_forward(table, ids, offsets)


def _prechecked_backward(grad_out, ids, offsets, vocabulary, dtype):
    return embedding_mean_backward(grad_out, ids, offsets, vocabulary, dtype)


for _key in ("CUDA", "CPU"):  # CPU: the interpreter's tests
    _LIB.impl("embedding_mean_prechecked", _prechecked_forward, _key)
    _LIB.impl("embedding_mean_prechecked_backward", _prechecked_backward, _key)


@torch.library.register_fake("liger_fuse::embedding_mean_prechecked", lib=_LIB)
def _(table, ids, offsets):
    return table.new_empty(offsets.shape[0] - 1, table.shape[1])


@torch.library.register_fake("liger_fuse::embedding_mean_prechecked_backward", lib=_LIB)
def _(grad_out, ids, offsets, vocabulary, dtype):
    return grad_out.new_empty(vocabulary, grad_out.shape[1], dtype=dtype)


class PrecheckedMean(torch.autograd.Function):
    """The prechecked ops with their backward; AOTAutograd traces through it, so a compiled graph calls the two ops."""

    @staticmethod
    def forward(ctx, table, ids, offsets):
        ctx.save_for_backward(ids, offsets)
        ctx.vocabulary, ctx.dtype = table.shape[0], table.dtype
        return torch.ops.liger_fuse.embedding_mean_prechecked.default(table, ids, offsets)

    @staticmethod
    def backward(ctx, grad_out):
        ids, offsets = ctx.saved_tensors
        grad_table = torch.ops.liger_fuse.embedding_mean_prechecked_backward.default(
            grad_out, ids, offsets, ctx.vocabulary, ctx.dtype
        )
        return grad_table, None, None


# --- opt-in (LIGER_FUSE_LAUNCH=inductor): the same prechecked kernels as triton_ops, launched by Inductor ---------
# With the check out of the op, nothing in its body reads offsets' values, so a triton_op's body traces (the tenth
# session left triton_op for the host check AOTAutograd traced into): Inductor then launches the kernels from its own
# code, with no Python op dispatch and no Triton JIT launcher per call. The launch is picked from the trace's example
# sizes without a guard (both designs compute any lengths; a batch in another bucket keeps the first one's launch, a
# speed matter only), so lengths that change every batch do not recompile. Not the default until the H200 shows it.


def launches_in_inductor(device: torch.device) -> bool:
    """On CUDA the prechecked kernels are triton_ops Inductor launches from its own wrapper code by default: the H200's
    recsys step 1.33 ms against 1.50 through the custom ops (twelfth session, benchmarks/recsys_host_gpu.py, same
    run, no fallback); LIGER_FUSE_LAUNCH=op keeps the custom ops."""
    return device.type == "cuda" and os.environ.get("LIGER_FUSE_LAUNCH", "inductor") == "inductor"


def _example(size) -> int:
    """A size as a number: itself, or a symbolic size's example value (no guard); 0 when it has none."""
    if isinstance(size, int):
        return size
    hint = size.node.hint
    return int(hint) if hint is not None else 0


def _no_rows(partitions, rows) -> bool:
    from torch.fx.experimental.symbolic_shapes import guard_or_false

    return guard_or_false(partitions == 0) or guard_or_false(rows == 0)


def launched_forward(table: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """The triton_op's body: one launch through wrap_triton (a trace records it, Inductor launches it)."""
    from torch.library import wrap_triton

    table, ids, offsets = _row_major(table), ids.contiguous(), offsets.contiguous()
    partitions, width, rows = offsets.shape[0] - 1, table.shape[1], ids.shape[0]
    if _no_rows(partitions, rows):
        return table.new_zeros(partitions, width)
    config = launch_config(_example(partitions), _example(rows), width, table.dtype, table.device)
    out = table.new_empty(partitions, width)
    args = (table, ids, offsets, out, partitions, width, table.stride(0))
    grid = _grid(config, partitions, width)
    if config["kernel"] == "span":
        span = wrap_triton(_kernels().embedding_mean_span_fwd_kernel)
        span[grid](*args, **_span_dot(table.dtype), GATHER=True, **_launch_args(config))
    else:
        wrap_triton(_kernels().embedding_mean_loop_fwd_kernel)[grid](*args, **_launch_args(config))
    return out


def launched_backward(grad_out, ids, offsets, vocabulary, dtype) -> torch.Tensor:
    """The backward triton_op's body: the zeroed fp32 gradient and one atomics launch."""
    from torch.library import wrap_triton

    grad_out, ids, offsets = grad_out.contiguous(), ids.contiguous(), offsets.contiguous()
    partitions, width = grad_out.shape
    rows = ids.shape[0]
    if _no_rows(partitions, rows):
        return grad_out.new_zeros(vocabulary, width, dtype=dtype)
    config = launch_config(_example(partitions), _example(rows), width, dtype, grad_out.device)
    grad_table = torch.zeros(vocabulary, width, dtype=torch.float32, device=grad_out.device)
    args = (grad_out, ids, offsets, grad_table, partitions, width)
    launch = {k: v for k, v in _launch_args(config).items() if k not in ("num_stages",)}
    kernel = _kernels().embedding_mean_span_bwd_kernel if config["kernel"] == "span" else None
    kernel = kernel or _kernels().embedding_mean_loop_bwd_kernel
    wrap_triton(kernel)[_grid(config, partitions, width)](*args, **launch)
    return grad_table if dtype == torch.float32 else grad_table.to(dtype)


@torch.library.triton_op("liger_fuse::embedding_mean_launched", mutates_args=())
def embedding_mean_launched(table: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return launched_forward(table, ids, offsets)


@torch.library.triton_op("liger_fuse::embedding_mean_launched_backward", mutates_args=())
def embedding_mean_launched_backward(
    grad_out: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor, vocabulary: int, dtype: torch.dtype
) -> torch.Tensor:
    return launched_backward(grad_out, ids, offsets, vocabulary, dtype)


class LaunchedMean(torch.autograd.Function):
    """The triton_ops with their backward (deterministic mode at trace time: the prechecked op's sorted sum)."""

    @staticmethod
    def forward(ctx, table, ids, offsets):
        ctx.save_for_backward(ids, offsets)
        ctx.vocabulary, ctx.dtype = table.shape[0], table.dtype
        return embedding_mean_launched(table, ids, offsets)

    @staticmethod
    def backward(ctx, grad_out):
        ids, offsets = ctx.saved_tensors
        if torch.are_deterministic_algorithms_enabled():
            backward = torch.ops.liger_fuse.embedding_mean_prechecked_backward.default
        else:
            backward = embedding_mean_launched_backward
        return backward(grad_out, ids, offsets, ctx.vocabulary, ctx.dtype), None, None


def pass_embedding_partitioned_mean(table: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """What the pass calls: the checked op on the CPU, the in-graph check and the prechecked ops elsewhere (launched
    by Inductor with LIGER_FUSE_LAUNCH=inductor on CUDA)."""
    if not checks_in_graph(offsets.device):
        return embedding_partitioned_mean_op(table, ids, offsets)
    function = LaunchedMean if launches_in_inductor(offsets.device) else PrecheckedMean
    return function.apply(table, ids, offsets_checked_in_graph(offsets, ids.shape[0]))


def embedding_partitioned_mean(
    table: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor, check_ids: bool = False, sparse: bool = False
) -> torch.Tensor:
    """out[b] = mean of table[ids[offsets[b]:offsets[b+1]]], zeros where the partition is empty.

    table [V, D] fp32 / bf16 / fp16 (a CUDA tensor, or a CPU one under TRITON_INTERPRET=1); ids [N] int32 / int64;
    offsets [B+1] int32 / int64 from 0 to N, never decreasing. Anything else is refused with the reason; ids are
    range-checked only with `check_ids=True` (a device sync). `sparse=True`: the table's gradient is a sparse COO
    tensor, as `nn.EmbeddingBag(..., sparse=True)` gives (embedding_pool_sparse.py; eager only)."""
    _check_types(table, ids, offsets)
    if table.device.type != "cuda" and not interpreter_active():
        raise RuntimeError(f"the Triton kernel needs a CUDA tensor or TRITON_INTERPRET=1, got {table.device}")
    check_offset_values(offsets, ids.shape[0], whole=True, rows_are="the number of ids")
    if check_ids:
        _check_ids(ids, table.shape[0])
    if sparse:
        from .embedding_pool_sparse import EmbeddingPartitionedMeanSparse

        return EmbeddingPartitionedMeanSparse.apply(table, ids, offsets)
    return embedding_partitioned_mean_op(table, ids, offsets)


__all__ = [
    "EmbeddingPartitionedMean",
    "embedding_partitioned_mean",
    "embedding_partitioned_mean_op",
    "launch_bucket",
    "launch_config",
    "offsets_checked_in_graph",
    "pass_embedding_partitioned_mean",
    "rule_config",
]
