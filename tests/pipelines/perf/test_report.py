"""What the perf pipeline writes from a GPU run's measurements (given here as the children's JSON would hold them):
the profile's bound and compiled-kernel tables, Nsight Compute's CSV, the comparison and the PR body."""

from __future__ import annotations

import pytest

from pipelines.perf import pipeline
from pipelines.perf import report
from pipelines.perf import rules as r
from pipelines.perf.pipeline import Loop
from pipelines.perf.pipeline import VariantRecord

SIZES = ("1024x4096", "2048x4096", "4096x4096", "8192x4096", "4096x16384")


def times(scale: float, target: float = 1.0) -> dict:
    base = {"forward": 0.05, "backward": 0.1, "full": 0.16}
    return {
        p: {s: ms * scale * (target if (p, s) == ("backward", "4096x16384") else 1.0) for s in SIZES}
        for p, ms in base.items()
    }


@pytest.fixture
def loop(liger_checkout, tmp_path) -> Loop:
    _, profile = pipeline.understand("fused_add_rms_norm", liger_checkout.root)
    profile.measured = {
        "device": {"name": "NVIDIA H200"},
        "times": {"liger": times(1.0, 3.0), "eager": times(2.0), "compile": times(0.8)},
        "copy_gbps": 4200.0,
        "bytes": {s: {"forward": 4 * 2**27, "backward": 4 * 2**27, "full": 8 * 2**27} for s in SIZES},
        "facts": [
            {
                "kernel": "_fused_add_rms_norm_backward_kernel",
                "constants": {"BLOCK_SIZE": 16384, "rows_per_program": 32, "casting_mode": 0},
                "num_warps": 16,
                "num_stages": 2,
                "shared": 64,
                "n_regs": 128,
                "n_spills": 412,
            }
        ],
    }
    rules = r.Rules("backward", ("4096x16384",))
    loop = Loop(liger_checkout, profile, pipeline.Options(), tmp_path, lambda _: None, rules, "original")
    loop.times = {"v0": times(1.0, 3.0), "v1": times(1.0, 2.9), "v2": times(1.0, 1.5)}
    loop.records = [
        VariantRecord("v1", "Launch sweep", "v0", r.Verdict(r.NO_GAIN, 0.0034), loop.times["v1"], {"ok": True}),
        VariantRecord("-", "dX without a memset", "v1", skipped="dX is not allocated with torch.zeros_like"),
        VariantRecord("v2", "Unused output gradients as None", "v0", r.Verdict(r.ACCEPTED, 1.0), loop.times["v2"]),
        VariantRecord("v3", "dW over 2 programs per SM", "v2", r.Verdict(r.REJECTED, 0.1, ("tests failed: 1 failed",))),
    ]
    loop.state = r.LoopState(variants=3, best="v2")
    return loop


def test_the_pr_body_holds_before_and_after_for_every_size_and_pass_and_the_variants_log(loop):
    body = report.pr_body(loop, "target met by v2", [])
    assert "Winner **v2: Unused output gradients as None** (built on v0). Stopped: target met by v2." in body
    table = body.split("### Before / after")[1].split("<details>")[0]
    assert table.count("\n| ") == 1 + 3 * len(SIZES)  # header + every pass x size
    assert "| backward | 4096x16384 | 0.3000 | 0.1500 | 2.00x | 0.2000 | 0.0800 | 0.53x |" in table
    variants = body.split("<summary>Variants</summary>")[1].split("</details>")[0]
    assert "| v2 | Unused output gradients as None | v0 | 0.1500 (-50.0%) | ACCEPTED  |" in variants
    assert "| v3 | dW over 2 programs per SM | v2 | - | REJECTED tests failed: 1 failed |" in variants
    assert "not applicable: dX is not allocated with torch.zeros_like" in variants
    assert "Only `src/liger_kernel/ops/fused_add_rms_norm.py` changes." in body
    assert report.commit_message(loop).startswith(
        "perf(fused_add_rms_norm): backward 2.00x at 4096x16384 (Unused output gradients as None)"
    )


def test_the_profile_states_the_bound_against_the_copy_ceiling_and_the_compiled_kernels(loop):
    bound = loop.profile.bound()
    gbps = 4 * 2**27 / 0.3e-3 / 1e9
    assert bound["backward"]["4096x16384"] == {"gbps": round(gbps), "pct_copy": round(100 * gbps / 4200)}
    assert loop.profile.classification().startswith(f"latency / occupancy-bound: {round(100 * gbps / 4200)}%")
    markdown = loop.profile.to_markdown()
    assert (
        "| `_fused_add_rms_norm_backward_kernel` | BLOCK_SIZE=16384, rows_per_program=32 | 16 | 2 | 128 | 412 | 64 |"
        in (markdown)
    )
    assert "### Bound (copy ceiling 4200 GB/s, same run)" in markdown


def test_a_run_without_a_winner_shows_the_baseline_beside_eager_and_compile(loop):
    loop.state = r.LoopState(variants=1, best="v0")
    body = report.pr_body(loop, "diminishing returns", [])
    assert "No variant beat the kernel as it is (diminishing returns)" in body
    assert "| backward | 4096x16384 | 0.3000 | 0.2000 | 0.0800 |" in body


NCU_CSV = """==PROF== Connected to process 123
==PROF== Profiling "_fused_add_rms_norm_backward_kernel" - 0: 0%....50%....100% - 9 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","123","python3","127.0.0.1","_fused_add_rms_norm_backward_kernel","1","7","(512, 1, 1)","(132, 1, 1)","0","9.0","GPU Speed Of Light Throughput","DRAM Throughput","%","61.20"
"0","123","python3","127.0.0.1","_fused_add_rms_norm_backward_kernel","1","7","(512, 1, 1)","(132, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Duration","us","301.50"
"0","123","python3","127.0.0.1","_fused_add_rms_norm_backward_kernel","1","7","(512, 1, 1)","(132, 1, 1)","0","9.0","Occupancy","Achieved Occupancy","%","24.90"
"0","123","python3","127.0.0.1","_fused_add_rms_norm_backward_kernel","1","7","(512, 1, 1)","(132, 1, 1)","0","9.0","Occupancy","Block Limit Shared Mem","block","8"
"""


def test_nsight_computes_csv_is_read_into_the_named_metrics():
    parsed = report.parse_ncu(NCU_CSV, pipeline.NCU_METRICS)
    assert parsed == {
        "_fused_add_rms_norm_backward_kernel": {
            "DRAM Throughput": "61.20 %",
            "Duration": "301.50 us",
            "Achieved Occupancy": "24.90 %",
        }
    }
    assert report.parse_ncu("==ERROR== ERR_NVGPUCTRPERM", pipeline.NCU_METRICS) == {}


def test_a_rejection_is_timed_again_in_alternating_rounds_of_v0_and_the_variant(loop, monkeypatch):
    """The loop re-times only the regressed points, v0 and the variant in turn, each with its own kernel source."""
    noisy = times(1.0, 1.5)
    noisy["forward"]["4096x4096"] *= 1.5  # one bad median
    children, sources = [], []

    def fake_child(checkout, out_dir, name, spec):
        children.append((name, spec["passes"], [s["key"] for s in spec["sizes"]]))
        sources.append(checkout.path(loop.ops).read_text())
        return {"times": {"liger": {"forward": {"4096x4096": 0.05}}}}  # the same for both: noise, not a regression

    monkeypatch.setattr(pipeline, "run_child", fake_child)
    rejected = r.judge(loop.rules, loop.times["v0"], loop.times["v0"], noisy, True)
    verdict = loop.recheck("v4", "variant source", noisy, "v0", rejected)
    assert rejected.status == r.REJECTED and verdict.status == r.ACCEPTED
    assert [c[0] for c in children] == [f"v4_recheck{i}_{label}" for i in range(3) for label in ("v0", "v4")]
    assert {(tuple(c[1]), tuple(c[2])) for c in children} == {(("forward",), ("4096x4096",))}
    assert sources == ["original", "variant source"] * 3  # each child ran the kernel it was timing
