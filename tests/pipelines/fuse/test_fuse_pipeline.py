"""The fuse pipeline on a small model in a fresh target checkout, and the demo's --json shape (through the CLI)."""

import io
import json
import os
import subprocess
from pathlib import Path

import pytest

from bot.cli import program
from pipelines.outcome import ExitStatus
from tests.pipelines.fuse import tiny_model


@pytest.mark.slow
def test_fuse_writes_a_verified_pass_on_a_branch(tmp_path, liger_checkout):
    model = tmp_path / "model.py"
    model.write_text(tiny_model.SOURCE)
    out, err = io.StringIO(), io.StringIO()
    status = program(["fuse", f"{model}:make", "--repo", str(liger_checkout.root), "--json"], {}, out, err)
    assert status == ExitStatus.OK, err.getvalue()
    result = json.loads(out.getvalue())
    assert result["profile"]["chains"][0]["ops"] == ["call_function:mul", "call_function:add", "call_function:tanh"]
    assert result["files"][:2] == [
        "src/liger_kernel/fuse_passes/fused_mul_add_tanh.py",
        "src/liger_kernel/fuse_passes/__init__.py",
    ]
    # the runtime the pass and the training job import, copied beside the pass (no liger-bot needed there)
    assert "src/liger_kernel/fuse_passes/runtime/pooling_kernels.py" in result["files"]
    gates = {g["name"]: g for g in result["gates"]}
    assert gates["numerics vs eager"]["status"] == "PASS"
    assert gates["runs without liger-bot"]["status"] == "PASS", gates["runs without liger-bot"]["detail"]
    assert gates["checkstyle"]["status"] == "PASS"  # the target's ruff check and format --check on the pass
    # a CPU host's timings are no speed claim, however they come out
    assert gates["step time"]["status"] == "SKIP" and "alternating rounds" in gates["step time"]["detail"]
    assert len(result["figures"]["step_ms_rounds"]["with"]) == 5
    assert result["figures"]["replaced"] == {"fused_mul_add_tanh": 1}
    written = liger_checkout.git.run("show", f"{result['branch']}:{result['files'][0]}")
    assert "def fused_mul_add_tanh_pattern(x, e0):" in written and "def register(registry):" in written
    assert "pipelines" not in written
    # the CLI's end state: the user's branch again, clean; the pass committed on its branch; the draft PR recorded
    assert liger_checkout.git.current_branch() == "main" and not liger_checkout.git.dirty_paths()
    assert liger_checkout.git.run("rev-list", "--count", f"main..{result['branch']}").strip() == "1"
    (record,) = [json.loads(p.read_text()) for p in liger_checkout.beside("issues").glob("*.json")]
    assert (record["head"], record["base"]) == (result["branch"], "main") and "| checkstyle | PASS |" in record["body"]
    # the body the App would open the PR with, beside the checkout (as every pipeline's CLI run leaves it)
    body_file = Path(result["pr_body_file"])
    assert body_file.parent == liger_checkout.beside("") and body_file.name == "fuse-fused-mul-add-tanh.md"
    body = body_file.read_text()
    assert "A torch.compile pass for" in body and "| numerics vs eager | PASS |" in body
    assert "liger-bot fuse" in body and not body.startswith("# fuse:")  # the title is the PR's, not the body's


def test_fuse_refuses_a_malformed_spec(liger_checkout):
    err = io.StringIO()
    status = program(["fuse", "model.py:not-a-name", "--repo", str(liger_checkout.root)], {}, io.StringIO(), err)
    assert status == ExitStatus.REFUSED and "path/to/model.py:Factory" in err.getvalue()


@pytest.mark.slow
def test_demo_recsys_on_cpu_runs_from_a_plain_shell(liger_bot_exe):
    # a user's shell has no TRITON_INTERPRET: the CLI imports triton for the GPU before the demo starts, so the
    # kernels must run in a process that had the interpreter on from its start
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    command = [liger_bot_exe, "demo", "recsys", "--device", "cpu", "--steps", "3", "--json", "--compile-limit", "120"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)  # the documented fields (one run of the demo for both checks: suite time)
    assert {"device", "eager_ms", "compile_ms", "pass_ms", "replaced", "loss_max_abs_diff", "grads_match"} <= set(
        result
    )
    assert result["embedding_bag_ms"] > 0  # the hand-written baseline a recsys model reaches for
    assert result["compile_ms"] > 0 and result["compile_note"] == ""  # the CPU size compiles inside the limit
    # the loop captured once; the gather fused into its pool once per graph compiled (the kernel named)
    assert result["replaced"]["loop_slice_mean_stack"] == 1 and result["grads_match"] is True
    assert result["replaced"]["embedding_partitioned_mean"] == result["pass_graphs_compiled"]
    assert "embedding_partitioned_mean -> triton_embedding_partitioned_mean" in result["replaced_by"]
    assert result["loss_max_abs_diff"] < 1e-5 and result["pass_graphs_compiled"] <= 2


def test_plain_compile_is_stopped_at_its_limit_and_said_not_awaited():
    """The CUDA demo's plain torch.compile of the naive loop compiles for minutes: a child, killed at the limit."""
    import time

    from pipelines.fuse import demo

    started = time.monotonic()
    plain = demo._plain_compile("cpu", 2, "aot_eager", 1.0)  # the child cannot even import torch in a second
    assert time.monotonic() - started < 10
    assert plain == {"note": "did not compile in 1 s (stopped; plain torch.compile unrolls the loop)"}
    result = {
        "device": "cuda", "steps": 2, "eager_ms": 1.0, "embedding_bag_ms": 0.5, "compile_ms": None,
        "compile_note": plain["note"], "pass_ms": 0.4, "pass_first_step_s": 1.0, "pass_graphs_compiled": 2,
        "replaced": {}, "loss_max_abs_diff": 0.0, "grads_match": True,
    }  # fmt: skip
    assert "torch.compile             did not compile in 1 s" in demo.to_text(result)
