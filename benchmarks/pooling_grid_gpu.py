"""Pooling on the GPU (issue 13): the fused gather + mean pool against its alternatives, and our partitioned mean over
a shape grid. One process, about 300 s on an H200 with every section:

    python -m benchmarks.pooling_grid_gpu --out DIR [--write-launch] [--budget-s 280] [--sections ...]

`--sections short_correctness skew grid --graph-ms 5` (about 210 s) is the short-partition run of issue 13: the
partitioned mean's launch rule ("ours": the short design at mean length <= pooling.SHORT_MEAN_LENGTH, the previous
launch above) beside the previous launch alone ("previous": tile kernel, span at B >= 4096 short), the short design
forced where the rule does not take it ("short", at mean length 200), segment_reduce, index_add and embedding_bag,
at every cell; `skew` times a few short-mean cells with one long partition (the short design's weak case). The forced
designs `flat` (span forward, flat backward) and `narrow` (the narrow forward, the rule's backward) are timed up to mean
length 200 too. `--b`, `--lengths` and `--d` restrict the grid to those cells, e.g. the narrow rows' losses:

    python -m benchmarks.pooling_grid_gpu --out DIR --sections short_correctness grid --graph-ms 5 \
        --b 16384 262144 --lengths 4 16 --d 16 64

1. correctness: the fused kernel against nn.EmbeddingBag(mode="mean") (float64 reference), forward and table grad;
2. launch tuning: per shape bucket the recsys shapes hit, candidate launches timed forward + backward; the best goes
   to DIR/embedding_pool_launch.json (with --write-launch also over pipelines/fuse/runtime/embedding_pool_launch.json);
3. recsys shapes (V=200k; D 64/128/256; B 1024/16384/262144; mean length 4/16/200): forward and forward + backward
   of fused, embedding + our partitioned mean, EmbeddingBag, embedding + segment_reduce, embedding + index_add;
4. skew and grid: our partitioned mean (rule, previous launch, short design forced) against segment_reduce, index_add and
   embedding_bag, B x mean length x D x fp32/bf16 where the values fit in 4 GB, with % of the larger of copy and read bandwidth for cells
   moving over 64 MB; cells past the time budget are listed as skipped; win counts per design and mean length.

Timing: CUDA graphs (pipelines/graph_timing.py), host-timed events where capture fails (the method is recorded).
The kernels are called without the entry points' offset checks (a host sync each call, which a graph cannot hold).
Writes DIR/pooling_grid.json and DIR/pooling_grid.md. Imports torch, triton and this repo's runtime only.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

from pipelines import graph_timing
from pipelines.fuse.runtime import embedding_pool
from pipelines.fuse.runtime import pooling

VOCAB = 200_000
VALUES_LIMIT = 4 << 30  # bytes of [N, D] values a cell may hold
BANDWIDTH_BYTES = 64 << 20  # cells moving more than this get a % of the bandwidth ceiling
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
ALL_DTYPES = {**DTYPES, "fp16": torch.float16}
SECTIONS = ("correctness", "short_correctness", "tuning", "bandwidth", "recsys", "skew", "grid")
PADDED_SECTIONS = ("padded_correctness", "padded")  # only when asked: --sections padded_correctness padded
RECSYS = [(b, length, d) for d in (64, 128, 256) for b in (1024, 16384, 262144) for length in (4, 16, 200)]
GRID_B = (1, 64, 1024, 16384, 262144)
GRID_LENGTH = (1, 4, 16, 200, 2000)
GRID_D = (16, 64, 128, 256, 1024)
DEVICE = "cuda"  # the CPU test of the designs' correctness and a grid row sets "cpu" (the interpreter)
BASELINES = ("segment_reduce", "index_add", "embedding_bag")
DESIGNS = ("ours", "previous", "short", "flat", "narrow")  # the rule; the launch before the short design; forced ones
FORCED = {  # design: (forward design, backward design) as pooling names them; None: the rule's
    "ours": (None, None),
    "previous": ("previous", "previous"),
    "short": ("short", "short"),
    "flat": ("span", "flat"),
    "narrow": ("narrow", None),  # the narrow forward (no backward of its own): full = narrow forward + rule's backward
}


class Clock:
    def __init__(self, budget_s: float):
        self.start, self.budget_s = time.monotonic(), budget_s

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.start)


def batch(partitions: int, mean_length: int, vocab: int, seed: int = 0):
    """Lengths uniform in [0, 2 * mean] (so some partitions are empty), ids uniform over the table."""
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    lengths = torch.randint(0, 2 * mean_length + 1, (partitions,), device=DEVICE, generator=g)
    offsets = torch.zeros(partitions + 1, dtype=torch.int64, device=DEVICE)
    offsets[1:] = lengths.cumsum(0)
    rows = int(offsets[-1])
    ids = torch.randint(0, vocab, (rows,), device=DEVICE, generator=g)
    return ids, offsets, lengths


class OurPool(torch.autograd.Function):
    """Our partitioned mean without the entry point's checks (graph-capturable); each pass's design as in
    pooling.partitioned_mean_forward / _backward (None: the rule; "previous", "short", "span", "flat": forced)."""

    @staticmethod
    def forward(ctx, values, offsets, forward_design=None, backward_design=None):
        ctx.save_for_backward(offsets)
        ctx.rows, ctx.design = values.shape[0], backward_design
        return pooling.partitioned_mean_forward(values, offsets, design=forward_design)

    @staticmethod
    def backward(ctx, grad_out):
        (offsets,) = ctx.saved_tensors
        return pooling.partitioned_mean_backward(grad_out, offsets, ctx.rows, design=ctx.design), None, None, None


def fused(table, ids, offsets, owner, counts):
    return embedding_pool.EmbeddingPartitionedMean.apply(table, ids, offsets)


def embedding_then_ours(table, ids, offsets, owner, counts):
    return OurPool.apply(F.embedding(ids, table), offsets)


def embedding_bag(table, ids, offsets, owner, counts):
    return F.embedding_bag(ids, table, offsets, mode="mean", include_last_offset=True)


def embedding_then_segment_reduce(table, ids, offsets, owner, counts):
    return torch.segment_reduce(F.embedding(ids, table), "mean", offsets=offsets, unsafe=True)


def embedding_then_index_add(table, ids, offsets, owner, counts):
    rows = F.embedding(ids, table)
    total = rows.new_zeros(counts.shape[0], rows.shape[1]).index_add(0, owner, rows)
    return total / counts.unsqueeze(1)


RECSYS_VARIANTS = {
    "fused": fused,
    "embedding+ours": embedding_then_ours,
    "embedding_bag": embedding_bag,
    "embedding+segment_reduce": embedding_then_segment_reduce,
    "embedding+index_add": embedding_then_index_add,
}


def pool_ours(values, offsets, owner, counts, rows):
    return OurPool.apply(values, offsets)


def pool_forced(design: str):
    """Our partitioned mean with each pass's design forced as FORCED names it ("flat": the span forward, fp32 in
    three bf16 products, and the flat backward, at any shape; "narrow": the narrow forward, the rule's backward)."""
    return lambda values, offsets, owner, counts, rows: OurPool.apply(values, offsets, *FORCED[design])


def pool_segment_reduce(values, offsets, owner, counts, rows):
    return torch.segment_reduce(values, "mean", offsets=offsets, unsafe=True)


def pool_index_add(values, offsets, owner, counts, rows):
    return values.new_zeros(counts.shape[0], values.shape[1]).index_add(0, owner, values) / counts.unsqueeze(1)


def pool_embedding_bag(values, offsets, owner, counts, rows):
    return F.embedding_bag(rows, values, offsets, mode="mean", include_last_offset=True)


GRID_VARIANTS = {
    "ours": pool_ours,
    **{design: pool_forced(design) for design in DESIGNS[1:]},
    "segment_reduce": pool_segment_reduce,
    "index_add": pool_index_add,
    "embedding_bag": pool_embedding_bag,
}


def rule_takes_short(b: int, n: int, d: int, dtype: torch.dtype) -> tuple[bool, bool]:
    """(forward, backward): whether the rule takes the short design in each pass."""
    short = pooling.short_config(b, n, d, dtype, torch.device("cuda")) is not None
    forward = short or pooling.narrow_rows_take_short(b, n, d, dtype, backward=False)
    return forward, short or pooling.narrow_rows_take_short(b, n, d, dtype, backward=True)


def grid_variants(b: int, n: int, length: int, d: int, dtype: torch.dtype) -> dict:
    """{name: fn or the reason it is not timed}: "previous" only where the rule took the short design in a pass
    (elsewhere it is the rule's own launch), "short" forced only where the rule did not take it in both passes, up to
    mean length 200."""
    forward_short, backward_short = rule_takes_short(b, n, d, dtype)
    variants = dict(GRID_VARIANTS)
    if not forward_short and not backward_short:
        variants["previous"] = "same launch as ours"
    if forward_short and backward_short:
        variants["short"] = "same launch as ours"
    elif length > 200:
        variants["short"] = "not timed above mean length 200"
    if length > 200:
        variants["flat"] = variants["narrow"] = "not timed above mean length 200"
    return variants


def events_ms(fn, calls: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls


def time_pass(call, leaf, backward: bool, label: str) -> tuple[float, str]:
    """(ms, method) of one forward, or forward + backward with a fixed upstream gradient."""

    def make_call():
        grad = None

        def run():
            nonlocal grad
            out = call()
            if backward:
                grad = torch.ones_like(out) if grad is None else grad
                out.backward(grad)

        return run

    def fallback():
        run = make_call()
        return events_ms(lambda: (setattr(leaf, "grad", None), run())), "events"

    return graph_timing.timed(lambda: graph_timing.graph_ms(make_call, [leaf]), fallback, label, leaves=[leaf])


def rel_err(out, ref) -> float:
    return float((out.double() - ref).abs().max() / ref.abs().max().clamp(min=1e-12))


def correctness(clock: Clock) -> list[dict]:
    rows = []
    for (b, length, d), name in [((1024, 16, 128), "fp32"), ((16384, 4, 64), "bf16"), ((64, 2000, 256), "fp32")]:
        for dtype_name in ("fp32", "bf16") if name == "fp32" else (name,):
            dtype = DTYPES[dtype_name]
            ids, offsets, _ = batch(b, length, VOCAB)
            table = (torch.randn(VOCAB, d, device="cuda") * 0.1).to(dtype).requires_grad_()
            exact = table.detach().double().requires_grad_()
            out = embedding_pool.embedding_partitioned_mean(table, ids, offsets, check_ids=True)
            ref = F.embedding_bag(ids, exact, offsets, mode="mean", include_last_offset=True)
            grad = torch.randn_like(out)
            out.backward(grad)
            ref.backward(grad.double())
            tol = 1e-5 if dtype == torch.float32 else 2e-2
            forward, backward = rel_err(out, ref.detach()), rel_err(table.grad, exact.grad)
            # the plain partitioned mean of the gathered rows: B >= 4096 short partitions take its span route
            plain = rel_err(pooling.partitioned_mean(F.embedding(ids, table.detach()), offsets), ref.detach())
            rows.append(
                {
                    "B": b,
                    "mean_length": length,
                    "D": d,
                    "dtype": dtype_name,
                    "forward_rel_err": forward,
                    "backward_rel_err": backward,
                    "plain_mean_rel_err": plain,
                    "ok": forward < tol and backward < tol and plain < tol,
                }
            )
            print("correctness", rows[-1], flush=True)
    return rows


SHORT_CASES = [  # (B, mean length, D, a partition past SHORT_CAP, int32 offsets)
    (262144, 1, 16, False, False),
    (16384, 4, 64, True, True),
    (1024, 16, 1024, False, False),
    (3, 1, 100, False, True),
    (1, 200, 256, True, False),
]


def short_correctness(clock: Clock) -> list[dict]:
    """The plain partitioned mean of each design against a float64 reference (index_add), every dtype, forward
    and the values' gradient; lengths uniform in [0, 2 * mean] (empty partitions), some with a long partition."""
    rows = []
    for b, length, d, long_one, int32 in SHORT_CASES:
        for dtype_name, dtype in ALL_DTYPES.items():
            _, offsets, lengths = batch(b, length, 1)
            if long_one:
                lengths[b // 2] = 3 * pooling.SHORT_CAP + 7
                offsets[1:] = lengths.cumsum(0)
            n = int(offsets[-1])
            offsets = offsets.to(torch.int32) if int32 else offsets
            values = torch.randn(n, d, device=DEVICE).to(dtype)
            owner = torch.repeat_interleave(torch.arange(b, device=DEVICE), lengths, output_size=n)
            counts = lengths.clamp(min=1).double().unsqueeze(1)
            exact = values.double().requires_grad_()
            ref = exact.new_zeros(b, d).index_add(0, owner, exact) / counts
            grad = torch.randn(b, d, device=DEVICE).to(dtype)
            ref.backward(grad.double())
            row = {"B": b, "mean_length": length, "D": d, "dtype": dtype_name, "long": long_one, "int32": int32}
            for design in DESIGNS:
                leaf = values.clone().requires_grad_()
                out = OurPool.apply(leaf, offsets, *FORCED[design])
                out.backward(grad)
                tol = 1e-5 if dtype == torch.float32 else 2e-2
                forward, backward = rel_err(out.detach(), ref.detach()), rel_err(leaf.grad, exact.grad)
                ok = forward < tol and backward < tol and out.dtype == dtype and leaf.grad.dtype == dtype
                row[design] = {"forward_rel_err": forward, "backward_rel_err": backward, "ok": ok}
            row["ok"] = all(row[design]["ok"] for design in DESIGNS)
            rows.append(row)
            print("short correctness", row, flush=True)
    return rows


def candidates(bucket: str) -> list[dict]:
    """A few launches of the rule's design (each candidate compiles two kernels, ~1 s) and the other design's rule."""
    width = {"D64": 64, "D128": 128, "D256": 256, "Dwide": 1024}[bucket.split("/")[2]]
    rule = embedding_pool.rule_config(bucket)
    if rule["kernel"] == "span":
        own = [
            {"kernel": "span", "PARTS": p, "BLOCK_N": n, "BLOCK_D": min(128, width), "num_warps": 4}
            for p in (16, 32, 64)
            for n in (64, 128)
        ]
        other = {"kernel": "loop", "BLOCK_N": 32, "BLOCK_D": min(256, width), "num_warps": 4}
    else:
        own = [
            {"kernel": "loop", "BLOCK_N": n, "BLOCK_D": min(256, width), "num_warps": w}
            for n in (32, 64)
            for w in (4, 8)
        ]
        other = {"kernel": "span", "PARTS": 16, "BLOCK_N": 128, "BLOCK_D": min(128, width), "num_warps": 4}
    return own + [other]


def tune(clock: Clock, budget_s: float) -> tuple[dict, list[dict]]:
    """Per bucket of the recsys shapes, each candidate's forward + backward (events, ms); the best is kept."""
    table_out = embedding_pool.load_launch_table()
    rows, stop_at = [], clock.left() - budget_s
    seen = set()
    for (b, length, d), dtype_name in [(shape, t) for shape in RECSYS for t in DTYPES]:
        dtype = DTYPES[dtype_name]
        bucket = embedding_pool.launch_bucket(b, b * length, d, dtype)
        if bucket in seen:
            continue
        seen.add(bucket)
        if clock.left() < stop_at:
            rows.append({"bucket": bucket, "skipped": "tuning budget spent (the rule's launch stays)"})
            continue
        best, row = tune_bucket(bucket, b, length, d, dtype)
        table_out[bucket] = best
        rows.append(row)
        print("tune", rows[-1], flush=True)
    return table_out, rows


def tune_bucket(bucket: str, b: int, length: int, d: int, dtype: torch.dtype) -> tuple[dict, dict]:
    ids, offsets, _ = batch(b, length, VOCAB)
    table = torch.randn(VOCAB, d, device="cuda").to(dtype)
    grad = torch.ones(b, d, device="cuda", dtype=dtype)
    timings = []
    for config in candidates(bucket):
        try:
            ms = events_ms(lambda c=config: step(table, ids, offsets, grad, c), calls=10)
        except Exception as exc:  # a launch that does not fit (shared memory, registers)
            print(f"tune {bucket} {config}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        timings.append((ms, config))
    rule = embedding_pool.rule_config(bucket)
    rule_ms = events_ms(lambda: step(table, ids, offsets, grad, rule), calls=10)
    best_ms, best = min(timings, key=lambda t: t[0])
    return best, {"bucket": bucket, "shape": [b, length, d], "rule_ms": rule_ms, "best_ms": best_ms, "best": best}


def launch_for(config: dict, width: int) -> dict:
    fitted = dict(config)
    fitted["BLOCK_D"] = max(16, min(fitted["BLOCK_D"], 1 << (width - 1).bit_length()))
    return fitted


def step(table, ids, offsets, grad, config):
    config = launch_for(config, table.shape[1])
    embedding_pool.embedding_mean_forward(table, ids, offsets, config)
    embedding_pool.embedding_mean_backward(grad, ids, offsets, table.shape[0], table.dtype, config)


def bandwidth_ceilings_gbs() -> dict:
    """The two ceilings a pooling kernel can be held to: a 1 GiB copy (read + write counted) and a 1 GiB sum
    (read only). A forward reads [N, D] and writes [B, D], so it runs nearer the read ceiling than the copy's:
    against the copy alone it showed 137% (twelfth session). The bar uses the larger of the two."""
    src = torch.empty(1 << 28, dtype=torch.float32, device="cuda")  # 1 GiB
    dst = torch.empty_like(src)
    total = torch.empty((), dtype=torch.float32, device="cuda")
    copy_ms, _ = graph_timing.timed(
        lambda: graph_timing.graph_ms(lambda: lambda: dst.copy_(src), []),
        lambda: (events_ms(lambda: dst.copy_(src)), "events"),
        "copy",
    )
    read_ms, _ = graph_timing.timed(
        lambda: graph_timing.graph_ms(lambda: lambda: torch.sum(src, dim=0, out=total), []),
        lambda: (events_ms(lambda: torch.sum(src, dim=0, out=total)), "events"),
        "read",
    )
    ceilings = {"copy": 2 * src.numel() * 4 / copy_ms / 1e6, "read": src.numel() * 4 / read_ms / 1e6}
    return {**ceilings, "ceiling": max(ceilings.values())}


def operands(b, length, d, dtype, vocab, long_rows: int = 0):
    """(ids, offsets, owner, counts); `long_rows` makes partition B // 2 that long (the ids then stay unset)."""
    ids, offsets, lengths = batch(b, length, vocab)
    if long_rows:
        lengths[b // 2] = long_rows
        offsets[1:] = lengths.cumsum(0)
    owner = torch.repeat_interleave(torch.arange(b, device=DEVICE), lengths, output_size=int(offsets[-1]))
    counts = lengths.clamp(min=1).to(dtype)
    return ids, offsets, owner, counts


def recsys(clock: Clock, stop_left: float) -> tuple[list[dict], list[str]]:
    rows, skipped = [], []
    for (b, length, d), dtype_name in [(shape, t) for t in DTYPES for shape in RECSYS]:
        label = f"B={b} L={length} D={d} {dtype_name}"
        if clock.left() < stop_left:
            skipped.append(f"{label}: time budget")
            continue
        rows.append(recsys_row(b, length, d, dtype_name, label))
        print("recsys", rows[-1], flush=True)
        torch.cuda.empty_cache()
    return rows, skipped


def recsys_row(b: int, length: int, d: int, dtype_name: str, label: str) -> dict:
    dtype = DTYPES[dtype_name]
    ids, offsets, owner, counts = operands(b, length, d, dtype, VOCAB)
    table = (torch.randn(VOCAB, d, device="cuda") * 0.1).to(dtype).requires_grad_()
    fits = ids.shape[0] * d * table.element_size() <= VALUES_LIMIT
    row = {"B": b, "mean_length": length, "D": d, "dtype": dtype_name, "N": ids.shape[0]}
    for name, fn in RECSYS_VARIANTS.items():
        if name != "fused" and not fits:
            row[name] = "values over 4 GB"
            continue
        row[name] = timed_both(lambda fn=fn: fn(table, ids, offsets, owner, counts), table, f"{label} {name}")
    return row


def timed_both(call, leaf, label) -> dict:
    try:
        forward, method = time_pass(call, leaf, False, label)
        full, full_method = time_pass(call, leaf, True, label)
    except Exception as exc:  # a baseline that fails at this shape is a result, not the end of the run
        print(f"{label}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return {"error": f"{type(exc).__name__}: {exc}"[:200]}
    return {
        "forward_ms": forward,
        "full_ms": full,
        "method": method if method == full_method else f"{method}/{full_method}",
    }


GRID_D_ORDER = (16, 64, 256, 128, 1024)  # D 16 first (the short partitions' worst losses), then the issue's 64 and 256


def grid_cells(dtypes=DTYPES, bs=GRID_B, lengths=GRID_LENGTH, widths=GRID_D) -> list[tuple]:
    """The grid's cells in timing order (D as GRID_D_ORDER, then B, mean length, dtype), those of `bs`, `lengths` and
    `widths` only (the --b, --lengths and --d options: a run restricted to a few cells)."""
    order = [d for d in GRID_D_ORDER if d in widths] + [d for d in widths if d not in GRID_D_ORDER]
    return [(b, length, d, t) for d in order for b in bs for length in lengths for t in dtypes]


def grid(clock: Clock, ceiling_gbs: float, cells: list[tuple]) -> tuple[list[dict], list[str]]:
    rows, skipped = [], []
    for b, length, d, dtype_name in cells:
        dtype = ALL_DTYPES[dtype_name]
        label = f"B={b} L={length} D={d} {dtype_name}"
        if b * length * d * dtype.itemsize > VALUES_LIMIT:
            continue  # does not fit: not part of the grid
        if clock.left() < 5:
            skipped.append(f"{label}: time budget")
            continue
        rows.append(grid_row(b, length, d, dtype_name, label, ceiling_gbs))
        print("grid", rows[-1], flush=True)
        torch.cuda.empty_cache()
    return rows, skipped


def grid_row(b: int, length: int, d: int, dtype_name: str, label: str, ceiling_gbs: float, long_rows: int = 0) -> dict:
    dtype = ALL_DTYPES[dtype_name]
    _, offsets, owner, counts = operands(b, length, d, dtype, 1, long_rows)
    n = owner.shape[0]
    values = torch.randn(n, d, device=DEVICE, dtype=dtype, requires_grad=True)
    rows = torch.arange(n, device=DEVICE)
    moved = (values.numel() + b * d) * dtype.itemsize
    row = {"B": b, "mean_length": length, "D": d, "dtype": dtype_name, "N": n, "bytes": moved}
    if long_rows:
        row["long_rows"] = long_rows
    row["launch"] = pooling.short_config(b, n, d, dtype, torch.device("cuda")) or "previous"  # the GPU's
    for name, fn in grid_variants(b, n, length, d, dtype).items():
        if isinstance(fn, str):
            row[name] = fn
            continue
        call = lambda fn=fn: fn(values, offsets, owner, counts, rows)  # noqa: E731
        row[name] = timed_both(call, values, f"{label} {name}")
    ours = row["ours"]
    if moved > BANDWIDTH_BYTES and "forward_ms" in ours:
        row["ours_forward_pct_ceiling"] = 100 * moved / ours["forward_ms"] / 1e6 / ceiling_gbs
        row["ours_full_pct_ceiling"] = 100 * 2 * moved / ours["full_ms"] / 1e6 / ceiling_gbs
    return row


SKEW_CELLS = [  # (B, mean length, D, dtype, rows of partition B // 2): short means with one long history
    (262144, 1, 64, "fp32", 100_000),
    (262144, 1, 64, "bf16", 100_000),
    (16384, 4, 128, "fp32", 20_000),
    (1024, 16, 256, "bf16", 5_000),
]


def skew(clock: Clock, ceiling_gbs: float) -> tuple[list[dict], list[str]]:
    """The short design's known weak case, measured: one long partition among short ones is summed by one program
    (the tile kernel of the previous launch splits it over programs)."""
    rows, skipped = [], []
    for b, length, d, dtype_name, long_rows in SKEW_CELLS:
        label = f"skew B={b} L={length} D={d} {dtype_name} long={long_rows}"
        if clock.left() < 5:
            skipped.append(f"{label}: time budget")
            continue
        rows.append(grid_row(b, length, d, dtype_name, label, ceiling_gbs, long_rows))
        print("skew", rows[-1], flush=True)
    return rows, skipped


# --- padded: the masked mean over a padded [B, L, D] tensor and the split + pad_sequence form (issue 13) --------

PADDED_CELLS = [  # (B, L, D, dtype, lengths): "uniform" in [0, L]; "short" in [0, L / 16] with 1% at L
    (262144, 8, 32, "bf16", "uniform"),
    (16384, 50, 64, "bf16", "uniform"),
    (16384, 200, 128, "fp32", "short"),
    (1024, 200, 256, "bf16", "uniform"),
    (1024, 200, 256, "fp32", "uniform"),
    (4096, 400, 128, "bf16", "short"),
    (64, 2000, 256, "bf16", "uniform"),
    (64, 2000, 256, "fp32", "short"),
]
PADDED_CORRECTNESS_CELLS = [(4096, 50, 64, "uniform"), (8, 3000, 256, "short")]  # the long one splits L
SPLIT_MAX_B = 4096  # the split form's eager baseline splits into B tensors on the host: not timed past this B


def padded_lengths(b: int, length: int, kind: str, seed: int = 0) -> torch.Tensor:
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    if kind == "uniform":
        return torch.randint(0, length + 1, (b,), device=DEVICE, generator=g)
    lengths = torch.randint(0, max(length // 16, 1) + 1, (b,), device=DEVICE, generator=g)
    lengths[torch.rand(b, device=DEVICE, generator=g) < 0.01] = length
    return lengths


def masked_mean_eager(x, lengths):
    mask = torch.arange(x.shape[1], device=x.device)[None, :] < lengths[:, None]
    return (x * mask[..., None]).sum(1) / lengths.clamp(min=1)[:, None]


def split_masked_mean_eager(values, sizes, lengths):
    rows = torch.nn.utils.rnn.pad_sequence(torch.split(values, sizes), batch_first=True)
    mask = torch.arange(rows.shape[1], device=values.device)[None, :] < lengths[:, None]
    return (rows * mask[..., None]).sum(1) / lengths.clamp(min=1)[:, None]


def padded_correctness(clock: Clock) -> list[dict]:
    """Our padded op (the pass's fused clamp division) and the split form's replacement against float64, forward
    and the input's gradient, every dtype, on a short and a long cell (the L axis split there)."""
    from pipelines.fuse.runtime import padded
    from pipelines.fuse.runtime.families import triton_partitioned_mean
    from pipelines.fuse.runtime.padded_forms import padded_split_masked_mean_replacement

    rows = []
    for b, length, d, kind in PADDED_CORRECTNESS_CELLS:
        lengths = padded_lengths(b, length, kind, seed=1)
        sizes = lengths.tolist()
        for dtype_name, dtype in ALL_DTYPES.items():
            x = torch.randn(b, length, d, device=DEVICE).to(dtype).requires_grad_()
            exact = x.detach().double().requires_grad_()
            ref = masked_mean_eager(exact, lengths)
            grad = torch.randn_like(ref)
            ref.backward(grad)
            out = padded.padded_masked_mean_op(x, lengths, padded.MODES["clamp"], dtype)
            out.backward(grad.to(dtype))
            values = torch.randn(sum(sizes), d, device=DEVICE).to(dtype).requires_grad_()
            exact_values = values.detach().double().requires_grad_()
            split_ref = split_masked_mean_eager(exact_values, sizes, lengths)
            split_ref.backward(grad)
            counts = lengths.clamp(min=1)[:, None]
            split = padded_split_masked_mean_replacement(
                values, sizes, lengths, counts, dtype, pool=triton_partitioned_mean
            )
            split.backward(grad.to(dtype))
            tol = 1e-5 if dtype == torch.float32 else 2e-2
            errors = {
                "forward_rel_err": rel_err(out, ref.detach()),
                "backward_rel_err": rel_err(x.grad, exact.grad),
                "split_forward_rel_err": rel_err(split, split_ref.detach()),
                "split_backward_rel_err": rel_err(values.grad, exact_values.grad),
            }
            pad_grad_zero = bool(
                (x.grad.float() * (~(torch.arange(length, device=DEVICE) < lengths[:, None]))[..., None]).abs().max()
                == 0
            )
            rows.append(
                {"B": b, "L": length, "D": d, "dtype": dtype_name, "lengths": kind, **errors,
                 "pad_grad_zero": pad_grad_zero, "ok": all(e < tol for e in errors.values()) and pad_grad_zero}
            )  # fmt: skip
            print("padded_correctness", rows[-1], flush=True)
    return rows


def padded_section(clock: Clock) -> tuple[list[dict], list[str]]:
    """Per cell, forward and forward + backward: our padded op, the eager `(x * mask).sum(1) / counts` and its
    torch.compile (dynamic shapes: one compile for every cell); for the split form (B <= SPLIT_MAX_B) eager
    pad_sequence + mask against the pass's replacement (offsets built from the sizes each call, then our partitioned
    mean over 2B partitions) and the kernel alone (offsets prebuilt)."""
    compiled = torch.compile(masked_mean_eager, dynamic=True)
    rows, skipped = [], []
    for b, length, d, dtype_name, kind in PADDED_CELLS:
        label = f"padded B={b} L={length} D={d} {dtype_name} {kind}"
        if clock.left() < 10:
            skipped.append(f"{label}: time budget")
            continue
        row = padded_row(b, length, d, dtype_name, kind, label, compiled)
        rows.append(row)
        print("padded", rows[-1], flush=True)
        torch.cuda.empty_cache()
    return rows, skipped


def padded_row(b: int, length: int, d: int, dtype_name: str, kind: str, label: str, compiled) -> dict:
    from pipelines.fuse.runtime import padded
    from pipelines.fuse.runtime.families import triton_partitioned_mean
    from pipelines.fuse.runtime.padded_forms import padded_split_masked_mean_replacement

    dtype = ALL_DTYPES[dtype_name]
    lengths = padded_lengths(b, length, kind)
    n = int(lengths.sum())
    x = torch.randn(b, length, d, device=DEVICE, dtype=dtype, requires_grad=True)
    row = {"B": b, "L": length, "D": d, "dtype": dtype_name, "lengths": kind, "mean_length": n / b}
    row["launch"] = padded.padded_config(b, length, d, dtype, x.device)
    row["ours"] = timed_both(
        lambda: padded.padded_masked_mean_op(x, lengths, padded.MODES["clamp"], dtype), x, f"{label} ours"
    )
    row["eager"] = timed_both(lambda: masked_mean_eager(x, lengths), x, f"{label} eager")
    row["compiled"] = timed_both(lambda: compiled(x, lengths), x, f"{label} compiled")
    if b <= SPLIT_MAX_B:
        sizes, counts = lengths.tolist(), lengths.clamp(min=1)[:, None]
        values = torch.randn(n, d, device=DEVICE, dtype=dtype, requires_grad=True)
        starts = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
        offsets = torch.cat([torch.stack([starts[:-1], starts[1:]], 1).reshape(-1), starts[-1:]])
        row["split_eager"] = timed_both(
            lambda: split_masked_mean_eager(values, sizes, lengths), values, f"{label} split eager"
        )
        row["split_ours"] = timed_both(
            lambda: padded_split_masked_mean_replacement(
                values, sizes, lengths, counts, dtype, pool=triton_partitioned_mean
            ),
            values,
            f"{label} split ours",
        )
        row["split_kernel"] = timed_both(lambda: OurPool.apply(values, offsets)[0::2], values, f"{label} split kernel")
    return row


PADDED_VARIANTS = ("ours", "eager", "compiled", "split_eager", "split_ours", "split_kernel")


def cell(entry) -> str:
    if entry is None:
        return ""
    if isinstance(entry, str):
        return {"same launch as ours": "= ours", "not timed above mean length 200": "-"}.get(entry, entry)
    if "error" in entry:
        return "error"
    return f"{entry['forward_ms']:.3f} / {entry['full_ms']:.3f}"


def best_other(row: dict, names, key: str = "full_ms") -> float:
    times = [row[n][key] for n in names if isinstance(row.get(n), dict) and key in row[n]]
    return min(times) if times else math.inf


def design_ms(row: dict, design: str, key: str) -> float | None:
    """A design's time in a grid row; "same launch as ours" reads ours."""
    entry = row.get(design)
    if entry == "same launch as ours":
        entry = row.get("ours")
    return entry.get(key) if isinstance(entry, dict) else None


def win_counts(rows: list[dict], baselines=BASELINES) -> dict:
    """Per design and pass: cells where it is at least as fast as the best baseline (of those timed), the cells
    compared, and the losses per mean length."""
    counts = {}
    for design in DESIGNS:
        for key in ("forward_ms", "full_ms"):
            wins, compared, losses = 0, 0, {}
            for row in rows:
                ours, best = design_ms(row, design, key), best_other(row, baselines, key)
                if ours is None or math.isinf(best):
                    continue
                compared += 1
                if ours <= best:
                    wins += 1
                else:
                    losses[str(row["mean_length"])] = losses.get(str(row["mean_length"]), 0) + 1
            counts[f"{design} {key[:-3]}"] = {"wins": wins, "cells": compared, "losses_by_mean_length": losses}
    return counts


def speedup(other_ms: float, ours: dict) -> str:
    if "full_ms" not in ours or math.isinf(other_ms):
        return "-"
    return f"{other_ms / ours['full_ms']:.2f}x"


def padded_markdown(report: dict) -> list[str]:
    lines = []
    if report.get("padded_correctness"):
        lines += ["", "## Padded masked mean: correctness (float64 reference, rel. error)", ""]
        lines += ["| B | L | D | dtype | lengths | fwd | bwd | split fwd | split bwd | pad grad 0 | ok |"]
        lines += ["|---" * 11 + "|"]
        for r in report["padded_correctness"]:
            errs = " | ".join(f"{r[k]:.1e}" for k in ("forward_rel_err", "backward_rel_err", "split_forward_rel_err",
                                                       "split_backward_rel_err"))  # fmt: skip
            lines.append(f"| {r['B']} | {r['L']} | {r['D']} | {r['dtype']} | {r['lengths']} | {errs} "
                         f"| {r['pad_grad_zero']} | {r['ok']} |")  # fmt: skip
    if report.get("padded"):
        lines += ["", "## Padded masked mean (forward / forward+backward ms)", ""]
        lines += ["| B | L | D | dtype | lengths | mean | " + " | ".join(PADDED_VARIANTS) + " | ours vs compiled "
                  "| split ours vs split eager |", "|---" * (len(PADDED_VARIANTS) + 8) + "|"]  # fmt: skip
        for r in report["padded"]:
            cells = " | ".join(cell(r.get(n)) for n in PADDED_VARIANTS)
            ratios = f"{speedup(best_other(r, ['compiled']), r['ours'])} | "
            ratios += speedup(best_other(r, ["split_eager"]), r["split_ours"]) if "split_ours" in r else "-"
            lines.append(f"| {r['B']} | {r['L']} | {r['D']} | {r['dtype']} | {r['lengths']} "
                         f"| {r['mean_length']:.1f} | {cells} | {ratios} |")  # fmt: skip
    return lines


def markdown(report: dict) -> str:
    lines = [f"# Pooling on {report['device']} (torch {report['torch']}, triton {report['triton']})", ""]
    lines += [
        "## Correctness (fused vs EmbeddingBag, float64 reference)",
        "",
        "| B | L | D | dtype | fwd rel | bwd rel | plain mean rel | ok |",
    ]
    lines += ["|---|---|---|---|---|---|---|---|"]
    for r in report.get("correctness", []):
        lines.append(
            f"| {r['B']} | {r['mean_length']} | {r['D']} | {r['dtype']} | {r['forward_rel_err']:.1e} "
            f"| {r['backward_rel_err']:.1e} | {r['plain_mean_rel_err']:.1e} | {r['ok']} |"
        )
    lines += ["", "## Launch tuning (fused fwd+bwd, events ms)", "", "| bucket | rule ms | best ms | best launch |"]
    lines += ["|---|---|---|---|"]
    for r in report.get("tuning", []):
        if "skipped" in r:
            lines.append(f"| {r['bucket']} | skipped: {r['skipped']} | | |")
        else:
            lines.append(f"| {r['bucket']} | {r['rule_ms']:.3f} | {r['best_ms']:.3f} | `{json.dumps(r['best'])}` |")
    names = list(RECSYS_VARIANTS)
    lines += ["", "## Recsys shapes, V=200k (forward / forward+backward ms)", ""]
    lines += ["| B | L | D | dtype | " + " | ".join(names) + " | fused vs best other (fwd+bwd) |"]
    lines += ["|---" * (len(names) + 5) + "|"]
    for r in report.get("recsys", []):
        ratio = speedup(best_other(r, names[1:]), r["fused"])
        cells = " | ".join(cell(r[n]) for n in names)
        lines.append(f"| {r['B']} | {r['mean_length']} | {r['D']} | {r['dtype']} | {cells} | {ratio} |")
    if report.get("short_correctness"):
        lines += ["", "## Correctness of the partitioned mean's designs (float64 reference, fwd / bwd rel. error)", ""]
        lines += [
            "| B | L | D | dtype | long | int32 | " + " | ".join(DESIGNS) + " | ok |",
            "|---" * (len(DESIGNS) + 7) + "|",
        ]
        for r in report["short_correctness"]:
            errs = " | ".join(f"{r[d]['forward_rel_err']:.1e} / {r[d]['backward_rel_err']:.1e}" for d in DESIGNS)
            lines.append(
                f"| {r['B']} | {r['mean_length']} | {r['D']} | {r['dtype']} | {r['long']} | {r['int32']} | {errs} "
                f"| {r['ok']} |"
            )
    ceilings = report.get("bandwidth", {})
    if report.get("skew"):
        lines += ["", "## One long partition among short ones (forward / forward+backward ms)", ""]
        lines += ["| B | L | D | dtype | long rows | " + " | ".join(GRID_VARIANTS) + " |"]
        lines += ["|---" * (len(GRID_VARIANTS) + 5) + "|"]
        for r in report["skew"]:
            cells = " | ".join(cell(r.get(n)) for n in GRID_VARIANTS)
            lines.append(f"| {r['B']} | {r['mean_length']} | {r['D']} | {r['dtype']} | {r['long_rows']} | {cells} |")
    if report.get("grid"):
        lines += ["", "## Grid: wins against the best of " + ", ".join(BASELINES), ""]
        lines += ["| design, pass | at least the best | of cells | losses by mean length |", "|---|---|---|---|"]
        for name, c in win_counts(report["grid"]).items():
            lines.append(f"| {name} | {c['wins']} | {c['cells']} | {json.dumps(c['losses_by_mean_length'])} |")
        lines += ["", "Against segment_reduce and index_add only (the earlier runs' baselines):", ""]
        lines += ["| design, pass | at least the best | of cells |", "|---|---|---|"]
        for name, c in win_counts(report["grid"], BASELINES[:2]).items():
            lines.append(f"| {name} | {c['wins']} | {c['cells']} |")
    copy, read = ceilings.get("copy", float("nan")), ceilings.get("read", float("nan"))
    lines += [
        "",
        f"## Grid: our partitioned mean (ceiling: copy {copy:.0f} GB/s, read {read:.0f} GB/s; % of the larger)",
        "",
    ]
    grid_names = list(GRID_VARIANTS)
    lines += [
        "| B | L | D | dtype | " + " | ".join(grid_names) + " | ours vs best (fwd+bwd) | ours % of ceiling fwd / full |"
    ]
    lines += ["|---" * (len(grid_names) + 6) + "|"]
    for r in report.get("grid", []):
        ours = r["ours"]
        ratio = speedup(best_other(r, BASELINES), ours)
        pct = (
            f"{r['ours_forward_pct_ceiling']:.0f}% / {r['ours_full_pct_ceiling']:.0f}%"
            if "ours_forward_pct_ceiling" in r
            else ""
        )
        cells = " | ".join(cell(r.get(n)) for n in grid_names)
        lines.append(f"| {r['B']} | {r['mean_length']} | {r['D']} | {r['dtype']} | {cells} | {ratio} | {pct} |")
    lines += padded_markdown(report)
    lines += ["", "## Skipped", ""] + [f"- {s}" for s in report.get("skipped", [])] + [""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=280.0)
    parser.add_argument("--tune-s", type=float, default=60.0)
    parser.add_argument("--write-launch", action="store_true", help="rewrite the runtime's embedding_pool_launch.json")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS + PADDED_SECTIONS, default=list(SECTIONS))
    parser.add_argument("--dtypes", nargs="+", choices=list(ALL_DTYPES), default=list(DTYPES), help="grid dtypes")
    parser.add_argument("--b", nargs="+", type=int, default=list(GRID_B), help="grid partitions B (default: all)")
    parser.add_argument("--lengths", nargs="+", type=int, default=list(GRID_LENGTH), help="grid mean lengths")
    parser.add_argument("--d", nargs="+", type=int, default=list(GRID_D), help="grid widths D")
    parser.add_argument("--graph-ms", type=float, default=10.0, help="GPU time of one timing graph (ms)")
    parser.add_argument("--replays", type=int, default=5, help="replays of each timing graph (the median is kept)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    # half graph_timing's defaults by default (10 ms graphs, 5 replays): ~400 timed passes must fit the budget;
    # the short-partition grid (~2,100 passes) takes --graph-ms 5
    graph_timing.GRAPH_REP_MS, graph_timing.GRAPH_REPLAYS = args.graph_ms, args.replays
    clock = Clock(args.budget_s)
    import triton

    report = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "sections": args.sections,
        "graph_ms": args.graph_ms,
        "replays": args.replays,
        "skipped": [],
        "errors": [],
    }
    wanted = set(args.sections) | ({"bandwidth"} if {"grid", "skew"} & set(args.sections) else set())
    grid_dtypes = {name: ALL_DTYPES[name] for name in args.dtypes}
    cells = grid_cells(grid_dtypes, args.b, args.lengths, args.d)
    sections = [
        ("correctness", lambda: correctness(clock)),
        ("short_correctness", lambda: short_correctness(clock)),
        ("tuning", lambda: tune(clock, args.tune_s)),
        ("bandwidth", bandwidth_ceilings_gbs),
        ("recsys", lambda: recsys(clock, stop_left=args.budget_s * 0.35)),
        ("skew", lambda: skew(clock, report["bandwidth"]["ceiling"])),
        ("grid", lambda: grid(clock, report["bandwidth"]["ceiling"], cells)),
        ("padded_correctness", lambda: padded_correctness(clock)),
        ("padded", lambda: padded_section(clock)),
    ]
    for name, run in sections:
        if name not in wanted:
            continue
        try:
            result = run()
        except Exception:
            report["errors"].append(f"{name}: {traceback.format_exc()[-800:]}")
            print(report["errors"][-1], file=sys.stderr)
            result = (
                [] if name != "bandwidth" else {"copy": float("nan"), "read": float("nan"), "ceiling": float("nan")}
            )
        if name == "tuning" and result:
            launch, result = result
            write_launch(args.out / "embedding_pool_launch.json", launch, report["device"])
            if args.write_launch:
                write_launch(embedding_pool.LAUNCH_TABLE, launch, report["device"])
                embedding_pool._LAUNCH.clear()  # the timed sections below use the measured launches
        if name in ("recsys", "skew", "grid", "padded") and result:
            result, skipped = result
            report["skipped"] += skipped
        report[name] = result
        if name == "grid":
            report["grid_wins"] = win_counts(result)
        (args.out / "pooling_grid.json").write_text(json.dumps(report, indent=1))
    (args.out / "pooling_grid.md").write_text(markdown(report))
    print(f"wrote {args.out}/pooling_grid.json and .md in {args.budget_s - clock.left():.0f} s", flush=True)
    checks = report.get("correctness", []) + report.get("short_correctness", []) + report.get("padded_correctness", [])
    return 0 if all(r["ok"] for r in checks) and not report["errors"] else 1


def write_launch(path: Path, launch: dict, device: str) -> None:
    current = json.loads(embedding_pool.LAUNCH_TABLE.read_text()) if embedding_pool.LAUNCH_TABLE.is_file() else {}
    current.update(
        {"measured_on": device, "source": "benchmarks/pooling_grid_gpu.py (fwd+bwd, events)", "buckets": launch}
    )
    path.write_text(json.dumps(current, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
