"""A K-feature encoder step (an EmbeddingBagCollection-like model: K `nn.EmbeddingBag(mode="mean")` tables of
different sizes, outputs concatenated along dim 1, a linear head, MSE, SGD) on a GPU, three ways (thirteenth
session, s13-grouped):

  eager     the K EmbeddingBags, eager
  grouped   compiled with our pass (the default registry): the K fused gathers meet in the cat and become one
            `liger_fuse::grouped_embedding_partitioned_mean` launch forward and one backward
  singles   compiled with our pass without the grouped entry: K `triton_embedding_partitioned_mean` calls

Sets of (K, D, dtype) share compiled models (dynamic=True: B and the lengths change without a recompile); within a
set each (B, mean length) cell times the variants in alternating rounds (the step is host-bound, and the same variant
timed twice has moved by 0.4 ms): a round runs STEPS steps of each variant back to back over the cell's batches (one
sync at each end: the host's pace while the GPU keeps up) and the cell reports each variant's median over rounds.
The first cell of a set also checks the compiled variants' loss and table gradients against eager's. Sets are run in
order while at least SET_RESERVE_S of --budget-s is left, cells while any is (the rest listed as skipped); the JSON
is rewritten after every cell.

    PYTHONPATH=<tree or site> python3 -m benchmarks.recsys_grouped_gpu --out $OUT/grouped.json [--budget-s 140] [--sets 0 1]
    TRITON_INTERPRET=1 python3 -m benchmarks.recsys_grouped_gpu --device cpu      # a smoke run, no figures
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch
from torch import nn

ROUNDS, STEPS, BATCHES = 5, 10, 3
# (K, D, dtype): many narrow features (a Criteo-like 26) and a few wide ones; the first two cover both K and both
# dtypes, in case the budget ends the run there
SETS = ((26, 64, torch.float32), (4, 128, torch.bfloat16), (26, 64, torch.bfloat16), (4, 128, torch.float32))
SET_RESERVE_S = 45  # a set (two compiles, then its cells) starts only with this much of the budget left
CELLS = ((1024, 4), (1024, 50), (16384, 4), (16384, 50))  # (B, mean length) per set
VARIANTS = ("eager", "grouped", "singles")
GROUPED = "grouped_embedding_partitioned_mean"
DEVICE = "cuda"


class Collection(nn.Module):
    def __init__(self, vocabularies, width, dtype):
        super().__init__()
        self.bags = nn.ModuleList(nn.EmbeddingBag(v, width, mode="mean", dtype=dtype) for v in vocabularies)
        self.head = nn.Linear(len(vocabularies) * width, 1, dtype=dtype)

    def forward(self, ids, offsets):
        pooled = [bag(i, o) for bag, i, o in zip(self.bags, ids, offsets, strict=True)]
        return self.head(torch.cat(pooled, dim=1)).squeeze(-1)


def vocabularies(k: int) -> list[int]:
    """K table sizes, geometric from 1,000 to 100,000 rows (smaller on the CPU)."""
    low, high = (1000, 100_000) if DEVICE == "cuda" else (10, 40)
    return [int(low * (high / low) ** (f / max(k - 1, 1))) for f in range(k)]


def batches(sizes: list[int], partitions: int, mean_length: int, dtype, seed: int = 0) -> list[tuple]:
    """BATCHES batches, lengths uniform in [1, 2 * mean - 1] per feature, changing every batch."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(BATCHES):
        ids, offsets = [], []
        for vocab in sizes:
            lengths = torch.randint(1, 2 * mean_length, (partitions,), generator=generator)
            starts = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)[:-1]])
            ids.append(torch.randint(0, vocab, (int(lengths.sum()),), generator=generator).to(DEVICE))
            offsets.append(starts.to(DEVICE))
        target = torch.randn(partitions, generator=generator).to(DEVICE, dtype)
        out.append((ids, offsets, target))
    return out


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _step(model, optimizer, batch):
    ids, offsets, target = batch
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(ids, offsets), target)
    loss.backward()
    optimizer.step()
    return loss


def _steps_ms(model, optimizer, data, steps: int) -> float:
    _sync()
    start = time.perf_counter()
    for i in range(steps):
        _step(model, optimizer, data[i % len(data)])
    _sync()
    return (time.perf_counter() - start) / steps * 1e3


def _registry_without_grouping():
    from pipelines.fuse.runtime import default_registry

    registry = default_registry()
    registry.patterns = [p for p in registry.patterns if p.name != GROUPED]
    return registry


def _models(k: int, width: int, dtype) -> dict:
    from pipelines.fuse.runtime import compile as fuse_compile

    torch.manual_seed(0)
    eager = Collection(vocabularies(k), width, dtype).to(DEVICE)
    inner = "inductor" if DEVICE == "cuda" else "aot_eager"
    return {
        "eager": eager,
        "grouped": fuse_compile(copy.deepcopy(eager), inner=inner, dynamic=True),
        "singles": fuse_compile(copy.deepcopy(eager), registry=_registry_without_grouping(), inner=inner, dynamic=True),
    }


def _gradient_check(models: dict, batch) -> dict:
    """One forward + backward from equal parameters (the compiled variants compile here: its seconds are
    `first_step_s`): loss and the largest table-gradient error of each compiled variant against eager's (relative to
    the eager gradient's largest magnitude)."""
    out, reference = {}, None
    ids, offsets, target = batch
    for name, model in models.items():
        model.zero_grad(set_to_none=True)
        _sync()
        begin = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(ids, offsets), target)
        loss.backward()
        _sync()
        seconds = time.perf_counter() - begin
        grads = [p.grad.float() for p in model.parameters()]
        if reference is None:
            reference = (loss.item(), grads)
        else:
            pairs = zip(grads, reference[1], strict=True)
            worst = max(float((g - r).abs().max() / r.abs().max().clamp(min=1e-30)) for g, r in pairs)
            out[name] = {
                "first_step_s": round(seconds, 2),
                "loss_diff": abs(loss.item() - reference[0]),
                "max_rel_grad_err": worst,
            }
    for model in models.values():
        model.zero_grad(set_to_none=True)
    return out


def run_set(k: int, width: int, dtype, result: dict, deadline: float, write) -> None:
    label = f"K{k}/D{width}/{str(dtype).removeprefix('torch.')}"
    models = _models(k, width, dtype)
    optimizers = {name: torch.optim.SGD(m.parameters(), lr=1e-3) for name, m in models.items()}
    sizes = vocabularies(k)
    cells = CELLS if DEVICE == "cuda" else ((8, 3),)
    for index, (partitions, mean_length) in enumerate(cells):
        cell = f"{label}/B{partitions}/L{mean_length}"
        if time.monotonic() > deadline:
            result["skipped"].append(f"{cell}: time budget")
            continue
        start = time.monotonic()
        data = batches(sizes, partitions, mean_length, dtype, seed=index)
        row = {"K": k, "D": width, "dtype": str(dtype), "B": partitions, "mean_length": mean_length}
        if index == 0:
            row["check"] = _gradient_check(models, data[0])
        for name, model in models.items():  # warm-up: every batch once (a recompile would show here, not in rounds)
            _steps_ms(model, optimizers[name], data, len(data))
        rounds = {name: [] for name in models}
        steps = STEPS if DEVICE == "cuda" else 1
        for _ in range(ROUNDS if DEVICE == "cuda" else 1):
            for name, model in models.items():
                rounds[name].append(_steps_ms(model, optimizers[name], data, steps))
        row["step_ms_median_of_rounds"] = {name: round(statistics.median(ms), 4) for name, ms in rounds.items()}
        row["step_ms_per_round"] = {name: [round(m, 4) for m in ms] for name, ms in rounds.items()}
        medians = row["step_ms_median_of_rounds"]
        row["grouped_vs_singles"] = round(medians["singles"] / medians["grouped"], 3)
        row["grouped_vs_eager"] = round(medians["eager"] / medians["grouped"], 3)
        row["wall_s"] = round(time.monotonic() - start, 1)
        result["cells"].append(row)
        write()
    for name in ("grouped", "singles"):
        stats = models[name].liger_fuse_stats
        result["stats"][f"{label}/{name}"] = {
            "replaced_by": stats.replaced_by,
            "declined_reasons": stats.declined_reasons,
            "graphs_compiled": stats.graphs_compiled,
            "fallbacks": stats.fallbacks,
        }
    write()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--budget-s", type=float, default=140.0, help="start no cell after this many seconds")
    parser.add_argument("--sets", type=int, nargs="+", help="indices into SETS (default: all, in order)")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    gpu = torch.cuda.get_device_name() if DEVICE == "cuda" else "none (cpu smoke run)"
    import triton

    result = {"torch": torch.__version__, "triton": triton.__version__, "gpu": gpu, "rounds": ROUNDS, "steps": STEPS}
    result.update({"cells": [], "stats": {}, "skipped": [], "errors": []})

    def write() -> None:
        if args.out:
            with open(args.out, "w") as handle:
                json.dump(result, handle, indent=1)

    deadline = time.monotonic() + args.budget_s
    sets = [SETS[i] for i in args.sets] if args.sets else list(SETS)
    sets = sets if DEVICE == "cuda" else [(3, 8, torch.float32)]
    for k, width, dtype in sets:
        if time.monotonic() > deadline - SET_RESERVE_S:
            result["skipped"].append(f"K{k}/D{width}/{dtype}: time budget")
            continue
        try:
            run_set(k, width, dtype, result, deadline, write)
        except Exception as exc:  # one set's failure must not lose the others' figures
            result["errors"].append(f"K{k}/D{width}/{dtype}: {type(exc).__name__}: {exc}"[:2000])
        torch._dynamo.reset()
        write()
    print(json.dumps(result, indent=1), flush=True)


if __name__ == "__main__":
    main()
