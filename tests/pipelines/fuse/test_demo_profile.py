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
