"""`demo recsys --forms`: each variant in its own bounded process, alternating rounds, the forms held to the best
hand-written alternative."""

from pipelines.fuse import demo_forms


def test_a_form_runs_in_its_own_process_and_reports_what_the_pass_replaced():
    split = demo_forms.run_child(demo_forms.BY_LABEL["split + pass"], "cpu", 2, "aot_eager", limit_s=120)
    assert split["status"] == "ok" and split["grads_match"] and split["step_ms"] > 0
    assert split["replaced"]["loop_slice_mean_stack"] == 1  # captured before Dynamo: no graph per batch
    assert split["graphs_compiled"] <= 2


def test_a_variant_past_its_limit_is_stopped_and_said_so():
    result = demo_forms.run_child(demo_forms.BY_LABEL["padded mask + pass"], "cpu", 2, "aot_eager", limit_s=1)
    assert result == {"status": "timeout", "note": "did not finish in 1 s (stopped)"}


def _ok(ms, **extra):
    return {"status": "ok", "step_ms": ms, "grads_match": True, **extra}


def test_a_form_is_as_fast_only_within_the_threshold_of_the_best_alternative_median():
    results = {
        "naive loop + pass": [_ok(1.00), _ok(1.04), _ok(1.02)],  # median 1.02: within 3% of 1.00
        "split + pass": [_ok(1.10), _ok(0.90), _ok(1.20)],  # median 1.10: not, though one round was faster
        "padded mask + pass": [{"status": "timeout", "note": "did not finish in 90 s (stopped)"}],
        "index_add + pass": [{"status": "crashed", "note": "TorchRuntimeError: ..."}],
        "EmbeddingBag eager": [_ok(1.00), _ok(0.99), _ok(1.30)],
        "segment_reduce compiled": [_ok(1.50)] * 3,
    }
    report = demo_forms.summarise("cuda", "inductor", 20, 3, results)
    rows = report["variants"]
    assert (report["best_alternative"], report["best_alternative_ms"]) == ("EmbeddingBag eager", 1.00)
    assert rows["naive loop + pass"]["at_least_as_fast"] and not rows["split + pass"]["at_least_as_fast"]
    assert (
        rows["padded mask + pass"]["note"].startswith("did not finish") and "vs_best" not in rows["padded mask + pass"]
    )
    assert (report["forms_at_least_as_fast"], report["forms"], report["none_crashed"]) == (1, 4, False)
    assert "did not finish in 90 s" in demo_forms.to_text(report)


def test_rounds_rotate_the_order_and_a_timed_out_variant_is_not_run_again(monkeypatch):
    calls = []

    def child(variant, device, steps, inner, limit_s):
        calls.append(variant.label)
        if variant.label == "padded mask + pass":
            return {"status": "timeout", "note": f"did not finish in {limit_s:.0f} s (stopped)"}
        return _ok(1.0)

    def interleaved(variants, device, steps, inner, limit_s):
        calls.append(("interleaved", [v.label for v in variants], limit_s))
        return {"status": "ok", "step_ms": {v.label: 1.0 for v in variants}}

    monkeypatch.setattr(demo_forms, "run_child", child)
    monkeypatch.setattr(demo_forms, "run_interleaved", interleaved)
    only = ["split + pass", "padded mask + pass", "EmbeddingBag eager"]
    report = demo_forms.run("cpu", steps=2, rounds=3, only=only, limit_s=10)
    assert calls[:-1] == [*only, "EmbeddingBag eager", "split + pass", "EmbeddingBag eager", "split + pass"]
    assert calls[-1] == ("interleaved", ["split + pass", "EmbeddingBag eager"], 10 * demo_forms.INTERLEAVED_LIMITS)
    assert report["variants"]["split + pass"]["rounds_ok"] == 3 and report["forms_at_least_as_fast"] == 1


def test_the_verdict_comes_from_the_interleaved_run_when_there_is_one():
    results = {"split + pass": [_ok(1.30)], "EmbeddingBag eager": [_ok(1.00)]}  # another process was slower
    same_process = {"status": "ok", "step_ms": {"split + pass": 1.01, "EmbeddingBag eager": 1.00}}
    report = demo_forms.summarise("cuda", "inductor", 20, 1, results, same_process)
    row = report["variants"]["split + pass"]
    assert report["judged_by"] == "interleaved in one process"
    assert (row["median_ms"], row["interleaved_ms"], row["at_least_as_fast"]) == (1.30, 1.01, True)
    failed = {"status": "timeout", "note": "did not finish in 270 s (stopped)"}
    report = demo_forms.summarise("cuda", "inductor", 20, 1, results, failed)
    assert report["judged_by"] == "per-process medians" and not report["variants"]["split + pass"]["at_least_as_fast"]
    assert "interleaved run: timeout did not finish in 270 s" in demo_forms.to_text(report)


def test_the_interleaved_child_times_every_variant_from_one_set_of_weights():
    chosen = [demo_forms.BY_LABEL["index_add + pass"], demo_forms.BY_LABEL["EmbeddingBag eager"]]
    result = demo_forms.run_interleaved(chosen, "cpu", 3, "aot_eager", limit_s=150)
    assert result["status"] == "ok", result
    assert set(result["step_ms"]) == {"index_add + pass", "EmbeddingBag eager"}
    assert all(ms > 0 for ms in result["step_ms"].values())


def test_an_interrupted_run_reports_the_variants_that_finished(monkeypatch):
    def child(variant, device, steps, inner, limit_s):
        if variant.label == "segment_reduce + pass":
            raise KeyboardInterrupt  # Ctrl-C, or the SIGTERM of the caller's timeout (the CLI raises it)
        return _ok(1.0)

    monkeypatch.setattr(demo_forms, "run_child", child)
    report = demo_forms.run("cpu", steps=2, rounds=1)
    rows = report["variants"]
    assert report["interrupted"] and rows["split + pass"]["status"] == "ok"
    assert rows["segment_reduce + pass"]["status"] == "not run" and rows["index_add compiled"]["status"] == "not run"
    assert "INTERRUPTED" in demo_forms.to_text(report)


def test_sigterm_to_the_cli_prints_what_finished_and_exits_interrupted():
    """The real CLI process stopped by SIGTERM (what `timeout` sends) after its first variant reported."""
    import json
    import signal
    import subprocess
    import sys

    command = [sys.executable, "-c", "import sys; from bot.cli import main; sys.exit(main())"]
    command += ["demo", "recsys", "--forms", "--device", "cpu", "--steps", "2", "--json"]
    cli = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in cli.stderr:
            if "round 1: naive loop + pass:" in line:
                break
        cli.send_signal(signal.SIGTERM)
        out, _ = cli.communicate(timeout=60)
    finally:
        cli.kill()
    report = json.loads(out.strip().splitlines()[-1])
    assert cli.returncode == 130 and report["interrupted"]
    assert report["variants"]["naive loop + pass"]["status"] == "ok"
    assert report["variants"]["index_add compiled"]["status"] == "not run"
