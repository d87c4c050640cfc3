"""warm_python: gate children forked from one warm interpreter behave as fresh ones, minus the import time."""

from __future__ import annotations

import json
import os
import sys

import pytest

from pipelines import warm_python
from pipelines.autopatch import verify
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.subprocesses import allowed_env

ENV = verify.target_env()  # the checkout's src first, then what the host set (liger-bot's own pipelines)
REPORT = (
    "import json, os, sys; print(json.dumps({'env': dict(os.environ), 'cwd': os.getcwd(), 'argv': sys.argv,"
    " 'path0': sys.path[0], 'name': __name__, 'torch': 'torch' in sys.modules, 'triton': 'triton' in sys.modules}))"
)


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    root = tmp_path_factory.mktemp("target")
    (root / "kernel_kind.py").write_text("import triton\n@triton.jit\ndef k(x):\n    pass\nprint(type(k).__name__)\n")
    (root / "probe_main.py").write_text("import sys\nprint(__name__, sys.argv[1:], sys.path[0])\nraise SystemExit(5)\n")
    os.environ["GITHUB_TOKEN"] = "ghs_secret"  # the bot's own environment holds it; no gate child may see it
    try:
        with warm_python.WarmRunner(verify.LocalRunner(), root, ENV) as runner:
            yield runner, root
    finally:
        del os.environ["GITHUB_TOKEN"]


def both(warm, argv, env=ENV, timeout=60):
    runner, root = warm
    before = runner.forked
    forked = runner.run([sys.executable, *argv], root, env, timeout)
    assert runner.forked == before + 1, "not forked"
    fresh = verify.LocalRunner().run([sys.executable, *argv], root, env, timeout)
    return forked, fresh


def test_a_forked_child_gets_the_gates_env_cwd_argv_and_main_as_a_fresh_one_and_no_secret(warm):
    forked, fresh = both(warm, ["-c", REPORT, "a", "b"])
    mine, theirs = json.loads(forked.output), json.loads(fresh.output)
    assert mine["torch"] and not theirs["torch"]  # the one difference: torch was there before the command ran
    assert {k: v for k, v in mine.items() if k != "torch"} == {k: v for k, v in theirs.items() if k != "torch"}
    assert mine["env"] == {**allowed_env(), **ENV} and "GITHUB_TOKEN" not in mine["env"]
    assert mine["argv"] == ["-c", "a", "b"] and mine["path0"] == "" and mine["name"] == "__main__"
    assert not mine["triton"]


def test_a_module_an_exception_and_an_exit_code_read_as_from_a_fresh_interpreter(warm):
    for argv in (["-m", "probe_main", "x"], ["-c", "raise ValueError('boom')"], ["-c", "import sys; sys.exit(3)"]):
        forked, fresh = both(warm, argv)
        assert (forked.returncode, forked.output) == (fresh.returncode, fresh.output), argv
    assert forked.returncode == 3
    forked, _ = both(warm, ["-m", "probe_main", "x"])
    assert forked.returncode == 5 and forked.output.startswith(f"__main__ ['x'] {warm[1]}")


def test_a_crash_or_a_hang_is_that_commands_failure_and_the_next_one_still_forks(warm):
    runner, root = warm
    crash = "import os, signal; print('before', flush=True); os.kill(os.getpid(), signal.SIGSEGV)"
    result = runner.run([sys.executable, "-c", crash], root, ENV, 60)
    assert (result.returncode, result.output) == (-11, "before\n")
    hang = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    hang += "print('hanging', flush=True); time.sleep(60)"
    result = runner.run([sys.executable, "-c", hang], root, ENV, 3)
    assert result.returncode == -9 and result.output.endswith("hanging\n\n[timed out after 3s]")
    forked, _ = both(warm, ["-c", "print('next')"])
    assert forked.output == "next\n"


def test_triton_interpret_is_set_per_command_and_another_env_runs_fresh(warm):
    runner, root = warm
    forked, fresh = both(warm, ["-m", "kernel_kind"], {**ENV, "TRITON_INTERPRET": "1"})
    assert forked.output == fresh.output == "InterpretedFunction\n"
    forked, fresh = both(warm, ["-m", "kernel_kind"], {**ENV, "TRITON_INTERPRET": "0"})  # the suite's env may set 1
    assert forked.output == fresh.output == "JITFunction\n"
    before = runner.forked
    other = runner.run([sys.executable, "-c", REPORT], root, {**ENV, "HF_DATASETS_OFFLINE": "1"}, 60)
    assert runner.forked == before and not json.loads(other.output)["torch"]  # not the server's env: fresh


def test_a_server_that_cannot_import_torch_leaves_every_command_to_run_fresh(tmp_path):
    (tmp_path / "torch.py").write_text("raise ImportError('a target that shadows torch')\n")
    with warm_python.WarmRunner(verify.LocalRunner(), tmp_path, ENV) as runner:
        result = runner.run([sys.executable, "-c", "print('fresh')"], tmp_path, ENV, 60)
        assert (result.returncode, result.output, runner.forked, runner.broken) == (0, "fresh\n", 0, True)


def test_verify_on_a_cpu_host_forks_the_gates_and_starts_the_import_gate_fresh(tmp_path):
    probe = [sys.executable, "-c", "import sys; print('torch' in sys.modules)"]

    def gate(name, fresh):
        def run(profile, root, runner):
            proc = (warm_python.fresh(runner) if fresh else runner).run(probe, root, verify.target_env(), 60)
            return GateResult(name, GateStatus.PASS, proc.output.strip())

        return (name, run)

    gates = (gate("warm", False), gate("fresh", True), gate("warm again", False))
    results = verify.verify(None, tmp_path, verify.LocalRunner(has_gpu=False), gates=gates)
    assert [r.detail for r in results] == ["True", "False", "True"]
    results = verify.verify(None, tmp_path, verify.LocalRunner(has_gpu=True), gates=gates[:1])
    assert [r.detail for r in results] == ["False"]  # a GPU host's gates run as before
