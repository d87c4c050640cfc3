"""The pass `liger-bot fuse` writes, with the runtime copied beside it, imports and runs from the target checkout
alone: a child process whose sys.path has the target's src/ and the installed packages, but not this repository
(`python -S`: site's .pth files, the editable install's finder among them, are never read)."""

import pytest

from pipelines.changeset import format_with_target_style
from pipelines.fuse import act
from pipelines.fuse.verify import standalone_gate
from pipelines.fuse.verify import standalone_run
from tests.pipelines.fuse import tiny_model

OPS = ("call_function:mul", "call_function:add", "call_function:tanh")
OP_ARGS = [["0.5"], [None], []]


@pytest.mark.slow
def test_generated_pass_and_runtime_import_and_run_without_liger_bot(tmp_path, liger_checkout):
    root = liger_checkout.root
    written = [act.write_pass(root, "model.py:make", OPS, OP_ARGS), *act.write_runtime(root)]
    format_with_target_style(liger_checkout, [str(p.relative_to(root)) for p in written])
    for path in written:
        assert "pipelines" not in path.read_text(), path  # nothing of this repository named
    model = tmp_path / "tiny_model_file.py"
    model.write_text(tiny_model.SOURCE)
    facts = standalone_run(root, model, "make")
    assert "error" not in facts, facts.get("error")
    assert facts["replaced"] == {"fused_mul_add_tanh": 1} and facts["out_max_abs_diff"] < 1e-6
    assert facts["pipelines_importable"] is False and facts["loaded_from_liger_bot"] == []
    assert standalone_gate(facts).status.value == "PASS"
    assert standalone_gate({**facts, "pipelines_importable": True}).status.value == "FAIL"
