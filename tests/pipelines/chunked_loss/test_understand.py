"""Understand on the real references: Liger's own test classes, TRL's loss types, plain functions. The proof by
running (the decomposition check) refuses what needs a batch-wide statistic, and every refusal says why."""

from __future__ import annotations

import ast

import pytest
import torch

from pipelines.chunked_loss import act
from pipelines.chunked_loss import masked
from pipelines.chunked_loss import reference
from pipelines.chunked_loss import spec
from pipelines.chunked_loss import understand
from pipelines.outcome import PipelineError


def _understand(text, repo, settings=None, name=None):
    return understand.understand(spec.resolve(text, repo, name), repo, settings or {})


@pytest.mark.parametrize(
    "text, settings, kind, hypers, outputs",
    [
        (
            "test/chunked_loss/test_dpo_loss.py:HFDPOLoss",
            {},
            "paired preference",
            ["beta"],
            ["loss", "per-sequence", "per-sequence"],
        ),
        (
            "test/chunked_loss/test_orpo_loss.py:HFORPOLoss",
            {},
            "paired preference",
            ["beta"],
            ["loss", "per-sequence", "per-sequence", "scalar mean", "scalar mean"],
        ),
        (
            "test/chunked_loss/test_cpo_loss.py:HFCPOLoss",
            {"loss_type": "simpo"},
            "paired preference",
            ["beta", "label_smoothing", "simpo_gamma"],
            ["loss", "per-sequence", "per-sequence"],
        ),
        (
            "test/chunked_loss/test_kto_loss.py:HFKTOLoss",
            {},
            "unpaired preference",
            ["beta"],
            ["loss", "scalar sum", "scalar sum"],
        ),
    ],
)
def test_liger_reference_classes_are_classified_and_proven_to_decompose(
    liger_template, text, settings, kind, hypers, outputs
):
    u = _understand(text, liger_template, settings)
    assert u.kind == kind
    assert u.reference.hyper_names == hypers
    assert u.outputs == outputs
    assert u.probe.passed and len(u.probe.chunks) == 3
    # batch means became sums over the batch size the base hands in (full_target), never the chunk's own size
    assert "full_target.shape[0]" in u.chunk_source and ".mean(" not in u.chunk_source
    assert all(e.file and e.lines[0] > 0 for e in u.reference.evidence)


def test_a_folded_string_hyper_parameter_keeps_only_its_branch(liger_template):
    sigmoid = _understand("test/chunked_loss/test_cpo_loss.py:HFCPOLoss", liger_template)
    simpo = _understand("test/chunked_loss/test_cpo_loss.py:HFCPOLoss", liger_template, {"loss_type": "simpo"})
    assert "simpo_gamma" not in sigmoid.chunk_source and "simpo_gamma / beta" in simpo.chunk_source
    # the file's unfused head averages the log-probs for simpo only (`self.average_log_prob = loss_type == "simpo"`)
    assert sigmoid.reference.average_log_prob is False and simpo.reference.average_log_prob is True
    assert any("the file's unfused head" in e.what for e in simpo.reference.evidence)
    with pytest.raises(PipelineError, match="the reference raises"):  # its own else-branch, with its message
        _understand("test/chunked_loss/test_cpo_loss.py:HFCPOLoss", liger_template, {"loss_type": "nope"})
    named = _understand(
        "test/chunked_loss/test_cpo_loss.py:HFCPOLoss",
        liger_template,
        {"loss_type": "simpo", "rename.simpo_gamma": "gamma"},
    )
    assert named.reference.hyper_names[-1] == "gamma" and "gamma / beta" in named.chunk_source  # Liger SimPO's name
    with pytest.raises(PipelineError, match="not a setting"):
        _understand("test/chunked_loss/test_cpo_loss.py:HFCPOLoss", liger_template, {"gamma": "0.2"})


def test_trl_ipo_is_read_from_trl_source_with_the_lines_it_came_from(liger_template):
    u = _understand("trl:dpo:ipo", liger_template)
    ref = u.reference
    # TRL divides the summed log-ratios by the completion-token counts: Liger's average_log_prob=True
    assert ref.average_log_prob is True and ref.uses_ref and ref.hyper_names == ["beta"]
    assert "(ipo_delta - 1 / (2 * beta)) ** 2" in u.chunk_source
    branch = next(e for e in ref.evidence if e.what == "loss_type 'ipo'")
    lines = reference.trl_file("trl/trainer/dpo_trainer.py").read_text().splitlines()
    assert 'loss_type == "ipo"' in lines[branch.lines[0] - 1]
    hinge = _understand("trl:dpo:hinge", liger_template)
    assert hinge.reference.average_log_prob is False  # TRL sums the log-probs of the other loss types


def test_a_batch_wide_statistic_is_refused_naming_it(liger_template):
    with pytest.raises(PipelineError) as error:
        _understand("trl:dpo:aot", liger_template)
    assert "does not decompose over chunks" in error.value.message
    assert "torch.sort(logratios, dim=0)" in error.value.message


def test_unknown_trl_loss_types_and_per_token_losses_are_refused(liger_template):
    with pytest.raises(PipelineError) as error:
        _understand("trl:dpo:ipoo", liger_template)
    assert "did you mean ipo" in error.value.message and "sigmoid, hinge, ipo" in error.value.hint
    with pytest.raises(PipelineError, match="per_token_logps"):
        _understand("trl:dpo:sft", liger_template)
    with pytest.raises(PipelineError, match="reads TRL's dpo trainer"):
        _understand("trl:grpo:dapo", liger_template)


PLAIN = """import torch
import torch.nn.functional as F


def centred_loss(chosen_logps, rejected_logps, beta=0.1):
    margin = chosen_logps - rejected_logps
    return -F.logsigmoid(beta * (margin - margin.mean()))


def distill(student_logits, teacher_logits, temperature=1.0):
    return (student_logits - teacher_logits).pow(2).mean()


def grpo(per_token_logps, old_per_token_logps, advantages, epsilon=0.2):
    return -(torch.exp(per_token_logps - old_per_token_logps) * advantages).mean()


def slic(chosen_logps, rejected_logps, beta=1.0, delta=1.0):
    return torch.relu(delta - beta * (chosen_logps - rejected_logps))
"""


def test_plain_functions_are_classified_and_a_batch_mean_inside_the_loss_refused(tmp_path):
    path = tmp_path / "losses.py"
    path.write_text(PLAIN)
    with pytest.raises(PipelineError) as error:
        _understand(f"{path}:centred_loss", tmp_path)
    assert "does not decompose" in error.value.message and "margin.mean()" in error.value.message
    with pytest.raises(PipelineError, match="classified as distillation"):
        _understand(f"{path}:distill", tmp_path)
    with pytest.raises(PipelineError, match="classified as PPO/GRPO-style"):
        _understand(f"{path}:grpo", tmp_path)
    slic = _understand(f"{path}:slic", tmp_path)
    assert slic.spec.name == "slic" and slic.reference.hyper_names == ["beta", "delta"] and not slic.reference.uses_ref
    chunk = ast.parse(slic.chunk_source).body[0]
    assert [a.arg for a in chunk.args.args] == ["chosen_logps", "rejected_logps", "full_target", "beta", "delta"]


def test_a_family_is_one_switch_over_loss_types_each_proven_on_its_own(liger_template):
    text = "test/chunked_loss/test_dpo_loss.py:sigmoid=HFDPOLoss,robust=HFRobustLoss,discopop=HFDiscoPOPLoss"
    u = _understand(text, liger_template, name="dpo_family")
    assert [t for t, _ in u.variants] == ["sigmoid", "robust", "discopop"]
    assert u.reference.hyper_names == ["beta", "label_smoothing", "discopop_tau"]
    assert "if loss_type == 'sigmoid':" in u.chunk_source and "Unsupported loss_type" in u.chunk_source
    assert u.probe.passed and any(key.startswith("discopop: ") for key in u.probe.max_abs_diff)
    context = act.context(u)
    # the switch sits where Liger's DPO has it: right after chunk_size
    forward = [p.split("=")[0] for p in context["forward_signature"]]
    assert forward[forward.index("chunk_size") + 1] == "loss_type"
    assert context["variant_hypers"]["robust"] == {"beta": 0.1, "label_smoothing": 0.1}  # HFRobustLoss's own
    for path, text in act.render_files(u).items():
        ast.parse(text, filename=path)
    with pytest.raises(PipelineError, match="differs from 'sigmoid' in average_log_prob"):
        _understand("trl:dpo:sigmoid,ipo", liger_template, name="mixed")


KTO = "test/chunked_loss/test_kto_loss.py:HFKTOLoss"


def _kto_inputs():
    labels = torch.tensor([True, False, True, True])
    return (torch.randn(4, requires_grad=True), labels, torch.zeros(8, 3), torch.randn(4)), {"kl": torch.zeros(1)}


def _without_rewrite(monkeypatch):
    monkeypatch.setattr(masked, "rewrite", lambda fn, vectors, masks: masked.Rewritten(None, "switched off"))


def test_kto_selections_become_masks_proven_equal_by_running(liger_template):
    u = _understand(KTO, liger_template)
    assert u.masking.applied, u.masking.reason
    # 3 chunk sizes x their label patterns (all True, all False, mixed) x with and without reference log-probs
    assert u.masking.cases == 16 and u.masking.max_abs_diff <= understand.MASKED_TOLERANCE
    assert "log_prob_chunk[preference_labels_chunk]" in u.masking.selections
    assert "[preference_labels_chunk]" not in u.chunk_source and ".shape[0] != 0" not in u.chunk_source
    assert "losses = torch.where(preference_labels_chunk, chosen_losses, rejected_losses)" in u.chunk_source
    assert u.probe.passed  # the decomposition proven again on the masked form
    dpo = _understand("test/chunked_loss/test_dpo_loss.py:HFDPOLoss", liger_template)
    assert not dpo.masking.applied and dpo.masking.reason == "no boolean selection"
    # the generated docstring says so, where it applies
    kto_loss, dpo_loss = (act.render_files(x)[str(act.LossFiles.of(x.spec.name).loss)] for x in (u, dpo))
    assert "Boolean selections (`x[labels]`) are written as masks" in kto_loss
    assert "written as masks" not in dpo_loss
    ast.parse(kto_loss)


def test_a_masked_form_that_differs_keeps_the_selections(liger_template, monkeypatch):
    real = masked.rewrite

    def swapped_masks(fn, vectors, masks):  # a wrong rewrite: chosen and rejected exchanged
        result = real(fn, vectors, masks)
        source = ast.unparse(result.fn).replace(
            "torch.where(preference_labels_chunk,", "torch.where(~preference_labels_chunk,"
        )
        return masked.Rewritten(ast.parse(source).body[0], result.reason, result.selections)

    monkeypatch.setattr(masked, "rewrite", swapped_masks)
    u = _understand(KTO, liger_template)
    assert not u.masking.applied and "differs from the selections" in u.masking.reason
    assert "chosen_logps = log_prob_chunk[preference_labels_chunk]" in u.chunk_source


@pytest.mark.slow
def test_the_masked_kto_compiles_as_one_graph_where_the_selections_break(liger_template, monkeypatch):
    masked_source = _understand(KTO, liger_template).chunk_source
    _without_rewrite(monkeypatch)
    selecting_source = _understand(KTO, liger_template).chunk_source
    args, kwargs = _kto_inputs()
    torch._dynamo.reset()
    torch.compile(understand.load(masked_source, "masked"), fullgraph=True, backend="eager")(*args, **kwargs)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="data-dependent"):
        torch.compile(understand.load(selecting_source, "selecting"), fullgraph=True, backend="eager")(*args, **kwargs)
    torch._dynamo.reset()
