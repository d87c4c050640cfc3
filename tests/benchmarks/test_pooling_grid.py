"""The pooling grid's bookkeeping (benchmarks/pooling_grid_gpu.py) on the CPU: which designs a cell times, and the
win counts the lead reads to choose between them. (Its correctness section runs under the interpreter in
tests/pipelines/fuse/test_pooling_short.py.)"""

import itertools

import pytest
import torch


@pytest.fixture(name="grid")
def _grid():
    # imported when the test runs, not at collection: the module imports triton, and a worker must import it only
    # after tests/pipelines/fuse/conftest.py has switched the interpreter on for that folder's tests
    from benchmarks import pooling_grid_gpu

    return pooling_grid_gpu


def _timed(forward, full):
    return {"forward_ms": forward, "full_ms": full, "method": "cudagraph"}


def test_a_cell_times_the_previous_launch_where_the_rule_changed_it_and_the_short_design_where_it_did_not(grid):
    short_cell = grid.grid_variants(16384, 16384, 1, 16, torch.float32)
    assert callable(short_cell["previous"]) and short_cell["short"] == "same launch as ours"
    long_cell = grid.grid_variants(1024, 1024 * 200, 200, 64, torch.bfloat16)
    assert long_cell["previous"] == "same launch as ours" and callable(long_cell["short"])
    longest = grid.grid_variants(64, 64 * 2000, 2000, 64, torch.float32)
    assert isinstance(longest["short"], str) and isinstance(longest["previous"], str)
    assert all(callable(short_cell[name]) for name in ("ours", "flat", "narrow", *grid.BASELINES))
    assert callable(long_cell["narrow"]) and longest["narrow"] == "not timed above mean length 200"


def test_the_narrow_design_is_timed_as_its_forward_and_the_rules_backward(grid):
    assert grid.FORCED["narrow"] == ("narrow", None) and "narrow" in grid.DESIGNS


def test_the_grid_can_be_restricted_to_a_few_cells(grid):
    cells = grid.grid_cells(grid.DTYPES, bs=[16384, 262144], lengths=[4, 16], widths=[64, 16])
    assert cells[0] == (16384, 4, 16, "fp32") and len(cells) == 2 * 2 * 2 * 2  # D 16 first, as the full grid
    assert {cell[:3] for cell in cells} == set(itertools.product((16384, 262144), (4, 16), (16, 64)))
    assert len(grid.grid_cells()) == 5 * 5 * 5 * 2  # every cell by default


def test_win_counts_compare_each_design_with_the_best_baseline_timed(grid):
    rows = [
        {  # ours wins forward (1.0 < 1.2), loses full (2.0 > 1.9); previous loses both
            **{"B": 16384, "D": 16, "dtype": "fp32", "mean_length": 1},
            "ours": _timed(1.0, 2.0),
            "previous": _timed(2.0, 3.0),
            "short": "same launch as ours",
            "segment_reduce": _timed(1.5, 1.9),
            "index_add": {"error": "RuntimeError"},
            "embedding_bag": _timed(1.2, 2.5),
        },
        {  # a long cell: previous is ours' own launch, short was forced and loses
            **{"B": 1024, "D": 64, "dtype": "bf16", "mean_length": 200},
            "ours": _timed(1.0, 1.0),
            "previous": "same launch as ours",
            "short": _timed(3.0, 3.0),
            "segment_reduce": _timed(2.0, 2.0),
            "index_add": _timed(2.0, 2.0),
            "embedding_bag": _timed(2.0, 2.0),
        },
    ]
    counts = grid.win_counts(rows)
    assert counts["ours forward"] == {"wins": 2, "cells": 2, "losses_by_mean_length": {}}
    assert counts["ours full"] == {"wins": 1, "cells": 2, "losses_by_mean_length": {"1": 1}}
    assert counts["previous forward"] == {"wins": 1, "cells": 2, "losses_by_mean_length": {"1": 1}}
    assert counts["short full"] == {"wins": 0, "cells": 2, "losses_by_mean_length": {"1": 1, "200": 1}}
    without_bag = grid.win_counts(rows, grid.BASELINES[:2])
    assert without_bag["previous forward"]["wins"] == 1  # 2.0 > 1.5 still
    assert "| ours full | 1 | 2 |" in grid.markdown({"device": "d", "torch": "t", "triton": "x", "grid": rows})
