"""Partitioned mean pooling as custom ops torch.compile traces (ops -> autograd -> functional, Liger-style).

`liger_fuse::partitioned_mean(values [N, D], offsets [B+1]) -> [B, D]` and the grouped form
`liger_fuse::grouped_partitioned_mean(values[], offsets[]) -> out[]`, one Triton launch forward and one backward
(the tile kernels' forward also clears a B-entry int32 counter array that only partitions longer than R rows use).
The launch follows the shape (`short_config`): up to a mean length N / B of SHORT_MEAN_LENGTH the short design of
pooling_short_kernels.py (a block of partitions per program, one kernel each way, nothing to clear), above it the
tile kernels of pooling_kernels.py (long partitions split over programs); the grouped form keeps the tile kernels.

Every op is an opaque `torch.library.custom_op` with a fake implementation computed from shapes only ([B, D],
B = offsets.shape[0] - 1) and a registered autograd: no trace (Dynamo, AOTAutograd's functionalisation, Inductor)
runs its body. Its body reads values of `offsets` (the range checks, one sync), which a trace cannot do: as a
`triton_op` AOTAutograd traced into that body and raised on `aten._local_scalar_dense` on the H200 (torch 2.11),
splitting the compiled model's graph there (benchmarks/NOTES.md, ninth session's H200 calls, item 4). What that
costs: the kernels launch from Python inside the compiled graph (one dispatch per call) instead of from
Inductor's generated code.
"""

from __future__ import annotations

import math
import os
import sys

import torch

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # accumulated in fp32 whatever the input


def interpreter_active() -> bool:
    """Triton interprets kernels only if TRITON_INTERPRET was set before triton.language was imported: its own jit
    functions (tl.cdiv, tl.sum) are made then, and a kernel calling one made for the GPU fails on CPU tensors."""
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        return False
    language = sys.modules.get("triton.language")
    if language is None:
        return True
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(language.cdiv, InterpretedFunction)


def can_run_on(device: torch.device) -> bool:
    """Triton runs on CUDA, or on the CPU through its interpreter."""
    return device.type == "cuda" or (device.type == "cpu" and interpreter_active())


def _kernels():
    from . import pooling_kernels

    return pooling_kernels


# every forward launch names these (kept explicit: a launch through wrap_triton gets no constexpr defaults);
# the sweep's choices override them per dtype
FORWARD_DEFAULTS = {"UNROLL": 1, "LOOP_STAGES": 1, "PAIRS": False}


def launch_config(
    total_rows: int,
    width: int,
    device: torch.device,
    dtype: torch.dtype = torch.float32,
    backward: bool = False,
    pairs: bool = False,
) -> dict:
    """R (rows a program reduces; a longer partition is split), BLOCK_N rows per step, BLOCK_D columns, and for the
    forward how many tile loads a step keeps in flight (UNROLL), how deep its loop is pipelined (LOOP_STAGES) and,
    where `pairs` says the bf16 values allow it, whether it reads them as 32-bit words (PAIRS)."""
    config = _tuned_config(total_rows, width, device, dtype, backward, pairs)
    return config if backward else {**FORWARD_DEFAULTS, **config}


def _tuned_config(
    total_rows: int, width: int, device: torch.device, dtype: torch.dtype, backward: bool, pairs: bool
) -> dict:
    block_d = min(256, triton_next_power_of_2(max(width, 1)))
    if device.type != "cuda":
        # the interpreter prefers few, large programs; R stays small enough that tests split partitions
        return {"R": max(4, triton_next_power_of_2(max(total_rows // 4, 1))), "BLOCK_N": 4, "BLOCK_D": block_d}
    cuda = {"R": 512, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}
    if backward:  # stores only, so nothing to keep in flight; R 128 evens out the programs (run 5: skewed fp32 -19%)
        return {**cuda, "R": 128, "BLOCK_D": block_d}
    # H200 sweeps (benchmarks/NOTES.md, fuse / pooling, runs 4 and 5): least forward kernel time summed over uniform,
    # skewed and single lengths at B=1024, N=205,829, D=256. fp32 keeps 4 tiles of loads in flight; bf16 reads its
    # rows as 32-bit words (a bf16 row tile stalls on shared-memory traffic) through a 3-stage pipelined loop.
    # R 1024: one partition of N rows still spreads over N / 1024 programs, ~200-row partitions stay whole.
    if dtype == torch.bfloat16 and pairs:
        unroll = 2 if _shared_memory(device) >= 96 * 1024 else 1  # 2 tiles x 3 stages buffer 64 KB per program
        return {**cuda, "R": 1024, "BLOCK_D": block_d, "UNROLL": unroll, "LOOP_STAGES": 3, "PAIRS": True}
    if dtype in (torch.bfloat16, torch.float16):  # odd widths, misaligned values, the grouped kernel, fp16 (not
        # measured: the 2-byte row tiles of bf16's run 4; fp16 cannot take the 32-bit-word trick, a bf16 bit shift)
        return {**cuda, "BLOCK_D": min(128, block_d), "LOOP_STAGES": 3}
    return {**cuda, "R": 1024, "BLOCK_D": min(128, block_d), "UNROLL": 4}


def _shared_memory(device: torch.device) -> int:
    """Shared memory one program may use on this GPU (0 where torch does not say)."""
    if not torch.cuda.is_available():
        return 0
    return getattr(torch.cuda.get_device_properties(device), "shared_memory_per_block_optin", 0)


def triton_next_power_of_2(n: int) -> int:
    return 1 << (int(n) - 1).bit_length() if n > 1 else 1


def _log_b(partitions: int) -> int:
    return max(1, int(partitions).bit_length())


def _cdiv(a, b):
    return -(-a // b)


def _check(values: torch.Tensor, offsets: torch.Tensor) -> None:
    torch._check(values.dim() == 2, lambda: f"values must be [N, D], got {tuple(values.shape)}")
    torch._check(
        offsets.dim() == 1 and offsets.shape[0] >= 1,
        lambda: f"offsets must be 1-D [B+1] with B >= 0, got shape {tuple(offsets.shape)}",
    )
    torch._check(values.dtype in SUPPORTED_DTYPES, lambda: f"values dtype {values.dtype} is not fp32/bf16/fp16")
    torch._check(
        not offsets.dtype.is_floating_point and not offsets.dtype.is_complex and offsets.dtype != torch.bool,
        lambda: f"offsets must be an integer tensor, got {offsets.dtype}",
    )


def check_offsets(values: torch.Tensor, offsets: torch.Tensor, whole: bool = False, on_device: bool = False) -> None:
    """`_check`'s shapes and dtypes, then `check_offset_values` against values' rows."""
    _check(values, offsets)
    check_offset_values(offsets, values.shape[0], whole=whole, on_device=on_device)


def check_offset_values(
    offsets: torch.Tensor, rows: int, whole: bool = False, rows_are: str = "values' rows", on_device: bool = False
) -> None:
    """The value checks: offsets never decrease and stay within [0, N], so no partition reads outside the rows;
    `whole` (the public entry points) also asks them to start at 0 and end at N, so every row belongs to a partition.
    The ops the pass calls keep the wider definition (rows before offsets[0] or after offsets[-1] belong to no
    partition, as a loop over slices has it). One host read of three values; under a trace the values are unknown.
    `on_device` (the pass's ops): off the CPU the same conditions are asserted on the device instead, as a host read
    drains the device queue on every call (the recsys demo's step ran three per forward)."""
    if torch.compiler.is_compiling() or isinstance(offsets, torch._subclasses.FakeTensor):
        return
    if on_device and offsets.device.type != "cpu":
        assert_offsets_on_device(offsets, rows, whole)
        return
    drops = (offsets[1:] < offsets[:-1]).to(torch.int8)
    first_drop = torch.where(drops.any(), drops.argmax(), -1) if drops.numel() else offsets.new_tensor(-1)
    first, last, at = torch.stack([offsets[0], offsets[-1], first_drop.to(offsets.dtype)]).tolist()
    if whole and first != 0:
        raise ValueError(f"offsets must start at 0, got offsets[0]={first}")
    if whole and last != rows:
        raise ValueError(f"offsets must end at N={rows} ({rows_are}), got offsets[-1]={last}")
    if first < 0 or last > rows:
        raise ValueError(f"offsets must lie within [0, N={rows}] ({rows_are}), got {first}..{last}")
    if at >= 0:
        low, high = offsets[at : at + 2].tolist()
        raise ValueError(f"offsets must not decrease: offsets[{at}]={low} > offsets[{at + 1}]={high}")


def assert_offsets_on_device(offsets: torch.Tensor, rows: int, whole: bool = False) -> None:
    """`check_offset_values`' conditions without a host read: one device-side assert naming the rule, raised at the
    next sync."""
    within = (offsets[0] == 0) & (offsets[-1] == rows) if whole else (offsets[0] >= 0) & (offsets[-1] <= rows)
    if offsets.shape[0] > 1:
        within = within & (offsets[1:] >= offsets[:-1]).all()
    rule = "run from 0 to N" if whole else "lie within [0, N]"
    torch._assert_async(within, f"liger_fuse: offsets must {rule} and never decrease")


def _readable_in_pairs(values: torch.Tensor) -> bool:
    """bf16 rows of even width starting on a 4-byte boundary can be read as 32-bit words (allocations are aligned;
    an even element offset keeps them so). Under a trace with symbolic sizes this adds a guard (an odd width later
    recompiles) rather than giving the words up."""
    from torch.fx.experimental.symbolic_shapes import guard_or_false

    if values.dtype != torch.bfloat16:
        return False
    return guard_or_false(values.shape[1] % 2 == 0) and guard_or_false(values.storage_offset() % 2 == 0)


def _embedding_pool():
    from . import embedding_pool  # it imports this module

    return embedding_pool


def _span_config(partitions, rows, width, values: torch.Tensor) -> dict | None:
    """The span launch where the shape bucket says many short partitions. Only for sizes known as numbers: under a
    trace with symbolic sizes the bucket's comparisons would add guards (a recompile per bucket change) or fail on
    data-dependent sizes, so there the tile kernel runs as before."""
    if not all(isinstance(size, int) for size in (partitions, rows, width)):
        return None
    return _embedding_pool().span_config_for_plain_mean(partitions, rows, width, values.dtype, values.device)


SPAN_MIN_VALUES = 128  # values a partition (L x D) from which the bf16 forward takes span
NARROW_SPAN_MIN_PARTITIONS = 16384  # narrow bf16 rows past the short mean length: span from this many partitions
FP32_SPAN_MAX_WIDTH = 64  # fp32 rows wider than NARROW_WIDTH, up to this, take span ...
FP32_SPAN_MIN_MEAN_LENGTH = 8  # ... from this mean length up to SHORT_MEAN_LENGTH ...
FP32_SPAN_MIN_PARTITIONS = 65536  # ... and this many partitions (the one fp32 cell where span measured faster)


def _span_forward_wins(partitions, rows, width, values: torch.Tensor) -> bool:
    """Where the span forward (tensor-core sums over many partitions a program) beat the short design on the H200
    grids: bf16, at least 3 rows and 128 values (L x D) a partition, with span's own bucket of many short partitions.
    Measured: span ahead at L x D = 256 in every cell of B >= 16,384 in three grids (the fifteenth session's: 0.60-0.73x
    at L 16 D 16, L 4 D 64), behind at 64 (L 4 D 16); 128 is between, so that a mean length of 15.9 at D 16 (a grid
    point's random lengths) is not sent back to the short design as 256 did. Also narrow rows (D <= NARROW_WIDTH) past
    the short mean length, up to NARROW_MEAN_LENGTH, from NARROW_SPAN_MIN_PARTITIONS partitions: span forced there took
    0.72x (262,144 L 200 D 16) and 0.98x (16,384) of the tile kernel's time, and 1.9-2.9x at B 64 and 1,024 (fifteenth
    session, benchmarks/pooling_grid_h200.json). L = 1 stays with the short design, and fp32 too except at D 17-64 with
    a mean length of 8-32 over at least FP32_SPAN_MIN_PARTITIONS partitions (`_fp32_span_wins`)."""
    if not all(isinstance(size, int) for size in (partitions, rows, width)):
        return False
    if values.dtype == torch.float32:
        return _fp32_span_wins(partitions, rows, width)
    if values.dtype != torch.bfloat16:
        return False
    if rows < 3 * partitions or rows * width < SPAN_MIN_VALUES * partitions:
        return False
    return rows <= SHORT_MEAN_LENGTH * partitions or _narrow_long(partitions, rows, width)


def _fp32_span_wins(partitions, rows, width) -> bool:
    """The one fp32 cell of the fifteenth session's H200 grid where span's forward (three bf16 products) beat the short
    design the rule took: 262,144 L 16 D 64, 0.301 ms (span through the previous launch; 0.305 forced) against 0.368
    (segment_reduce 0.325). Every other fp32 cell up to SHORT_MEAN_LENGTH had the short design at least as fast: L 4 at
    that B and D (0.129 against 0.147), B 16,384 at L 16 D 64 (0.0258 against 0.0259), D 16 (0.127 against 0.267) and
    D 128 (0.549 against 0.596) at that B and L; so the bounds hold that cell alone among the grid's."""
    if not (NARROW_WIDTH < width <= FP32_SPAN_MAX_WIDTH and partitions >= FP32_SPAN_MIN_PARTITIONS):
        return False
    return FP32_SPAN_MIN_MEAN_LENGTH * partitions <= rows <= SHORT_MEAN_LENGTH * partitions


def _narrow_long(partitions, rows, width) -> bool:
    narrow = width <= NARROW_WIDTH and partitions >= NARROW_SPAN_MIN_PARTITIONS
    return narrow and SHORT_MEAN_LENGTH * partitions < rows <= NARROW_MEAN_LENGTH * partitions


def _span_forward_config(partitions, rows, width, values: torch.Tensor) -> dict | None:
    if not _span_forward_wins(partitions, rows, width, values):
        return None
    if _narrow_long(partitions, rows, width):  # outside span's own buckets: its launch for this mean length
        return _embedding_pool().span_config_at(partitions, rows, width, values.dtype, values.device)
    return _span_config(partitions, rows, width, values)


FORWARD_DESIGNS = ("short", "previous", "span", "narrow")  # `design` forced in the forward; None: the rule's
BACKWARD_DESIGNS = ("short", "previous", "flat")  # ... in the backward


def _check_design(design: str | None, designs: tuple[str, ...]) -> None:
    if design is not None and design not in designs:
        raise ValueError(f"design must be one of {designs} or None (the rule), got {design!r}")


def partitioned_mean_forward(
    values: torch.Tensor,
    offsets: torch.Tensor,
    config: dict | None = None,
    counters: torch.Tensor | None = None,
    design: str | None = None,
) -> torch.Tensor:
    """One launch; `counters` (int32, >= B * D-blocks, all zero; left zero) saves the clear when reused. `config`
    forces the tile kernel with that launch; `design` forces one: "short" (the short-partition design), "previous"
    (the launch as it was before it: span or tile), "span" (span at any shape), "narrow" (runs of partitions a lane,
    pooling_narrow_kernels.py, at any shape); None lets the rule decide."""
    _check(values, offsets)
    _check_design(design, FORWARD_DESIGNS)
    values = values.contiguous()
    offsets = _int_offsets(offsets)
    n, d = values.shape
    b = offsets.shape[0] - 1
    if b == 0 or n == 0:  # no partition, or every partition empty: zeros, no launch
        return values.new_zeros(b, d)
    narrow = design == "narrow" or (design is None and narrow_forward_wins(b, n, d, values.dtype))
    if narrow and config is None:
        return _narrow_forward(values, offsets, narrow_config(b, n, d, values.dtype, values.device))
    if design == "span" and config is None:
        span = _embedding_pool().span_config_at(b, n, d, values.dtype, values.device)
        return _embedding_pool().plain_mean_span_forward(values, offsets.to(torch.int64), span)
    force = design == "short" or (design is None and narrow_rows_take_short(b, n, d, values.dtype, backward=False))
    block = short_config(b, n, d, values.dtype, values.device, force=force) if config is None else None
    span = _span_forward_config(b, n, d, values) if config is None and design is None else None
    if block is not None and design != "previous" and span is None:  # short partitions: a block per program
        return _short_forward(values, offsets, block)
    offsets = offsets.to(torch.int64)
    span = span or (_span_config(b, n, d, values) if config is None else None)
    if span is not None:  # many short partitions: several per program (issue 13: 2.7-7x behind segment_reduce)
        return _embedding_pool().plain_mean_span_forward(values, offsets, span)
    pairs = _readable_in_pairs(values)
    cfg = {**FORWARD_DEFAULTS, **(config or launch_config(n, d, values.device, values.dtype, pairs=pairs))}
    cfg["PAIRS"] = cfg["PAIRS"] and pairs
    rows_per_program = cfg.pop("R")
    grid = (b + n // rows_per_program, _cdiv(d, cfg["BLOCK_D"]))
    out = values.new_empty(b, d)
    workspace = torch.empty(grid[0], d, dtype=torch.float32, device=values.device)
    if counters is None:
        counters = torch.zeros(b * grid[1], dtype=torch.int32, device=values.device)
    _kernels().partitioned_mean_fwd_kernel[grid](
        values, offsets, out, workspace, counters, b, d, rows_per_program, LOG_B=_log_b(b), **cfg
    )
    return out


def partitioned_mean_backward(
    grad_out: torch.Tensor, offsets: torch.Tensor, rows: int, config: dict | None = None, design: str | None = None
):
    """grad_values [rows, D]: grad_out[b] / len(b) on partition b's rows, zero on rows outside the partitions;
    `config` forces the tile kernel's launch, `design` one of BACKWARD_DESIGNS ("flat": rows in order, a span of
    partitions a program), None the rule."""
    _check_design(design, BACKWARD_DESIGNS)
    grad_out = grad_out.contiguous()
    offsets = _int_offsets(offsets)
    b, d = grad_out.shape
    if b == 0 or rows == 0:
        return grad_out.new_zeros(rows, d)
    flat = design == "flat" or (design is None and flat_backward_wins(b, rows, d, grad_out.dtype))
    if flat and config is None:
        return _flat_backward(grad_out, offsets, rows, flat_config(b, rows, d, grad_out.dtype, grad_out.device))
    force = design == "short" or (design is None and narrow_rows_take_short(b, rows, d, grad_out.dtype, backward=True))
    block = short_config(b, rows, d, grad_out.dtype, grad_out.device, force=force) if config is None else None
    if block is not None and design != "previous":
        return _short_backward(grad_out, offsets, rows, block)
    offsets = offsets.to(torch.int64)
    cfg = dict(config or launch_config(rows, d, grad_out.device, grad_out.dtype, backward=True))
    rows_per_program = cfg.pop("R")
    grad_values = grad_out.new_empty(rows, d)
    grid = (b + rows // rows_per_program, _cdiv(d, cfg["BLOCK_D"]))
    _kernels().partitioned_mean_bwd_kernel[grid](
        grad_out, offsets, grad_values, b, rows, d, rows_per_program, LOG_B=_log_b(b), **cfg
    )
    return grad_values


# --- the flat backward (pooling_flat_kernels.py): a span of PARTS partitions a program, its rows walked in order

FLAT_SPAN_ROWS = 512  # rows a program aims to own (PARTS x mean length)
FLAT_TILE_VALUES = 2048  # values a step stores (BLOCK_N x BLOCK_D): 8 a thread on 4 warps
FLAT_MAX_PARTS = 64  # the row-to-partition comparison is [BLOCK_N, PARTS]


def flat_config(partitions: int, rows: int, width: int, dtype: torch.dtype, device: torch.device) -> dict:
    """The flat backward's launch from the shape: PARTS (a power of two, 2-64) so a program owns about
    FLAT_SPAN_ROWS rows, halved until the launch has SHORT_MIN_PROGRAMS programs on a GPU; BLOCK_N rows of
    BLOCK_D columns a step, FLAT_TILE_VALUES values in all."""
    mean_length = max(rows / max(partitions, 1), 1.0)
    block_d = min(256, triton_next_power_of_2(width))
    parts = max(2, min(FLAT_MAX_PARTS, triton_next_power_of_2(math.ceil(FLAT_SPAN_ROWS / mean_length))))
    column_blocks = _cdiv(width, block_d)
    if device.type == "cuda":
        while parts > 2 and _cdiv(partitions, parts) * column_blocks < SHORT_MIN_PROGRAMS:
            parts //= 2
    block_n = max(16, FLAT_TILE_VALUES // block_d)
    config = {"PARTS": parts, "BLOCK_N": block_n, "BLOCK_D": block_d, "TAIL_N": block_n}
    if device.type == "cuda":
        config["num_warps"] = 4
    return config


def flat_backward_wins(partitions, rows, width, dtype: torch.dtype) -> bool:
    """Where the flat backward beat the rule's design on the H200 grid (fifteenth session, every cell up to mean
    length 200 timed both ways): 0.39-0.70x at 16-bit, B >= 16,384, L 4-16, D 64-1,024; 0.8-0.9x at D 16 from L 16.
    Judged on its GPU launch (whatever this host): at least SHORT_MIN_PROGRAMS programs over the partitions (B <=
    1,024: 1.1-3.3x slower, a long partition's rows in one program), at most BLOCK_D partitions a program (the
    row-to-partition comparison costs PARTS / BLOCK_D a value: 2.2-2.5x slower at D 16 with 64), at least half a row
    tile a program (8 rows a program at L 1 with 128-row tiles: 2.1-2.6x slower), fp32 only up to D 64 (0.84-1.09x
    above it), mean length up to NARROW_MEAN_LENGTH (measured to 200)."""
    if not all(isinstance(size, int) for size in (partitions, rows, width)) or partitions == 0:
        return False
    if rows > NARROW_MEAN_LENGTH * partitions or (dtype == torch.float32 and width > 64):
        return False
    config = flat_config(partitions, rows, width, dtype, torch.device("cuda"))
    enough = _cdiv(partitions, config["PARTS"]) >= SHORT_MIN_PROGRAMS and config["PARTS"] <= config["BLOCK_D"]
    return enough and 2 * config["PARTS"] * rows >= config["BLOCK_N"] * partitions


def _flat_backward(grad_out: torch.Tensor, offsets: torch.Tensor, rows: int, config: dict) -> torch.Tensor:
    from . import pooling_flat_kernels

    b, d = grad_out.shape
    grad_values = grad_out.new_empty(rows, d)
    grid = (_cdiv(b, config["PARTS"]), _cdiv(d, config["BLOCK_D"]))
    pooling_flat_kernels.flat_mean_bwd_kernel[grid](grad_out, offsets, grad_values, b, rows, d, **config)
    return grad_values


# --- the short-partition design (pooling_short_kernels.py): a block of PARTS partitions x BLOCK_D columns a program

SHORT_MEAN_LENGTH = 32  # up to this mean length N / B the short design; above it the tile kernel (or span)
SHORT_CAP = 128  # rows the block loop walks at most; a longer partition's rest is summed in row tiles after it
SHORT_STEP_BYTES = 4096  # bytes a program loads per step (PARTS x BLOCK_D x UNROLL values), 8 values a thread,
# each with its own 64-bit address (at 16 KB on 4 warps, [64, 128] bf16 spilled 77 KB; at 4 KB on 4 warps bf16 took
# 142 registers, on 8 warps 78: sm_90 ptxas -v, benchmarks/NOTES.md twelfth session)
SHORT_MIN_PROGRAMS = 2048  # fewer partitions per program until the launch has this many (16 per H200 SM)
SHORT_MAX_UNROLL = 16  # rows of each partition a step loads: about 2 steps at uniform lengths [0, 2L], L <= 16
SHORT_MAX_PARTS = 64  # [128, 16] bf16 spilled (sm_90 ptxas -v); more partitions a program, more per-row state


NARROW_WIDTH = 16  # columns: at most this, the backward takes the short design past SHORT_MEAN_LENGTH too
NARROW_MEAN_LENGTH = 256  # ... up to this mean length (measured at 200)
NARROW_MIN_PARTITIONS = 64  # ... from this many partitions (at B = 1 the tile kernel's backward was faster)


def narrow_rows_take_short(partitions, rows, width, dtype: torch.dtype, backward: bool) -> bool:
    """Narrow rows past the short mean length: on the H200 grid (fourteenth session, benchmarks/pooling_grid_h200.json)
    the short design's backward took 0.38-0.92x of the tile kernel's time in each of the 8 cells with D 16, mean length
    200 and B 64 to 262,144 (fp32 and bf16), where a tile program holds only 16 columns, and its fp32 forward
    0.77-0.90x in the 4 fp32 ones. Its bf16 forward was mixed (0.63-1.15x; the tile kernel reads 16-bit values in
    pairs, perhaps why), so a 16-bit forward keeps its rule; at D >= 64 neither pass was faster."""
    if not backward and dtype != torch.float32:
        return False
    if not all(isinstance(size, int) for size in (partitions, rows, width)):
        return False
    narrow = width <= NARROW_WIDTH and partitions >= NARROW_MIN_PARTITIONS
    return narrow and SHORT_MEAN_LENGTH * partitions < rows <= NARROW_MEAN_LENGTH * partitions


def short_config(partitions, rows, width, dtype: torch.dtype, device: torch.device, force: bool = False) -> dict | None:
    """The short design's launch from the shape alone, or None where the mean length N / B exceeds
    SHORT_MEAN_LENGTH (unless `force`). UNROLL follows the mean length (1 row per step at L = 1, up to 16, so a
    block's loop takes about two steps), PARTS fills the rest of SHORT_STEP_BYTES per step (64 partitions of
    D = 16 fp32 at L = 1) and halves until the launch has SHORT_MIN_PROGRAMS programs (few partitions, or wide rows
    split over column blocks), num_warps the step's values (256 a warp, up to 8: a [1, 16] block is one warp).
    Sizes must be numbers: under a trace with symbolic sizes the comparisons would add guards, so there the
    previous launch stands."""
    if not all(isinstance(size, int) for size in (partitions, rows, width)) or partitions == 0:
        return None
    if rows > SHORT_MEAN_LENGTH * partitions and not force:
        return None
    mean_length = max(rows / partitions, 1.0)
    itemsize = dtype.itemsize
    block_d = min(256, triton_next_power_of_2(width))
    step = SHORT_STEP_BYTES // itemsize  # values per step
    unroll = min(SHORT_MAX_UNROLL, triton_next_power_of_2(math.ceil(mean_length)), max(1, step // block_d))
    parts = max(1, min(SHORT_MAX_PARTS, step // (block_d * unroll)))
    column_blocks = _cdiv(width, block_d)
    if device.type == "cuda":  # the interpreter prefers few, large programs
        while parts > 1 and _cdiv(partitions, parts) * column_blocks < SHORT_MIN_PROGRAMS:
            parts //= 2
    warps = max(1, min(8, parts * block_d * unroll // 256))
    # a long partition's row tiles: about 8 values a thread (the block's registers are free by then)
    tail_rows = max(1, warps * 256 // block_d)
    config = {"PARTS": parts, "BLOCK_D": block_d, "UNROLL": unroll, "CAP": SHORT_CAP, "TAIL_N": tail_rows}
    if device.type == "cuda":
        config["num_warps"] = warps
    return config


# --- the narrow forward (pooling_narrow_kernels.py): a lane walks the rows of K consecutive partitions in order

NARROW_LANE_VALUES = 512  # (lane row, column) lanes a program holds: LANES x BLOCK_D, 16 bytes a thread
NARROW_RUN_ROWS = 64  # rows a lane row aims to walk: K partitions of the mean length, K up to NARROW_MAX_K
NARROW_MAX_K = 4  # the kernel holds K accumulators a lane (K is 1, 2 or 4)
NARROW_MAX_BLOCK_D = 64  # columns a program; wider rows split over column blocks
NARROW_RUN_STEPS = 2  # steps a run of the mean length takes: UNROLL = run / this, a power of two ...
NARROW_MAX_UNROLL = 8  # ... up to this (a 16-byte load a row: 4 registers each)


NARROW_FORWARD = False  # the rule's switch: off until a GPU grid has timed the narrow forward (NARROW_REPORT.md)
NARROW_FORWARD_MAX_WIDTH = 16  # where the rule would take it: D up to this ...
NARROW_FORWARD_MIN_PARTITIONS = 16384  # ... from this many partitions ...
NARROW_FORWARD_MEAN_LENGTHS = (8, 32)  # ... mean length N / B from the first up to the second (inclusive)


def narrow_forward_wins(partitions, rows, width, dtype: torch.dtype) -> bool:
    """Where the rule takes the narrow forward (before span and the short design): nowhere while NARROW_FORWARD is
    off; on, at D <= NARROW_FORWARD_MAX_WIDTH, B >= NARROW_FORWARD_MIN_PARTITIONS and a mean length within
    NARROW_FORWARD_MEAN_LENGTHS, any dtype. The bounds are the proposal for the cells segment_reduce still won on the
    H200 (fifteenth session: B 16,384 and 262,144, L 16, D 16), to be set from the grid that times it."""
    if not NARROW_FORWARD or not all(isinstance(size, int) for size in (partitions, rows, width)):
        return False
    low, high = NARROW_FORWARD_MEAN_LENGTHS
    shape = width <= NARROW_FORWARD_MAX_WIDTH and partitions >= NARROW_FORWARD_MIN_PARTITIONS
    return shape and low * partitions <= rows <= high * partitions


def narrow_config(partitions: int, rows: int, width: int, dtype: torch.dtype, device: torch.device) -> dict:
    """The narrow forward's launch from the shape. K (1, 2 or 4) partitions a lane row, so that a run is about
    NARROW_RUN_ROWS rows (runs of several partitions are closer in length to each other than single partitions, so
    fewer of a program's row slots go unused); LANES lane rows of BLOCK_D columns (NARROW_LANE_VALUES lanes). On a GPU
    with few partitions, K is halved first (a shorter run is fewer dependent steps: that launch waits on latency, not
    bandwidth), then LANES, down to one warp of 16-byte loads, until the launch has SHORT_MIN_PROGRAMS programs.
    UNROLL rows a step so that a run of the mean length takes about NARROW_RUN_STEPS steps; num_warps for 16 bytes a
    thread."""
    mean_length = max(rows / max(partitions, 1), 1.0)
    block_d = min(NARROW_MAX_BLOCK_D, triton_next_power_of_2(width))
    k = max(1, min(NARROW_MAX_K, triton_next_power_of_2(math.ceil(NARROW_RUN_ROWS / mean_length))))
    lanes = max(1, NARROW_LANE_VALUES // block_d)
    one_warp = max(1, 32 * 16 // (dtype.itemsize * block_d))  # lane rows a warp of 16-byte loads holds
    column_blocks = _cdiv(width, block_d)
    if device.type == "cuda":  # the interpreter prefers few, large programs
        while k > 1 and _cdiv(partitions, lanes * k) * column_blocks < SHORT_MIN_PROGRAMS:
            k //= 2
        while lanes > one_warp and _cdiv(partitions, lanes * k) * column_blocks < SHORT_MIN_PROGRAMS:
            lanes //= 2
    unroll = min(NARROW_MAX_UNROLL, triton_next_power_of_2(math.ceil(k * mean_length / NARROW_RUN_STEPS)))
    config = {"LANES": lanes, "K": k, "BLOCK_D": block_d, "UNROLL": unroll}
    if device.type == "cuda":
        config["num_warps"] = max(1, min(8, lanes * block_d * dtype.itemsize // (16 * 32)))
    return config


def _int_offsets(offsets: torch.Tensor) -> torch.Tensor:
    """int32 and int64 offsets as they are (the short kernels read either); other integer dtypes as int64."""
    offsets = offsets if offsets.dtype in (torch.int32, torch.int64) else offsets.to(torch.int64)
    return offsets.contiguous()


def _short_grid(config: dict, partitions: int, width: int) -> tuple[int, int]:
    return (_cdiv(partitions, config["PARTS"]), _cdiv(width, config["BLOCK_D"]))


def _short_kernels():
    from . import pooling_short_kernels

    return pooling_short_kernels


def _short_forward(values: torch.Tensor, offsets: torch.Tensor, config: dict) -> torch.Tensor:
    b, d = offsets.shape[0] - 1, values.shape[1]
    out = values.new_empty(b, d)
    _short_kernels().short_mean_fwd_kernel[_short_grid(config, b, d)](values, offsets, out, b, d, **config)
    return out


def _narrow_forward(values: torch.Tensor, offsets: torch.Tensor, config: dict) -> torch.Tensor:
    from . import pooling_narrow_kernels

    b, d = offsets.shape[0] - 1, values.shape[1]
    out = values.new_empty(b, d)
    grid = (_cdiv(b, config["LANES"] * config["K"]), _cdiv(d, config["BLOCK_D"]))
    pooling_narrow_kernels.narrow_mean_fwd_kernel[grid](values, offsets, out, b, d, **config)
    return out


def _short_backward(grad_out: torch.Tensor, offsets: torch.Tensor, rows: int, config: dict) -> torch.Tensor:
    b, d = grad_out.shape
    grad_values = grad_out.new_empty(rows, d)
    _short_kernels().short_mean_bwd_kernel[_short_grid(config, b, d)](
        grad_out, offsets, grad_values, b, rows, d, **config
    )
    return grad_values


def _tables(tensors: list[torch.Tensor], device) -> torch.Tensor:
    return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64, device=device)


def _prefix(counts: list[int]) -> list[int]:
    out = [0]
    for count in counts:
        out.append(out[-1] + count)
    return out


def _grouped_plan(rows: list[int], widths: list[int], partitions: list[int], device, dtype, backward=False):
    """(config, rows per program, program base per feature, grid, [B, N, D, first counter] per feature)."""
    cfg = launch_config(max(rows), max(widths), device, dtype, backward)
    cfg.pop("PAIRS", None)  # the grouped kernel reads row tiles: a feature's D may be odd
    rows_per_program = cfg.pop("R")
    tile_base = _prefix([b + n // rows_per_program for b, n in zip(partitions, rows, strict=True)])
    counter_base = _prefix(partitions)
    shapes = [v for quad in zip(partitions, rows, widths, counter_base, strict=False) for v in quad]
    grid = (tile_base[-1], _cdiv(max(widths), cfg["BLOCK_D"]))
    tables = (torch.tensor(tile_base, dtype=torch.int64, device=device),)
    tables += (torch.tensor(shapes, dtype=torch.int64, device=device),)
    return cfg, rows_per_program, grid, tables


def grouped_partitioned_mean_forward(values: list[torch.Tensor], offsets: list[torch.Tensor]) -> list[torch.Tensor]:
    torch._check(len(values) == len(offsets) and len(values) > 0, lambda: "one offsets tensor per feature")
    dtype = values[0].dtype
    for v, o in zip(values, offsets, strict=False):
        _check(v, o)
        torch._check(v.dtype == dtype, lambda: "every feature of one group shares a dtype")
    device = values[0].device
    values = [v.contiguous() for v in values]
    offsets = [o.to(torch.int64).contiguous() for o in offsets]
    widths = [v.shape[1] for v in values]
    partitions = [o.shape[0] - 1 for o in offsets]
    cfg, rows_per_program, grid, (tile_base, shapes) = _grouped_plan(
        [v.shape[0] for v in values], widths, partitions, device, dtype
    )
    # separate buffers: a custom op's outputs must not alias each other
    outs = [torch.empty(b, d, dtype=dtype, device=device) for b, d in zip(partitions, widths, strict=False)]
    workspace = torch.empty(grid[0], max(widths), dtype=torch.float32, device=device)
    counters = torch.zeros(sum(partitions) * grid[1], dtype=torch.int32, device=device)
    _kernels().grouped_partitioned_mean_fwd_kernel[grid](
        _tables(values, device),
        _tables(offsets, device),
        _tables(outs, device),
        shapes,
        tile_base,
        workspace,
        counters,
        max(widths),
        F=len(values),
        ELEM=_triton_dtype(dtype),
        LOG_B=_log_b(max(partitions)),
        R=rows_per_program,
        **cfg,
    )
    return outs


def grouped_partitioned_mean_backward(grads: list[torch.Tensor], offsets: list[torch.Tensor], rows: list[int]):
    device = grads[0].device
    grads = [g.contiguous() for g in grads]
    offsets = [o.to(torch.int64).contiguous() for o in offsets]
    widths = [g.shape[1] for g in grads]
    partitions = [g.shape[0] for g in grads]
    cfg, rows_per_program, grid, (tile_base, shapes) = _grouped_plan(
        rows, widths, partitions, device, grads[0].dtype, backward=True
    )
    grad_values = [
        torch.empty(n, d, dtype=g.dtype, device=device) for n, d, g in zip(rows, widths, grads, strict=False)
    ]
    _kernels().grouped_partitioned_mean_bwd_kernel[grid](
        _tables(grads, device),
        _tables(offsets, device),
        _tables(grad_values, device),
        shapes,
        tile_base,
        F=len(grads),
        ELEM=_triton_dtype(grads[0].dtype),
        LOG_B=_log_b(max(partitions)),
        R=rows_per_program,
        **cfg,
    )
    return grad_values


def _triton_dtype(dtype: torch.dtype):
    import triton.language as tl

    return {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}[dtype]


# --- opaque custom ops: what torch.compile sees (fake = shapes only), differentiable via register_autograd ---


@torch.library.custom_op("liger_fuse::partitioned_mean", mutates_args=())
def partitioned_mean_op(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """What the pass calls: offsets within [0, N], never decreasing (rows outside them belong to no partition)."""
    check_offsets(values, offsets, on_device=True)
    return partitioned_mean_forward(values, offsets)


@partitioned_mean_op.register_fake
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


partitioned_mean_op.register_autograd(_backward, setup_context=_setup_context)


def partitioned_mean(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """The eager entry point: out[b] = mean of values[offsets[b]:offsets[b+1]] (zeros for an empty partition).

    values [N, D] fp32 / bf16 / fp16 (accumulated in fp32, returned in its own dtype); offsets [B+1], integer, from
    0 to N, never decreasing: anything else is refused with the reason. B = 0 or N = 0 gives zeros [B, D], which
    still carry a grad_fn when values require grad."""
    check_offsets(values, offsets, whole=True)
    return partitioned_mean_op(values, offsets)


@torch.library.custom_op("liger_fuse::grouped_partitioned_mean", mutates_args=())
def grouped_partitioned_mean(values: list[torch.Tensor], offsets: list[torch.Tensor]) -> list[torch.Tensor]:
    for feature_values, feature_offsets in zip(values, offsets, strict=True):
        check_offsets(feature_values, feature_offsets, whole=True, on_device=True)
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
    if len(bounds) < 2:
        return values.new_zeros(0, values.shape[1])
    rows = [values[s:e].float().sum(0) / max(e - s, 1) for s, e in zip(bounds[:-1], bounds[1:], strict=False)]
    return torch.stack(rows).to(values.dtype)
