"""act: generated code parses, names follow Liger's formats, entries land in alphabetical order, ruff-clean."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from pipelines.autopatch import act
from pipelines.autopatch import edits
from pipelines.outcome import PipelineError
from tests.pipelines.autopatch.hand_profiles import hand_profile


@pytest.fixture(scope="module")
def helium(tmp_path_factory, liger_template):
    """One act run on a fresh checkout, shared by the read-only assertions below."""
    from pipelines import target

    checkout = target.fetch(tmp_path_factory.mktemp("act") / "liger-kernel")
    changeset = act.act(checkout, hand_profile("helium"))
    return checkout, changeset


def _text(checkout, path):
    return checkout.path(path).read_text()


def test_changeset_lists_the_skill_files(helium):
    _, changeset = helium
    expected = {
        str(act.model_file("helium")),
        str(act.MONKEY_PATCH),
        str(act.ROOT_EXPORTS),
        str(act.INSTANCE_TEST),
        str(act.TEST_UTILS),
        str(act.README),
        *map(str, act.CONVERGENCE_FILES),
    }
    assert set(changeset.paths) == expected
    assert [c.path for c in changeset.changes if c.created] == [str(act.model_file("helium"))]


def test_every_python_file_parses_and_names_are_derived(helium):
    checkout, changeset = helium
    for path in changeset.paths:
        if path.endswith(".py"):
            ast.parse(_text(checkout, path))
    forward = ast.parse(_text(checkout, act.model_file("helium")))
    assert [n.name for n in forward.body if isinstance(n, ast.FunctionDef)] == ["lce_forward"]
    monkey = _text(checkout, act.MONKEY_PATCH)
    assert "def apply_liger_kernel_to_helium(" in monkey
    assert "from liger_kernel.transformers.model.helium import lce_forward as helium_lce_forward" in monkey
    assert "modeling_helium.HeliumRMSNorm = LigerRMSNorm" in monkey
    assert "modeling_helium.HeliumForCausalLM.forward = helium_lce_forward" in monkey
    assert "def revert_liger_kernel_to_helium(" in _text(checkout, act.TEST_UTILS)
    assert "def test_apply_liger_kernel_to_instance_for_helium(" in _text(checkout, act.INSTANCE_TEST)


def test_interleaved_rope_is_not_patched_and_said_so(helium):
    checkout, changeset = helium
    assert (
        "apply_rotary_pos_emb = liger_rotary_pos_emb"
        not in _text(checkout, act.MONKEY_PATCH).split("def apply_liger_kernel_to_helium(")[1].split("\ndef ")[0]
    )
    (note,) = [note for note in changeset.notes if note.startswith("Left out: RoPE")]
    assert "Why: the model's rotary embedding is" in note and "To add it:" in note


def _neighbours(keys, key):
    i = keys.index(key)
    return keys[i - 1], keys[i + 1]


def test_entries_are_inserted_alphabetically(helium):
    checkout, _ = helium
    tree = ast.parse(_text(checkout, act.MONKEY_PATCH))
    registry = [edits.string_value(k) for k in edits.find_assignment(tree, "MODEL_TYPE_TO_APPLY_LIGER_FN").value.keys]
    before, after = _neighbours(registry, "helium")
    assert before < "helium" < after
    exports = ast.parse(_text(checkout, act.ROOT_EXPORTS))
    block = edits.find_if_type_checking(exports)
    names = [n.names[0].name for n in block.body if isinstance(n, ast.ImportFrom)]
    assert names == sorted(names) and "apply_liger_kernel_to_helium" in names
    convergence = _text(checkout, act.CONVERGENCE_FILES[0])
    imports = [line for line in convergence.splitlines() if line.startswith("from liger_kernel.transformers import")]
    assert (
        imports == sorted(imports) and "from liger_kernel.transformers import apply_liger_kernel_to_helium" in imports
    )
    assert 'MINI_MODEL_SETUPS["mini_helium"]' in convergence and "vocab_size=32000" in convergence


def test_readme_keeps_crlf_and_gains_one_row(helium):
    checkout, _ = helium
    raw = checkout.path(act.README).read_bytes()
    assert raw.count(b"apply_liger_kernel_to_helium") == 1
    assert b"\n" not in raw.replace(b"\r\n", b"")


def test_touched_files_are_ruff_clean(helium):
    checkout, changeset = helium
    python = [p for p in changeset.paths if p.endswith(".py")]
    for args in (["check", *python], ["format", "--check", *python]):
        proc = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=checkout.root, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_gemma_style_norm_uses_a_partial():
    plan = act.plan(hand_profile("gemma"))
    function = act.render.render("autopatch/monkey_patch_fn.py.j2", **plan.context())
    assert (
        '_patch_rms_norm_module_for_model = partial(_patch_rms_norm_module, offset=1.0, casting_mode="gemma"'
        in function
    )
    assert "_patch_rms_norm_module_for_model(decoder_layer.input_layernorm)" in function
    assert "_patch_geglu_module(decoder_layer.mlp)" in function and "geglu: bool = True" in function
    ast.parse(function)


def test_moe_patches_experts_and_uses_moe_output():
    plan = act.plan(hand_profile("mixtral"))
    function = act.render.render("autopatch/monkey_patch_fn.py.j2", **plan.context())
    assert "modeling_mixtral.MixtralExperts = LigerExperts" in function
    assert "_patch_swiglu_module(decoder_layer.mlp.experts, LigerExperts)" in function
    forward = act.render_lce_forward(plan)
    assert "LigerMoeCausalLMOutputWithPast" in forward and "load_balancing_loss_func" in forward


def test_layer_norm_with_offset_is_not_patched_and_kwargs_are_absorbed():
    profile = hand_profile("nemotron")
    profile = profile.with_overrides({"rms_offset": 1.0})
    plan = act.plan(profile)
    assert plan.norm is None and not plan.rope and plan.mlp.param == "relu_squared"
    assert plan.context()["absorbs_kwargs"]


def test_rope_needing_review_is_not_patched():
    plan = act.plan(hand_profile("hyperclovax", needs_review=("rope",)))
    assert not plan.rope
    assert any("--set rope=standard" in note for note in plan.notes)


@pytest.mark.parametrize("key", ["structure", "hidden_state_access", "logit_softcapping"])
def test_forward_decision_needing_review_is_refused(key):
    with pytest.raises(PipelineError) as caught:
        act.plan(hand_profile("hyperclovax", needs_review=(key,)))
    assert f"--set {key}=" in caught.value.hint


@pytest.mark.parametrize("bad", ["../etc", "Llama", "a/b", "x y", ""])
def test_model_type_is_validated_before_paths(bad):
    with pytest.raises(PipelineError):
        act.model_file(bad)


def test_placement_rule():
    entries = [edits.Entry(k, i, i) for i, k in enumerate(["b", "d", "a"])]
    assert edits.placement(entries, "c") == (entries[1], True)
    assert edits.placement(entries, "e") == (entries[2], False)
    with pytest.raises(edits.EditError):
        edits.placement(entries, "d")


def test_insert_element_adds_a_trailing_comma():
    source = 'X = {\n    "a": 1,\n    "c": 3\n}\n'
    keys = edits.find_assignment(ast.parse(source), "X").value.keys
    out = edits.insert_element(source, keys, edits.string_value, "d", '"d": 4')
    assert ast.literal_eval(out.split("=", 1)[1]) == {"a": 1, "c": 3, "d": 4}
    out = edits.insert_element(source, keys, edits.string_value, "b", '"b": 2')
    assert list(ast.literal_eval(out.split("=", 1)[1])) == ["a", "b", "c"]


def test_act_refuses_a_logits_transform_flce_cannot_reproduce():
    from dataclasses import replace

    from pipelines.autopatch.profile import Decision
    from pipelines.autopatch.profile import Evidence
    from pipelines.autopatch.profile import Method
    from pipelines.autopatch.profile import Status

    where = Evidence("transformers/models/x/modeling_x.py", (9, 9), "logits = logits + self.bias")
    check = Decision("logits = logits + self.bias", Method.AST, (where,), Status.NEEDS_REVIEW, "logits transformed")
    profile = replace(hand_profile("llama"), checks={"logits_transform": check})
    with pytest.raises(PipelineError, match=r"logits transformed.*modeling_x\.py:9"):
        act.plan(profile)


def _case_values(source, name):
    cases = edits.find_parametrize_list(edits.find_function(ast.parse(source), "test_mini_model"))
    case = next(c for c in cases.elts if edits.case_name(c) == name)
    values = case.args if isinstance(case, ast.Call) else case.elts
    return [ast.get_source_segment(source, v) for v in (values[2], *values[4:10])]


@pytest.mark.parametrize("path", act.CONVERGENCE_FILES, ids=lambda p: "/".join(p.parts[-2:]))
def test_each_convergence_file_copies_its_own_mistral_tolerances_for_a_dense_model(helium, path):
    checkout, _ = helium
    source = _text(checkout, path)
    assert _case_values(source, "mini_helium") == _case_values(source, "mini_mistral")


MOE_CASES = """
@pytest.mark.parametrize(
    "model_name, num_steps, lr, dtype, loss_atol, loss_rtol, logprobs_atol, logprobs_rtol, param_atol, param_rtol",
    [
        ("mini_mistral", 32, 3e-4, torch.float32, 1e-8, 1e-5, 5e-3, 1e-5, 5e-3, 1e-5),
        # ("mini_mixtral", 32, 1e-4, torch.float32, 5e-4, 1e-4, 5e-3, 1e-5, 1e-2, 1e-5),
        pytest.param(
            "mini_qwen3_moe",
            32,
            1e-5,
            torch.float32,
            1e-5,
            2e-3,  # loose: routing (not the fallback's value, so a copy from here shows)
            5e-3,
            1e-2,
            5e-3,
            1e-5,
            marks=[],
        ),
    ],
)
def test_mini_model(model_name, num_steps, lr, dtype, loss_atol, loss_rtol, logprobs_atol, logprobs_rtol, param_atol,
                    param_rtol):
    pass
"""


def test_moe_tolerances_come_from_the_enabled_moe_entry_never_a_commented_out_one():
    cases = edits.find_parametrize_list(edits.find_function(ast.parse(MOE_CASES), "test_mini_model")).elts
    moe = act.reference_tolerances(MOE_CASES, cases, {}, _plan_of("moe"), "float32")
    assert moe == ["1e-5", "1e-5", "2e-3", "5e-3", "1e-2", "5e-3", "1e-5"]
    assert act.reference_tolerances(MOE_CASES, cases, {}, _plan_of("dense"), "float32")[0] == "3e-4"
    without_moe = MOE_CASES.replace('"mini_qwen3_moe"', '"mini_other"')
    cases = edits.find_parametrize_list(edits.find_function(ast.parse(without_moe), "test_mini_model")).elts
    fallback = act.reference_tolerances(without_moe, cases, {}, _plan_of("moe"), "float32")
    assert fallback == list(act.TOLERANCES[("moe", "float32")])


def _plan_of(family: str):
    """What reference_tolerances reads of a plan, for a model its modular file builds on nothing of Liger's."""
    import types

    identity = types.SimpleNamespace(derived_from=())
    profile = types.SimpleNamespace(identity=identity)
    return types.SimpleNamespace(profile=profile, moe=family == "moe", tolerance_family=family)


def test_weightless_experts_are_left_to_hf_and_the_pr_says_why():
    from dataclasses import replace

    profile = hand_profile("qwen3_moe")
    weightless = replace(profile, identity=replace(profile.identity, experts_convention="weightless_experts"))
    mlp, notes = act.plan(weightless).mlp, act.plan(weightless).notes
    assert "LigerExperts" not in mlp.class_statement + mlp.instance_statement
    assert any("Qwen3MoeExperts is left to HF" in n and "zero-computation experts" in n for n in notes), notes
    assert "LigerExperts" in act.plan(profile).mlp.class_statement  # routed experts keep it
