"""The kernel's unit tests in the perf children: spread over pytest-xdist workers when asked (Liger's
test_rms_norm.py ran serially past the GPU script's limit), every test still run and counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pipelines.perf import pipeline

ROOT = Path(__file__).resolve().parents[3]

TESTS = """
import os

import pytest


@pytest.mark.parametrize("i", range(6))
def test_records_its_worker(i):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "serial")
    open(os.path.join(os.environ["RAN_DIR"], f"ran-{i}-{worker}"), "w").close()
"""


def run_file(tmp_path, workers: int) -> tuple[dict, list[str]]:
    """measure.run_tests in a child process, as the perf pipeline's measure child runs it: a pytest session with its
    own xdist workers inside this suite's worker process can hang at its end."""
    (tmp_path / "test_many.py").write_text(TESTS)
    (tmp_path / "ran").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTEST_XDIST"))}
    env.update(RAN_DIR=str(tmp_path / "ran"), PYTHONPATH=str(ROOT))  # the workers inherit both
    probe = (
        "import json, sys; from pathlib import Path; from pipelines.perf import measure; "
        f"print(json.dumps(measure.run_tests(Path({str(tmp_path)!r}), "
        f"{{'file': 'test_many.py', 'k': None, 'workers': {workers}}})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    ran = sorted(p.name for p in (tmp_path / "ran").iterdir())
    return result, ran


def test_workers_spread_the_tests_and_every_one_is_counted(tmp_path):
    result, ran = run_file(tmp_path, 2)
    assert result["ok"] and result["summary"] == "6 passed"
    assert len(ran) == 6 and all("-gw" in name for name in ran)  # each in an xdist worker


def test_no_workers_runs_serially(tmp_path):
    result, ran = run_file(tmp_path, 0)
    assert result["ok"] and result["summary"] == "6 passed"
    assert len(ran) == 6 and all(name.endswith("-serial") for name in ran)


def test_the_loop_hands_its_worker_count_to_every_test_run():
    loop = pipeline.Loop.__new__(pipeline.Loop)
    loop.options = pipeline.Options(test_workers=8)
    loop.profile = type("P", (), {"source": type("S", (), {"files": type("F", (), {"test": "test/t.py"})})})()
    assert loop.test_spec("not dtensor") == {"file": "test/t.py", "k": "not dtensor", "workers": 8}
