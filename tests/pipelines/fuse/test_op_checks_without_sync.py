"""The pass's ops check offsets without reading them back on a GPU: a host read drains the device queue on every
call (the recsys demo's step ran three per forward, 2.64 ms against EmbeddingBag's 1.51 on the H200)."""

from __future__ import annotations

import pytest
import torch

from pipelines.fuse.runtime import pooling


def _no_host_reads(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a host read of a device tensor")

    for name in ("tolist", "item", "__int__", "__bool__"):
        monkeypatch.setattr(torch.Tensor, name, refuse)


@pytest.mark.parametrize("whole", [False, True])
def test_the_device_assert_refuses_bad_offsets_without_reading_them(monkeypatch, whole):
    good, rows = torch.tensor([0, 2, 2, 5]), 5
    bad = [torch.tensor([0, 3, 2, 5]), torch.tensor([0, 2, 6]), torch.tensor([-1, 2, 5])]
    if whole:
        bad += [torch.tensor([1, 2, 5]), torch.tensor([0, 2, 4])]
    _no_host_reads(monkeypatch)
    pooling.assert_offsets_on_device(good, rows, whole)
    for offsets in bad:  # on the CPU _assert_async raises at once; on a GPU at the next sync
        with pytest.raises(RuntimeError, match="liger_fuse: offsets must"):
            pooling.assert_offsets_on_device(offsets, rows, whole)


def test_offsets_off_the_cpu_take_the_device_assert_and_cpu_ones_the_precise_checks(monkeypatch):
    taken = []
    monkeypatch.setattr(pooling, "assert_offsets_on_device", lambda offsets, rows, whole: taken.append("device"))
    pooling.check_offset_values(torch.empty(4, dtype=torch.int64, device="meta"), 5, on_device=True)
    assert taken == ["device"]
    with pytest.raises(ValueError, match=r"offsets must lie within \[0, N=5\] \(values' rows\), got 0..6"):
        pooling.check_offset_values(torch.tensor([0, 6]), 5, on_device=True)  # the CPU: the precise host check
    assert taken == ["device"]


def test_the_ops_still_refuse_bad_offsets_on_the_cpu_with_the_precise_message():
    values = torch.randn(5, 4)
    with pytest.raises(ValueError, match="offsets must not decrease"):
        torch.ops.liger_fuse.partitioned_mean(values, torch.tensor([0, 3, 2, 5]))
