"""The kernel's unit tests in the perf children: spread over pytest-xdist workers when asked (Liger's
test_rms_norm.py ran serially past the GPU script's limit), every test still run and counted."""

from __future__ import annotations

from pipelines.perf import measure
from pipelines.perf import pipeline

TESTS = """
import os

import pytest


@pytest.mark.parametrize("i", range(6))
def test_records_its_worker(i):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "serial")
    open(os.path.join(os.environ["RAN_DIR"], f"ran-{i}-{worker}"), "w").close()
"""


def run_file(tmp_path, monkeypatch, workers: int) -> tuple[dict, list[str]]:
    (tmp_path / "test_many.py").write_text(TESTS)
    (tmp_path / "ran").mkdir()
    monkeypatch.setenv("RAN_DIR", str(tmp_path / "ran"))  # the workers inherit it
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # this suite may itself run under xdist
    result = measure.run_tests(tmp_path, {"file": "test_many.py", "k": None, "workers": workers})
    ran = sorted(p.name for p in (tmp_path / "ran").iterdir())
    return result, ran


def test_workers_spread_the_tests_and_every_one_is_counted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result, ran = run_file(tmp_path, monkeypatch, 2)
    assert result["ok"] and result["summary"] == "6 passed"
    assert len(ran) == 6 and all("-gw" in name for name in ran)  # each in an xdist worker


def test_no_workers_runs_serially(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result, ran = run_file(tmp_path, monkeypatch, 0)
    assert result["ok"] and result["summary"] == "6 passed"
    assert len(ran) == 6 and all(name.endswith("-serial") for name in ran)


def test_the_loop_hands_its_worker_count_to_every_test_run():
    loop = pipeline.Loop.__new__(pipeline.Loop)
    loop.options = pipeline.Options(test_workers=8)
    loop.profile = type("P", (), {"source": type("S", (), {"files": type("F", (), {"test": "test/t.py"})})})()
    assert loop.test_spec("not dtensor") == {"file": "test/t.py", "k": "not dtensor", "workers": 8}
