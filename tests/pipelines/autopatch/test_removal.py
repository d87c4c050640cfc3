"""Leave-one-out removal: what belongs to a model is read from the target, shared pieces stay, and the stripped
checkout takes the regenerated patch (no refusal for an anchor left behind)."""

from __future__ import annotations

import ast

import pytest

from pipelines.autopatch import act
from pipelines.autopatch import removal
from pipelines.autopatch.pipeline import understand_model


@pytest.fixture(scope="module")
def texts(liger_template):
    paths = (act.MONKEY_PATCH, act.INSTANCE_TEST, act.CONVERGENCE_FILES[0])
    return {str(p): (liger_template / p).read_text() for p in paths}


def _support(liger_template, model_type):
    from pipelines.target import Checkout

    return removal.read_support(Checkout(liger_template), model_type)


def test_support_is_read_from_the_registry_not_the_name(liger_template):
    llama4 = _support(liger_template, "llama4_text")
    assert llama4.apply_fn == "apply_liger_kernel_to_llama4" and not llama4.exclusive  # the VL model shares it
    assert llama4.original_tests == ("test_apply_liger_kernel_to_instance_for_llama4_for_causal_lm",)
    llama = _support(liger_template, "llama")
    assert llama.mini_models == ("mini_llama3",) and llama.exclusive
    gemma = _support(liger_template, "gemma")
    assert gemma.mini_models == ("mini_gemma1", "mini_gemma1.1")  # dict literal and MINI_MODEL_SETUPS.update
    assert _support(liger_template, "granite").original_tests == ()  # Liger has no instance test for Granite


def test_a_shared_guard_keeps_the_other_models_imports(liger_template, texts):
    source = texts[str(act.CONVERGENCE_FILES[0])]
    without_moe = removal.strip_convergence(source, _support(liger_template, "qwen3_moe"))
    assert "QWEN3_AVAILABLE = True" in without_moe and "import Qwen3ForCausalLM" in without_moe
    assert "Qwen3MoeForCausalLM" not in without_moe and '"mini_qwen3"' in without_moe
    without_qwen3 = removal.strip_convergence(source, _support(liger_template, "qwen3"))
    assert "Qwen3MoeForCausalLM" in without_qwen3 and "import Qwen3ForCausalLM" not in without_qwen3
    # the guard now guards qwen3_moe only and is named after it, so a regenerated qwen3 can add QWEN3_AVAILABLE
    assert "QWEN3_MOE_AVAILABLE = True" in without_qwen3 and "QWEN3_AVAILABLE" not in without_qwen3
    ast.parse(without_qwen3)


def test_only_newly_unused_imports_go():
    source = "import os\nimport sys\n\nprint(sys.argv)\n"
    assert removal.prune_newly_unused(source, source.replace("print(sys.argv)\n", "")) == "import os\n\n"


@pytest.mark.slow
def test_llama_helpers_move_aside_and_the_regenerated_patch_fits(liger_checkout):
    stripped = removal.remove_support(liger_checkout, "llama")
    root, model_dir = liger_checkout.root, liger_checkout.root / removal.MODEL_DIR
    assert not (model_dir / "llama.py").exists()
    helpers = (model_dir / "llama_helpers.py").read_text()
    assert "def lce_maybe_trainable_lm_head(" in helpers and "def lce_forward(" not in helpers
    nemotron = (model_dir / "nemotron.py").read_text()
    assert "from liger_kernel.transformers.model.llama_helpers import lce_maybe_trainable_lm_head" in nemotron
    assert "apply_liger_kernel_to_llama(" not in (root / act.MONKEY_PATCH).read_text()
    readme = (root / act.README).read_text()
    assert "| LLaMA 2 & 3 |" not in readme and "apply_liger_kernel_to_llama(" in readme  # row gone, prose kept
    assert "def test_apply_liger_kernel_to_instance_for_llama(" in stripped.original_test
    liger_checkout.git.commit_all("remove llama")
    changeset = act.build_changeset(liger_checkout, understand_model("llama", liger_checkout))
    assert "src/liger_kernel/transformers/model/llama.py" in changeset.paths
