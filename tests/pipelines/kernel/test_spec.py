import pytest

from pipelines.kernel import spec
from pipelines.outcome import PipelineError


def test_activation_name_resolves_with_its_own_kernel_name(tmp_path):
    resolved = spec.resolve("relu2", tmp_path)
    assert resolved.kind == spec.SpecKind.ACTIVATION
    assert resolved.name == "relu2"
    assert spec.resolve("relu2", tmp_path, name="relu_sq").name == "relu_sq"


def test_unknown_activation_names_close_matches(tmp_path):
    with pytest.raises(PipelineError) as err:
        spec.resolve("gelu_tanhh", tmp_path)
    assert "not a transformers activation" in err.value.message
    assert "gelu" in err.value.hint


def test_missing_file_is_refused(tmp_path):
    with pytest.raises(PipelineError, match="does not exist"):
        spec.resolve("nope/op.py:f", tmp_path)


def test_file_with_several_functions_needs_a_name(tmp_path):
    op = tmp_path / "ops.py"
    op.write_text("import torch\n\ndef a(x):\n    return x\n\ndef b(x):\n    return x\n")
    with pytest.raises(PipelineError) as err:
        spec.resolve(str(op), tmp_path / "repo")
    assert "a, b" in err.value.hint
    assert spec.resolve(f"{op}:b", tmp_path / "repo").qualname == "b"


def test_file_inside_the_repo_gets_an_import_path(tmp_path):
    (tmp_path / "test" / "transformers").mkdir(parents=True)
    (tmp_path / "test" / "transformers" / "test_x.py").write_text("class GemmaRMSNorm:\n    pass\n")
    resolved = spec.resolve("test/transformers/test_x.py:GemmaRMSNorm", tmp_path)
    assert resolved.kind == spec.SpecKind.REPO
    assert resolved.module_path == "test.transformers.test_x"
    assert resolved.name == "gemma_rms_norm"


@pytest.mark.parametrize("bad", ["Relu", "../x", "a-b", "class", "x" * 60, "_x"])
def test_kernel_names_are_validated(bad):
    with pytest.raises(PipelineError):
        spec.validate_name(bad)


def test_names_follow_liger_spelling():
    assert spec.pascal("relu2") == "ReLU2"
    assert spec.pascal("rms_norm_llama") == "RMSNormLlama"
    assert spec.pascal("gelu_pytorch_tanh") == "GELUPytorchTanh"
    assert spec.snake("GemmaRMSNorm") == "gemma_rms_norm"


def test_a_private_definition_named_explicitly_resolves(tmp_path):
    # Liger's test_swiglu.py holds its reference as `_ref_silu_mul`: it is refused only when no name is given
    path = tmp_path / "op.py"
    path.write_text("def _ref_silu_mul(a, b):\n    return a * b\n\n\ndef other(x):\n    return x\n")
    assert spec.resolve(f"{path}:_ref_silu_mul", tmp_path, "loo_swiglu").qualname == "_ref_silu_mul"
    assert spec.resolve(str(path), tmp_path).qualname == "other"


def test_a_required_keyword_only_argument_is_refused_as_a_setting_the_engine_cannot_choose(tmp_path):
    from pipelines.kernel import reference

    path = tmp_path / "op.py"
    path.write_text("import torch\n\n\ndef sinkhorn(logits, *, tmax: int, eps: float):\n    return logits\n")
    with pytest.raises(PipelineError, match=r"sinkhorn needs tmax, eps \(keyword-only, no default\)"):
        reference.build(spec.resolve(f"{path}:sinkhorn", tmp_path), tmp_path)
