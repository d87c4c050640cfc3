"""The chunked-loss GPU run's table: each gate's status, peak memory from verify's benchmark (exact per process),
time from the solo benchmark (contended ones marked), Liger's own class only where the loss has one."""

from __future__ import annotations

from benchmarks import chunked_loss_gpu


def _sides(chunked, unfused, **more):
    sides = {"liger": {"ms": chunked[0], "peak_mb": chunked[1]}, "torch": {"ms": unfused[0], "peak_mb": unfused[1]}}
    return {"sides": sides | {name: {"ms": ms, "peak_mb": mb} for name, (ms, mb) in more.items()}}


def _row(name, against=None, bench=None, solo=None, gates=None, rc=0):
    gates = gates or {"checkstyle": "PASS", "unit tests (GPU)": "PASS", "benchmark (GPU)": "PASS"}
    return {
        "name": name,
        "against": against,
        "rc": rc,
        "seconds": 91.6,
        "gates": {gate: {"status": status, "detail": ""} for gate, status in gates.items()},
        "bench": bench,
        "solo": solo,
    }


def test_losses_file_names_liger_class_or_none():
    text = "# name branch against\nslic liger-bot/chunked-loss-slic -\n\nloo_dpo b test.x:LigerLMHeadDPO\nipo b2\n"
    losses = chunked_loss_gpu.read_losses(text)
    assert [(loss["name"], loss["against"]) for loss in losses] == [
        ("slic", None),
        ("loo_dpo", "test.x:LigerLMHeadDPO"),
        ("ipo", None),
    ]


def test_table_takes_memory_from_verify_and_time_from_the_solo_run():
    loo = _row(
        "loo_dpo",
        "test.chunked_loss.test_dpo_loss:LigerLMHeadDPO",
        bench=_sides((90.0, 2000.0), (50.0, 10000.0)),
        solo=_sides((40.0, 2100.0), (30.0, 10000.0), LigerLMHeadDPO=(38.0, 1900.0)),
    )
    new = _row("slic", bench=_sides((80.0, 1500.0), (45.0, 6000.0)))
    lines = chunked_loss_gpu.table([loo, new]).splitlines()
    assert lines[0].startswith(
        "| loss | s | exit | checkstyle | unit tests (GPU) | benchmark (GPU) | Liger's own tests | peak MB chunked"
    )
    assert (
        lines[2] == "| loo_dpo | 92 | 0 | PASS | PASS | PASS | - | 2000 | 10000 | 1900 | 80.0% | 40.0 | 30.0 | 38.0 |"
    )
    assert lines[3] == "| slic | 92 | 0 | PASS | PASS | PASS | - | 1500 | 6000 | n/a | 75.0% | 80.0~ | 45.0~ | n/a |"


def test_liger_own_tests_against_the_generated_class_show_their_summary(tmp_path):
    dest, work, runs = tmp_path / "dest", tmp_path / "work", tmp_path / "runs"
    (dest / "liger_tests").mkdir(parents=True)
    (work / "test" / "chunked_loss").mkdir(parents=True)
    (runs / "loo_kto").mkdir(parents=True)
    body = "def test_same():\n    assert 1 == 1\n\n\ndef test_other():\n    assert 1 == 2\n"
    (dest / "liger_tests" / "loo_kto.py").write_text(body)
    (dest / "liger_tests" / "loo_kto.select").write_text("same or other\n")
    row = _row("loo_kto", "test.chunked_loss.test_kto_loss:LigerLMHeadKTO")
    chunked_loss_gpu.liger_tests(row, dest, work, runs, 60)
    assert row["liger_tests"]["rc"] == 1 and row["liger_tests"]["summary"].startswith("1 failed, 1 passed")
    assert row["liger_tests"]["failed"] == [
        "FAILED test/chunked_loss/test_loo_kto_swapped.py::test_other - assert 1 == 2"
    ]
    assert "| 1 failed, 1 passed in " in chunked_loss_gpu.table([row]).splitlines()[2]


def test_a_loss_stopped_or_skipped_shows_dashes():
    stopped = _row("ipo", gates={"checkstyle": "PASS"}, rc="timeout")
    cpu_host = _row("slic", gates={"checkstyle": "PASS", "unit tests (GPU)": "SKIP", "benchmark (GPU)": "SKIP"})
    lines = chunked_loss_gpu.table([stopped, cpu_host]).splitlines()
    assert lines[2] == "| ipo | 92 | timeout | PASS | - | - | - | - | - | n/a | - | - | - | n/a |"
    assert lines[3] == "| slic | 92 | 0 | PASS | SKIP | SKIP | - | - | - | n/a | - | - | - | n/a |"
