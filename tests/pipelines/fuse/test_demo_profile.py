import json

from pipelines.fuse import demo_profile


def test_the_profile_covers_three_variants_and_writes_small_tables(tmp_path):
    report = demo_profile.profile("cpu", 1, tmp_path, warmup=2)
    assert set(report["variants"]) == {"embedding_bag_eager", "embedding_bag_compiled", "our_pass"}
    assert json.loads((tmp_path / "profile.json").read_text()) == report
    text = (tmp_path / "profile.md").read_text()
    for name, variant in report["variants"].items():
        assert variant["wall_ms_per_step"] > 0 and variant["steps"] == 1
        assert f"| {name} |" in text
        assert variant["top"] and all(row["count"] >= 1 for row in variant["top"])
    ours = {row["name"] for row in report["variants"]["our_pass"]["top"]}
    assert "liger_fuse::embedding_partitioned_mean" in ours  # the pass's fused op ran, under the profiler
    bag = {row["name"] for row in report["variants"]["embedding_bag_eager"]["top"]}
    assert "aten::_embedding_bag" in bag
    assert isinstance(report["variants"]["our_pass"]["host_reads_per_step"], dict)


def test_busy_time_is_the_union_of_intervals():
    assert demo_profile._union_us([(0, 10), (5, 12), (20, 25), (21, 22)]) == 17


def test_host_time_is_per_step_and_led_by_the_op_with_the_most_self_time():
    import torch

    x, tiny = torch.randn(768, 768), torch.ones(4)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(4):  # 4 "steps": one large matmul and a few tiny adds each
            x @ x
            for _ in range(3):
                tiny + 1
    rows = demo_profile._host_top(prof, steps=4)
    names = [row["name"] for row in rows]
    assert names[0] in ("aten::mm", "aten::matmul")  # the costliest self time leads
    add = next(row for row in rows if row["name"] == "aten::add")
    assert add["calls_per_step"] == 3  # counts divided by the steps
    assert all(row["total_us_per_step"] >= row["self_us_per_step"] > 0 for row in rows)
    text = demo_profile.to_markdown(
        {"device": "cuda", "torch": "t", "variants": {"v": {"wall_ms_per_step": 1, "gpu_busy_ms_per_step": 0.5,
         "host_gap_ms_per_step": 0.5, "kernel_launches_per_step": 1, "device_events_per_step": 1,
         "host_reads_per_step": {}, "top": [], "host_top": rows}}}
    )  # fmt: skip
    assert "## v: host time per step (self CPU)" in text and "| `aten::add` | 3 |" in text
