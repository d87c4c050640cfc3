"""Combining several autopatch branches on one branch for the GPU convergence run: the branches insert at the same
places of the same files, so the combination re-applies act per model in sequence, and keeps every model."""

from __future__ import annotations

import ast

import pytest

from benchmarks import prepare_convergence
from pipelines.autopatch import act
from pipelines.autopatch.pipeline import branch_name
from pipelines.autopatch.pipeline import understand_model
from pipelines.autopatch.supported import supported_models
from pipelines.changeset import format_with_target_style

MODELS = ["ministral3", "ernie4_5"]


def _branch_with_patch(checkout, model):
    """What the pipeline commits on a model's branch (its gates are the pipeline tests' business)."""
    checkout.git.checkout(branch_name(model), create_from="main")
    changeset = act.build_changeset(checkout, understand_model(model, checkout))
    changeset.write(checkout.root)
    format_with_target_style(checkout, changeset.paths)
    checkout.git.commit_all(f"autopatch {model}")
    checkout.git.checkout("main")


@pytest.mark.slow
def test_branches_are_combined_into_one_with_every_model(liger_checkout):
    for model in MODELS:
        _branch_with_patch(liger_checkout, model)
    how = prepare_convergence.combine(liger_checkout, MODELS)
    assert how == "re-applied"  # a plain merge of the second branch conflicts (same insertion points)
    git = liger_checkout.git
    assert git.current_branch() == "main" and git.dirty_paths() == []
    git.checkout(prepare_convergence.COMBINED)
    assert set(MODELS) <= set(supported_models(liger_checkout.monkey_patch))
    for path in act.CONVERGENCE_FILES:
        source = liger_checkout.path(path).read_text()
        ast.parse(source)
        assert all(f'"mini_{m}"' in source for m in MODELS), path
    for model in MODELS:
        assert liger_checkout.path(act.model_file(model)).is_file()
    assert prepare_convergence.keyword(MODELS) == "mini_ministral3 or mini_ernie4_5"
