"""`liger-bot perf`: the refusal on a host without a GPU, what --profile-only prints, and the arguments it refuses."""

from __future__ import annotations

import io
import json

import pytest

from bot.cli import program
from pipelines.outcome import ExitStatus


def perf(*argv: str) -> tuple[ExitStatus, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = program(["perf", *argv], {}, out, err)
    return status, out.getvalue(), err.getvalue()


def test_without_a_gpu_it_refuses_with_the_reason_and_touches_nothing(liger_checkout, tmp_path):
    status, out, err = perf("fused_add_rms_norm", "--repo", str(liger_checkout.root), "--out", str(tmp_path / "w"))
    assert status is ExitStatus.REFUSED and out == ""
    assert "no CUDA device visible to torch" in err and "--profile-only" in err
    assert not (tmp_path / "w").exists() and liger_checkout.git.dirty_paths() == []


def test_profile_only_prints_the_kernel_its_launches_benchmark_and_tests(liger_checkout):
    status, out, _ = perf("fused_add_rms_norm", "--repo", str(liger_checkout.root), "--profile-only")
    assert status is ExitStatus.OK
    assert "`src/liger_kernel/ops/fused_add_rms_norm.py` (432 lines)" in out
    assert "| `_fused_add_rms_norm_backward_kernel` | 124 | X_dtype, rows_per_program, casting_mode, BLOCK_SIZE" in out
    assert (
        "| `fused_add_rms_norm_backward` | `grid` | BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps, num_stages=num_stages |"
        in out
    )
    assert "`fused_add_rms_norm_forward:243 BLOCK_SIZE, num_warps = calculate_settings(n_cols)`" in out
    assert "`fused_add_rms_norm_backward:315 grid = (sm_count,)`" in out
    assert "benchmark: `benchmark/scripts/benchmark_fused_add_rms_norm.py` (setup `setup_fused_add_rms_norm`" in out
    assert (
        "unit tests: `test/transformers/test_fused_add_rms_norm.py` (test_correctness, test_correctness_functional)"
        in out
    )
    assert "1024x4096, 2048x4096, 4096x4096, 8192x4096, 4096x16384; target: 4096x16384, pass `backward`" in out
    assert "| Unused output gradients as None | yes |" in out and "| dX without a memset | no |" in out


def test_profile_only_json_for_rms_norm_with_its_own_sizes(liger_checkout):
    status, out, _ = perf(
        "rms_norm", "--repo", str(liger_checkout.root), "--profile-only", "--json", "--pass", "full",
        "--size", "16384x16384",
    )  # fmt: skip
    profile = json.loads(out)
    assert status is ExitStatus.OK and profile["target_pass"] == "full"
    assert profile["target_sizes"] == ["16384x16384"] and profile["sizes"][-1] == "16384x16384"
    source = profile["source"]
    assert [j["name"] for j in source["jit_functions"]] == [
        "_rms_norm_forward_kernel",
        "_rms_norm_backward_kernel",
        "_block_rms_norm_forward_kernel",
        "_block_rms_norm_backward_kernel",
    ]
    assert source["sweep"]["liger_provider"] == "liger" and source["sweep"]["reference_provider"] == "huggingface"
    assert {row["key"]: row["applies"] for row in profile["catalogue"]}["empty_dx"] is True


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["relu17"], "needs src/liger_kernel/ops/relu17.py"),
        (["../etc"], "not a valid kernel name"),
        (["rms_norm", "--size", "4096"], "is not ROWSxHIDDEN"),
        (["rms_norm", "--target-speedup", "0"], "positive number"),
        (["rms_norm", "--max-variants", "9"], "1 to 8"),
    ],
)
def test_it_refuses_what_it_cannot_do(liger_checkout, argv, message):
    status, _, err = perf(argv[0], "--repo", str(liger_checkout.root), "--profile-only", *argv[1:])
    assert status is ExitStatus.REFUSED and message in err


def test_the_app_adapter_profiles_on_any_host_and_refuses_to_optimise_without_a_gpu(liger_checkout):
    from pipelines.contract import Request
    from pipelines.outcome import PipelineError
    from pipelines.perf.job import PIPELINE as PERF

    request = Request(liger_checkout, "rms_norm", options={"pass": "full", "target-speedup": "1.2"})
    understood = PERF.understand(request)
    assert understood.branch == "liger-bot/perf-rms-norm" and understood.profile["target_pass"] == "full"
    table = PERF.profile_table(understood.profile)
    assert "| target | `full` at 4096x16384 |" in table and "empty_dx" in table and "unused_grad_none" not in table
    with pytest.raises(PipelineError, match="no CUDA device"):
        PERF.act_verify(request, lambda _: None)
    assert liger_checkout.git.dirty_paths() == []
