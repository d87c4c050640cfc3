"""The recsys demo: an encoder with a partitioned mean over variable-length user histories written the naive
way (a Python loop over offsets), timed in eager, plain torch.compile and torch.compile with our pass.

`NaiveEncoder` is what a user writes; `SplitEncoder` and `PaddedMaskEncoder` are two more ways users write it;
`IndexAddEncoder`, `SegmentReduceEncoder` and `EmbeddingBagEncoder` are the hand-vectorised versions the pass should
at least match. All share parameters' shapes, so one state dict serves all.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class DemoSize:
    items: int
    dim: int
    histories: int
    max_history: int
    hidden: int

    @classmethod
    def for_device(cls, device: str) -> DemoSize:
        if device == "cuda":
            return cls(items=200_000, dim=128, histories=1024, max_history=400, hidden=256)
        return cls(items=1000, dim=16, histories=8, max_history=12, hidden=32)  # the interpreter is slow


class NaiveEncoder(nn.Module):
    def __init__(self, size: DemoSize):
        super().__init__()
        self.embedding = nn.Embedding(size.items, size.dim)
        self.mlp = nn.Sequential(nn.Linear(size.dim, size.hidden), nn.ReLU(), nn.Linear(size.hidden, 1))

    def forward(self, item_ids, offsets):
        values = self.embedding(item_ids)
        bounds = offsets.tolist()
        pooled = []
        for i in range(len(bounds) - 1):
            pooled.append(values[bounds[i] : bounds[i + 1]].mean(0))
        users = torch.stack(pooled)
        return self.mlp(users).squeeze(-1)


class IndexAddEncoder(NaiveEncoder):
    def forward(self, item_ids, offsets):
        values = self.embedding(item_ids)
        lengths = offsets[1:] - offsets[:-1]
        ids = torch.arange(lengths.shape[0], device=values.device)
        segments = torch.repeat_interleave(ids, lengths, output_size=values.shape[0])
        sums = torch.zeros(lengths.shape[0], values.shape[1], device=values.device, dtype=values.dtype)
        users = sums.index_add_(0, segments, values) / lengths.clamp(min=1).unsqueeze(1).to(values.dtype)
        return self.mlp(users).squeeze(-1)


class SegmentReduceEncoder(NaiveEncoder):
    def forward(self, item_ids, offsets):
        values = self.embedding(item_ids)
        users = torch.segment_reduce(values, "mean", offsets=offsets, axis=0)
        return self.mlp(users).squeeze(-1)


class SplitEncoder(NaiveEncoder):
    def forward(self, item_ids, offsets):
        values = self.embedding(item_ids)
        lengths = offsets[1:] - offsets[:-1]
        users = torch.stack([t.mean(0) for t in torch.split(values, lengths.tolist())])
        return self.mlp(users).squeeze(-1)


class PaddedMaskEncoder(NaiveEncoder):
    """Histories padded to the longest (`pad_sequence` of the split), a length mask, sum / length."""

    def forward(self, item_ids, offsets):
        values = self.embedding(item_ids)
        lengths = offsets[1:] - offsets[:-1]
        padded = nn.utils.rnn.pad_sequence(torch.split(values, lengths.tolist()), batch_first=True)
        mask = torch.arange(padded.shape[1], device=values.device)[None, :] < lengths[:, None]
        users = (padded * mask[..., None]).sum(1) / lengths[:, None]
        return self.mlp(users).squeeze(-1)


class EmbeddingBagEncoder(NaiveEncoder):
    """The library's own fused gather + mean (`nn.EmbeddingBag(mode="mean")` on the same table): the baseline a
    recommendation model would reach for by hand."""

    def forward(self, item_ids, offsets):
        users = nn.functional.embedding_bag(item_ids, self.embedding.weight, offsets[:-1], mode="mean")
        return self.mlp(users).squeeze(-1)


def batches(size: DemoSize, count: int, device: str, seed: int = 0):
    """`count` batches whose history lengths (1..max_history) change every batch."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        lengths = torch.randint(1, size.max_history + 1, (size.histories,), generator=generator)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
        ids = torch.randint(0, size.items, (int(offsets[-1]),), generator=generator)
        target = torch.randn(size.histories, generator=generator)
        out.append((ids.to(device), offsets.to(device), target.to(device)))
    return out


def train_step(model, optimizer, batch):
    ids, offsets, target = batch
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(ids, offsets), target)
    loss.backward()
    optimizer.step()
    return loss.detach()


def first_step_grads(model, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    ids, offsets, target = batch
    model.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(ids, offsets), target)
    loss.backward()
    grads = {name.removeprefix("_orig_mod."): p.grad.detach().clone() for name, p in model.named_parameters()}
    return loss.detach(), grads


def timed_steps(model, batch_list, device: str) -> tuple[float, float]:
    """(seconds of the first step, which includes compiling; median ms of the following steps)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    times = [timed_step(model, optimizer, batch, device) for batch in batch_list]
    rest = times[1:] or times
    return times[0], statistics.median(rest) * 1e3


def timed_step(model, optimizer, batch, device: str) -> float:
    """Seconds of one training step, the device synchronised on both sides."""
    _sync(device)
    start = time.perf_counter()
    train_step(model, optimizer, batch)
    _sync(device)
    return time.perf_counter() - start


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
