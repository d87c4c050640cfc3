"""perf_gpu.sh's tables from each kernel's run.json: a kernel's before / after per pass and size, and a generated
kernel's measurement beside Liger's hand-written one at the sizes both timed."""

from __future__ import annotations

import json

from benchmarks import perf_tables


def fake_run(liger: dict, best_times: dict | None = None) -> dict:
    zeros = {p: {s: 1.0 for s in by_size} for p, by_size in liger.items()}
    variants = (
        [{"name": "v1", "title": "Launch sweep", "status": "ACCEPTED", "gain": 0.5, "reasons": [], "times": best_times}]
        if best_times
        else []
    )
    return {
        "profile": {
            "measured": {"times": {"liger": liger, "eager": zeros, "compile": zeros}, "device": {"name": "NVIDIA H200"}}
        },
        "variants": variants,
        "best": "v1" if best_times else "v0",
        "stop": "target met",
        "seconds": 12.0,
        "branch": "liger-bot/perf-x" if best_times else "",
        "gates": [{"name": "unit tests (GPU)", "status": "PASS", "detail": "300 passed"}],
        "not_judged": [],
    }


def write(out, name, run):
    (out / name).mkdir(parents=True)
    (out / name / "run.json").write_text(json.dumps(run))


def test_a_kernel_table_shows_before_and_after_and_a_missing_run_says_so(tmp_path):
    write(tmp_path, "rms_norm", fake_run({"full": {"16384x16384": 2.0}}, {"full": {"16384x16384": 1.0}}))
    lines = perf_tables.tables(tmp_path, ["rms_norm", "layer_norm"], [])
    assert "| full | 16384x16384 | 2.0000 | 1.0000 | 2.00x | 1.0000 | 1.0000 | 1.00x | - / - | judged |" in lines
    assert "gate unit tests (GPU): PASS 300 passed" in lines
    assert lines[-1] == "\n## layer_norm: no run.json (see layer_norm.log)"


def test_the_generated_kernel_is_compared_with_liger_at_the_sizes_both_timed(tmp_path):
    write(tmp_path, "rms_norm", fake_run({"full": {"16384x16384": 1.5, "4096x4096": 0.1}}))
    write(tmp_path, "llama_rms_norm", fake_run({"full": {"16384x16384": 2.0}, "forward": {"4096x4096": 0.1}}))
    lines = perf_tables.against_table(
        "llama_rms_norm",
        perf_tables.load(tmp_path, "llama_rms_norm"),
        "rms_norm",
        perf_tables.load(tmp_path, "rms_norm"),
    )
    assert lines[3:] == ["| full | 16384x16384 | 2.0000 | 1.5000 | 0.75x |"]  # slower: below 1x
