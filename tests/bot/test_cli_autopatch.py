"""`liger-bot autopatch`: JSON shape of --plan-only and the refusals, which leave the directory untouched."""

from __future__ import annotations

import io
import json

import pytest

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


def repository_state(checkout):
    """Everything a refusal must leave alone: the files, HEAD, the branch list and the index."""
    git = checkout.git
    return snapshot(checkout.root), git.head(), git.run("branch", "--list"), git.dirty_paths()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["autopatch", "Nemotorn"], "did you mean: nemotron"),  # unknown: the closest matches
        (["autopatch", "bert"], "covers decoder-only causal LMs"),  # an encoder, not a causal LM
        (["autopatch", "t5"], "encoder-decoder"),
        (["autopatch", "llama"], "apply_liger_kernel_to_llama"),  # already supported, create mode
        (["autopatch", "ministral3", "--set", "colour=blue"], "unknown field 'colour'"),
        (["autopatch", "ministral3", "--set", "rms_offset=one"], "bad value"),
        (["autopatch", "ministral3", "--set", "rope=../x"], "bad value"),
        (["autopatch", "x" * 10_000], "not a model name"),
    ],
)
def test_bad_input_exits_non_zero_with_a_message_and_leaves_the_checkout_exactly_as_it_was(
    liger_checkout, argv, message
):
    before = repository_state(liger_checkout)
    status, out, err = run([*argv, "--repo", str(liger_checkout.root)])
    assert status is ExitStatus.REFUSED
    assert message in err, err
    assert out == ""
    assert repository_state(liger_checkout) == before


def test_a_layout_act_cannot_lay_out_is_refused_with_what_the_model_builds_instead(liger_checkout):
    # (TrOCR's unshifted loss was this test's refusal until FLCE took its labels as shift_labels; its rule's
    # refusal is tested on a loss of a model's own in test_breadth.py)
    before = snapshot(liger_checkout.root)
    status, _, err = run(["autopatch", "cpmant", "--repo", str(liger_checkout.root)])  # its stack: two levels down
    assert status is ExitStatus.REFUSED
    assert "modeling_cpmant.py" in err and "its one layer stack is cpmant.encoder.layers" in err
    assert snapshot(liger_checkout.root) == before
    assert liger_checkout.git.run("branch", "--list").split() == ["*", "main"]


@pytest.mark.slow
def test_demo_autopatch_runs_the_default_end_to_end(tmp_path, liger_template):
    from bot.cli.demo import DEFAULT_AUTOPATCH_MODEL
    from pipelines.git import Git

    status, out, err = run(["demo", "autopatch", "--workdir", str(tmp_path / "demo"), "--json"])
    assert status is ExitStatus.OK, err
    result = json.loads(out)
    assert result["profile"]["needs_review"] == [] and result["ok"] is True
    branch = f"liger-bot/autopatch-{DEFAULT_AUTOPATCH_MODEL}"
    assert result["branch"] == branch
    gates = {g["name"]: (g["status"], g["detail"]) for g in result["gates"]}
    for name in (
        "Checkstyle",
        "Import",
        "Instance patching",
        "Whole model (fp32, class + instance patching)",
        "CPU numerics (RoPE, FLCE)",
    ):
        assert gates[name][0] == "PASS", gates[name]
    assert {gates[n] for n in gates if n.startswith("Convergence")} == {("SKIP", "needs GPU runner")}
    git = Git(tmp_path / "demo" / "liger-kernel")
    assert git.current_branch() == "main" and git.dirty_paths() == []
    assert git.run("rev-list", "--count", f"main..{branch}").strip() == "1"
    changed = git.changed_files("main", branch)
    assert f"src/liger_kernel/transformers/model/{DEFAULT_AUTOPATCH_MODEL}.py" in changed and sorted(changed) == sorted(
        result["files"]
    )
    body = (tmp_path / "demo" / "liger-kernel.liger-bot" / f"autopatch-{DEFAULT_AUTOPATCH_MODEL}.md").read_text()
    assert body.startswith(f"# {result['pr_title']}") and "| Checkstyle | PASS |" in body
    # the draft PR, recorded by the local forge as the App records it on GitHub (the same ensure_pull_request)
    (record,) = [
        json.loads(p.read_text()) for p in (tmp_path / "demo" / "liger-kernel.liger-bot" / "issues").glob("*.json")
    ]
    assert (record["head"], record["base"], record["draft"], record["title"]) == (
        branch,
        "main",
        True,
        result["pr_title"],
    )
    assert "| Checkstyle | PASS |" in record["body"]
    assert record["labels"] == ["liger-bot", "liger-bot:autopatch"]
    assert "draft PR #1 recorded by the local forge" in err
