"""`liger-bot autopatch`: JSON shape of --plan-only and the refusals, which leave the directory untouched."""

from __future__ import annotations

import io
import json

from bot.cli import program
from pipelines.autopatch.profile import DECISION_KEYS
from pipelines.outcome import ExitStatus


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    status = program(argv, {}, out, err)
    return status, out.getvalue(), err.getvalue()


def snapshot(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_plan_only_json_shape_for_a_supported_model(liger_checkout):
    status, out, err = run(["autopatch", "Mixtral", "--repo", str(liger_checkout.root), "--plan-only", "--json"])
    assert status is ExitStatus.OK, err
    data = json.loads(out)
    assert data["model_type"] == "mixtral" and data["causal_lm_class"] == "MixtralForCausalLM"
    assert data["modeling_file"] == "transformers/models/mixtral/modeling_mixtral.py"
    assert list(data["decisions"]) == list(DECISION_KEYS)
    for decision in data["decisions"].values():
        assert {"value", "method", "evidence", "status"} <= set(decision)
    assert data["supported_by"] == "apply_liger_kernel_to_mixtral"
    assert "already supported" in err


def test_plan_only_markdown_with_override(liger_checkout):
    argv = ["autopatch", "llama", "--repo", str(liger_checkout.root), "--plan-only", "--set", "rope=none"]
    status, out, _ = run(argv)
    assert status is ExitStatus.OK
    assert out.startswith("# Model Profile: Llama") and "## Normalization" in out and "## Needs review" in out
    assert "- rope: **none** (override, settled)" in out


def test_create_mode_refuses_a_supported_model(liger_checkout):
    status, _, err = run(["autopatch", "llama", "--repo", str(liger_checkout.root)])
    assert status is ExitStatus.REFUSED
    assert "apply_liger_kernel_to_llama" in err


def test_bad_set_is_refused(liger_checkout):
    status, _, err = run(["autopatch", "llama", "--repo", str(liger_checkout.root), "--plan-only", "--set", "x=1"])
    assert status is ExitStatus.REFUSED and "unknown field" in err


def test_dirty_checkout_is_refused_and_left_as_it_was(liger_checkout):
    (liger_checkout.root / "scratch.txt").write_text("work in progress\n")
    before = snapshot(liger_checkout.root)
    status, _, err = run(["autopatch", "nemotron", "--repo", str(liger_checkout.root), "--plan-only"])
    assert status is ExitStatus.REFUSED and "uncommitted changes" in err
    assert snapshot(liger_checkout.root) == before


def test_non_liger_directory_is_refused_and_left_as_it_was(tmp_path):
    (tmp_path / "notes.md").write_text("not liger\n")
    before = snapshot(tmp_path)
    status, _, err = run(["autopatch", "nemotron", "--repo", str(tmp_path), "--plan-only"])
    assert status is ExitStatus.REFUSED and "not a Liger-Kernel checkout" in err
    assert snapshot(tmp_path) == before


def test_malicious_model_name_is_refused(liger_checkout):
    status, _, err = run(["autopatch", "../../etc/passwd", "--repo", str(liger_checkout.root), "--plan-only"])
    assert status is ExitStatus.REFUSED and "not a model name" in err
