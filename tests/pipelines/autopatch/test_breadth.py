"""Breadth (issue 17): layouts, logit transforms, mixer-only layers and unbuildable models, by class.

Each test takes a real transformers model of the class it covers; the assertions are about what the pipeline
derives from it (the profile, the plan, the rendered forward), not about the model's name.
"""

from __future__ import annotations

import ast

import pytest

from pipelines.autopatch import act
from pipelines.autopatch import probes
from pipelines.autopatch.profile import Status
from pipelines.autopatch.understand import logits_op
from pipelines.autopatch.understand import understand
from pipelines.outcome import PipelineError


def _forward_of(code: str) -> ast.FunctionDef:
    return ast.parse(code).body[0]


@pytest.mark.parametrize(
    ("statement", "op"),
    [
        ("logits = logits * self.logit_scale", {"multiply": "self.logit_scale"}),
        ("logits = logits / self.config.logits_scaling", {"divide": "self.config.logits_scaling"}),
        ("logits *= 0.5", {"multiply": "0.5"}),
        ("logits = self.lm_head(h) * self.config.logits_scaling", {"multiply": "self.config.logits_scaling"}),
        ("logits = nn.functional.tanh(logits / cap) * cap", {"softcap": "self.config.logits_soft_cap"}),
        ("logits = logits + self.bias", None),  # not a scale: FLCE cannot reproduce it
        ("logits = logits * torch.rand(3)", None),  # not a scalar read from the model
        ("logits = torch.tanh(logits / cap) * 30.0", None),  # the two caps differ
    ],
)
def test_logit_transforms_flce_reproduces_are_recognised_as_data(statement, op):
    forward = _forward_of(f"def forward(self, h):\n    cap = self.config.logits_soft_cap\n    {statement}\n")
    assert logits_op(forward.body[-1], {"logits"}, forward, "lm_head") == op


@pytest.fixture(scope="module")
def granite_moe():
    return understand("granitemoe")


def test_a_logit_scale_is_folded_into_the_hidden_states(granite_moe):
    check = granite_moe.checks["logits_transform"]
    assert check.status is Status.SETTLED and check.value == [{"divide": "self.config.logits_scaling"}]
    assert "logits_scaling" in check.evidence[0].snippet
    forward = act.render_lce_forward(act.plan(granite_moe))
    assert "hidden_states=kept_hidden_states / self.config.logits_scaling," in forward
    assert "logits = logits / self.config.logits_scaling" in forward  # the path that materializes logits too
    ast.parse(forward)


def test_a_final_softcap_of_the_forwards_own_is_passed_to_flce():
    profile = understand("recurrent_gemma")
    forward = act.render_lce_forward(act.plan(profile))
    assert "final_logit_softcapping=self.config.logits_soft_cap," in forward
    assert "LigerForCausalLMLoss" in forward and "torch.tanh(logits)" in forward


@pytest.mark.parametrize(("model", "base"), [("bloom", "transformer"), ("gpt_neox", "gpt_neox")])
def test_gpt_style_layouts_call_the_base_model_the_source_names(model, base):
    profile = understand(model)
    assert profile.identity.base_model_attr == base
    forward = act.render_lce_forward(act.plan(profile))
    assert f"outputs = self.{base}(" in forward and "self.model(" not in forward


def test_a_decoder_stack_one_level_down_is_laid_out_where_the_forward_calls_it():
    # OPT: OPTForCausalLM.forward calls self.model.decoder(...); the layers and the final norm live on OPTDecoder
    profile = understand("opt")
    ident = profile.identity
    assert (ident.base_model_attr, ident.base_model_class, ident.layers_attr) == (
        "model.decoder",
        "OPTDecoder",
        "layers",
    )
    plan = act.plan(profile)
    assert "outputs = self.model.decoder(" in act.render_lce_forward(plan)
    lookup = act.base_model_lookup("model.decoder", "dummy_model_instance")
    assert lookup.startswith('getattr(getattr(dummy_model_instance, "model", dummy_model_instance), "decoder", ')
    test = act.render_instance_test(plan)
    assert "base_model = " + lookup in " ".join(test.split()) and "for layer in base_model.layers:" in test


def test_a_stack_one_level_down_that_the_forward_does_not_call_is_refused():
    # MusicGen: MusicgenForCausalLM.forward calls self.model(...), whose decoder holds the layers, and no lm_head
    with pytest.raises(PipelineError, match="calls no submodule of one that does"):
        understand("musicgen")


@pytest.mark.parametrize(
    ("model", "why"),
    [
        ("musicgen", "self.lm_heads is a ModuleList of heads"),  # one head per codebook
        ("git", "its forward takes pixel_values: an image-text model"),
        ("hrm_text", "it runs 2 layer stacks (model.L_module.layers, model.H_module.layers)"),
        ("cpmant", "its one layer stack is cpmant.encoder.layers, deeper than the forward calls"),
        ("gemma4_assistant", "its decoder is `self.model = AutoModel.from_config(text_config)`"),
    ],
)
def test_a_layout_refusal_says_what_the_causal_lm_builds_instead(model, why):
    from pipelines.autopatch.resolve import resolve
    from pipelines.autopatch.understand import read_facts

    with pytest.raises(PipelineError) as caught:
        read_facts(resolve(model))  # AST only
    assert why in caught.value.message


def test_mixer_only_layers_patch_the_norms_and_the_loss():
    profile = understand("mamba")
    assert profile.value("structure") == "dense" and profile.value("mlp_kind") == "none"
    assert not profile.needs_review() or "structure" not in profile.needs_review()
    plan = act.plan(profile)
    assert plan.mlp is None and plan.norm is not None and plan.norm.final
    assert not [n for n in plan.notes if "MLP" in n]  # no MLP: nothing was left out


def test_a_partial_patch_says_what_is_left_out_why_and_the_command():
    plan = act.plan(understand("phi"))
    (note,) = [n for n in plan.notes if "the MLP" in n]
    assert note.startswith(act.LEFT_OUT) and "PhiMLP" in note
    assert "Why: mlp kind 'none'" in note and "`/liger kernel gelu_new`" in note


def test_read_only_and_validated_config_fields_keep_their_defaults():
    from transformers import FalconConfig
    from transformers import GPTNeoConfig

    assert "head_dim" not in probes.tiny_config_kwargs(FalconConfig)  # a property without a setter
    kwargs = probes.tiny_config_kwargs(GPTNeoConfig)  # its validator ties the layer count to attention_types
    GPTNeoConfig(**kwargs)
    assert kwargs["hidden_size"] == probes.TINY_CONFIG["hidden_size"]


def test_a_model_its_own_default_config_cannot_build_is_refused_with_the_reason(monkeypatch):
    import types

    import torch
    from transformers import LlamaConfig

    from pipelines.autopatch.resolve import ModelRef
    from pipelines.autopatch.understand import build_tiny

    class BrokenModel(torch.nn.Module):  # a modeling bug no config repairs: transformers' own default fails too
        def __init__(self, config):
            super().__init__()
            raise TypeError("unsupported operand type(s) for //: 'NoneType' and 'NoneType'")

    monkeypatch.setattr(probes, "_UNBUILDABLE", {})
    monkeypatch.setattr(probes, "_REPAIRS", {})
    ref = ModelRef("broken", "BrokenForCausalLM", "LlamaConfig", "llama", "Broken")
    with pytest.raises(PipelineError) as caught:
        build_tiny(
            ref,
            types.SimpleNamespace(BrokenModel=BrokenModel),
            LlamaConfig,
            types.SimpleNamespace(base_class="BrokenModel"),
        )
    message = caught.value.message
    assert "TypeError: unsupported operand" in message and "LlamaConfig() cannot build BrokenModel" in message


def test_a_model_type_with_a_dash_is_refused_with_why():
    with pytest.raises(PipelineError, match="apply_liger_kernel_to_<model_type>"):
        act.validate_model_type("modernbert-decoder")


def test_a_hidden_state_scaled_before_lm_head_is_folded_and_a_vocabulary_cut_takes_the_head_s_first_rows():
    from pipelines.autopatch.resolve import resolve
    from pipelines.autopatch.understand import decide_logits_transform
    from pipelines.autopatch.understand import read_facts

    minicpm3 = decide_logits_transform(read_facts(resolve("minicpm3")))
    assert minicpm3.status is Status.SETTLED and minicpm3.value == [{"divide": "self.config.logits_scaling"}]
    inkling = decide_logits_transform(read_facts(resolve("inkling_text")))  # logits[..., :unpadded_vocab_size]
    assert inkling.status is Status.SETTLED
    assert inkling.value == [
        {"divide": "self.config.logits_mup_width_multiplier"},
        {"vocab_slice": "self.config.unpadded_vocab_size"},
    ]


@pytest.mark.parametrize(
    ("statement", "op"),
    [
        ("logits = logits[..., :n]", {"vocab_slice": "n"}),
        ("logits = logits[:, :, :self.config.n]", {"vocab_slice": "self.config.n"}),
        ("logits = logits[..., 1:]", None),  # not the first classes
        ("logits = logits[..., :n:2]", None),
        ("logits = logits[0, :, :n]", None),  # a position dropped too
    ],
)
def test_only_a_cut_to_the_first_classes_is_a_vocabulary_slice(statement, op):
    forward = _forward_of(f"def forward(self, h):\n    n = self.config.n\n    {statement}\n")
    expected = {"vocab_slice": "self.config.n"} if op else None
    assert logits_op(forward.body[-1], {"logits"}, forward, "lm_head") == expected


def test_a_head_class_that_scales_its_linear_output_scales_the_weight_rows_flce_gets():
    from pipelines.autopatch.resolve import resolve
    from pipelines.autopatch.understand import decide_logits_transform
    from pipelines.autopatch.understand import read_facts

    dory = decide_logits_transform(read_facts(resolve("dory")))  # DoryLMHead: linear(h).float() * scale
    factor = "self.lm_head.logit_scale.float() * self.lm_head.logit_scale_factor"
    assert dory.status is Status.SETTLED and dory.value == [{"head_scale": factor}]
    plain = decide_logits_transform(read_facts(resolve("llama")))
    assert plain.status is Status.SETTLED and plain.value is None


def test_hybrid_stacks_of_several_layer_classes_patch_each_norm_where_it_exists():
    profile = understand("olmo_hybrid")  # attention layers and linear-attention layers in one list
    plan = act.plan(profile)
    optional = {t["attr"]: t["optional"] for t in plan.norm.targets("decoder_layer")}
    assert optional["input_layernorm"] is True  # only the linear-attention layers have it
    assert optional["post_attention_layernorm"] is False  # every layer class has it
    function = act.render.render("autopatch/monkey_patch_fn.py.j2", **plan.context())
    assert 'if getattr(getattr(decoder_layer, "input_layernorm", None), "weight", None) is not None:' in function


def test_a_norm_attribute_that_may_hold_a_weightless_wrapper_is_not_patched():
    # post_attention_layernorm = GatedRMSNorm(config) if sparse else RMSNorm(...); the wrapper has no weight
    attrs = understand("axk2").value("norm_attrs")
    assert "post_attention_layernorm" not in attrs["decoder"] and "input_layernorm" not in attrs["decoder"]
    assert attrs["final"] == "norm"  # a plain RMSNorm: still patched


@pytest.mark.slow
def test_a_hidden_state_read_through_a_slice_is_no_transform():
    for model in ("inkling2_text", "llama"):  # slice_logits_to_keep(outputs.last_hidden_state, k) / outputs[0]
        check = understand(model).checks["logits_transform"]
        assert check.status is Status.SETTLED and check.value is None, model


@pytest.mark.slow
def test_a_patch_of_the_loss_alone_passes_the_targets_ruff(tmp_path, liger_template):
    """Nothing but FLCE to patch (BLOOM, MPT): the generated instance test must not leave `base_model` unused
    (F841 has no safe fix, so the target's checkstyle would fail on our code)."""
    import subprocess
    import sys
    from dataclasses import replace

    from pipelines import target
    from tests.pipelines.autopatch.hand_profiles import hand_profile

    profile = hand_profile("llama").with_overrides({"norm_type": "none", "mlp_kind": "none", "rope": "none"})
    profile = replace(profile, identity=replace(profile.identity, model_type="llama_bare"))
    checkout = target.fetch(tmp_path / "liger-kernel")
    changeset = act.act(checkout, profile)
    python = [p for p in changeset.paths if p.endswith(".py")]
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", *python], cwd=checkout.root, capture_output=True)
    assert proc.returncode == 0, proc.stdout.decode()
    assert "base_model = getattr" not in checkout.path(act.INSTANCE_TEST).read_text().split("llama_bare")[-1]


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("logits.shape[-1]", "logits.shape[-1]"),  # Inkling 2: lm_head writes unpadded_vocab_size columns
        ("self.config.text_config.vocab_size", "self.config.text_config.vocab_size"),
        ("self.config.vocab_size", "self.config.vocab_size"),
        ("compute_vocab(self)", "self.config.vocab_size"),  # not a form the forward can repeat: Liger's own
    ],
)
def test_the_logits_path_hands_the_loss_the_vocab_size_hf_hands_it(tmp_path, given, used):
    from pipelines.autopatch.source import SourceFile
    from pipelines.autopatch.understand import loss_vocab_size

    path = tmp_path / "modeling_x.py"
    path.write_text(
        "class XForCausalLM:\n"
        "    def forward(self, h, labels):\n"
        "        logits = self.lm_head(h)\n"
        f"        return self.loss_function(logits=logits, labels=labels, vocab_size={given})\n"
    )
    assert loss_vocab_size(SourceFile(path), "XForCausalLM") == used


@pytest.mark.slow
def test_a_padded_vocabulary_s_forward_reshapes_logits_by_their_own_width():
    forward = act.render_lce_forward(act.plan(understand("inkling2_text")))
    assert "vocab_size=logits.shape[-1]," in forward and "vocab_size=self.config.vocab_size" not in forward


def _logits_decision(tmp_path, monkeypatch, forward_body: str, head: str = "lm_head"):
    """decide_logits_transform on a CausalLM written here: `self.model` is the base model, `self.<head>` its head."""
    from pipelines.autopatch import source
    from pipelines.autopatch.resolve import ModelRef
    from pipelines.autopatch.source import SourceFile
    from pipelines.autopatch.understand import Facts
    from pipelines.autopatch.understand import decide_logits_transform

    path = tmp_path / "modeling_x.py"
    path.write_text(
        "class XForCausalLM:\n"
        "    def forward(self, input_ids, labels):\n"
        "        outputs = self.model(input_ids)\n"
        + "".join(f"        {line}\n" for line in forward_body.splitlines())
        + "        loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size)\n"
        "        return loss\n"
    )
    monkeypatch.setattr(source, "site_packages", lambda: tmp_path)  # evidence cites paths relative to it
    facts = Facts(ModelRef("x", "XForCausalLM", "XConfig", "x", "X"), SourceFile(path), head_attr=head)
    return decide_logits_transform(facts)


@pytest.mark.parametrize(
    ("body", "head", "settled"),
    [
        ("logits = self.output_projection(outputs[0])", "output_projection", True),  # TrOCR's one line
        ("h = outputs[0]\nlogits = self.embed_out(h[:, -5:, :])", "embed_out", True),
        ("logits = self.lm_head(outputs[0] * self.scale)", "lm_head", False),  # a scale inside the call
        ("logits = self.lm_head(outputs[0])", "output_projection", False),  # not this model's head
    ],
)
def test_the_logits_are_the_head_s_output_whatever_the_head_is_called(tmp_path, monkeypatch, body, head, settled):
    decision = _logits_decision(tmp_path, monkeypatch, body, head)
    assert (decision.status is Status.SETTLED) is settled, decision.reason


def test_a_loss_of_the_model_s_own_that_flce_does_not_compute_needs_review_with_its_line(tmp_path, monkeypatch):
    from pipelines.autopatch import source
    from pipelines.autopatch.resolve import ModelRef
    from pipelines.autopatch.source import SourceFile
    from pipelines.autopatch.understand import Facts
    from pipelines.autopatch.understand import decide_logits_transform

    path = tmp_path / "modeling_x.py"
    path.write_text(
        "class XForCausalLM:\n"
        "    def forward(self, input_ids, labels):\n"
        "        logits = self.lm_head(self.model(input_ids)[0])\n"
        "        loss = focal_loss(logits[:, :-1], labels[:, 1:], gamma=2.0)\n"  # not a cross entropy FLCE computes
        "        return loss\n"
    )
    monkeypatch.setattr(source, "site_packages", lambda: tmp_path)
    facts = Facts(ModelRef("x", "XForCausalLM", "XConfig", "x", "X"), SourceFile(path), head_attr="lm_head")
    decision = decide_logits_transform(facts)
    assert decision.status is Status.NEEDS_REVIEW and "not `self.loss_function`" in decision.reason
    assert "focal_loss(logits[:, :-1], labels[:, 1:], gamma=2.0)" in decision.reason
    (evidence,) = decision.evidence  # the loss line, cited
    assert evidence.file == "modeling_x.py" and evidence.lines == (4, 4) and "focal_loss" in evidence.snippet


def test_a_forward_that_calls_no_head_needs_review(tmp_path, monkeypatch):
    decision = _logits_decision(tmp_path, monkeypatch, "logits = self.lm_head(outputs[0])", "output_projection")
    assert decision.status is Status.NEEDS_REVIEW and "calls no self.output_projection" in decision.reason


@pytest.fixture(scope="module")
def biogpt():
    return understand("biogpt")


def test_a_head_not_named_lm_head_is_read_from_get_output_embeddings_and_reaches_flce(biogpt):
    assert biogpt.identity.output_head_attr == "output_projection"
    assert biogpt.checks["logits_transform"].status is Status.SETTLED
    forward = act.render_lce_forward(act.plan(biogpt))
    assert "lm_head_weight=self.output_projection.weight," in forward  # Liger's helper reads self.lm_head
    assert "logits = self.output_projection(kept_hidden_states)" in forward
    assert "lce_maybe_trainable_lm_head(" not in forward and "self.lm_head" not in forward
    ast.parse(forward)


@pytest.fixture(scope="module")
def trocr():
    return understand("trocr")


def test_a_plain_loss_on_unshifted_labels_hands_them_over_as_shift_labels(trocr):
    from pipelines.autopatch.resolve import resolve
    from pipelines.autopatch.understand import decide_logits_transform
    from pipelines.autopatch.understand import read_facts

    decision = decide_logits_transform(read_facts(resolve("trocr")))  # CrossEntropyLoss, labels not shifted
    assert decision.status is Status.SETTLED and decision.value == [{"unshifted_labels": True}]
    assert "loss_fct(logits.view(-1, self.config.vocab_size), labels.view(-1))" in decision.evidence[-1].snippet
    forward = act.render_lce_forward(act.plan(trocr))
    assert "shift_labels, labels = labels, None" in forward and 'kwargs.pop("num_items_in_batch", None)' in forward
    ast.parse(forward)


@pytest.mark.parametrize(
    ("loss_fct", "loss", "plain"),
    [
        ("CrossEntropyLoss()", "loss_fct(logits.view(-1, V), labels.view(-1))", True),
        ("nn.CrossEntropyLoss()", "loss_fct(logits.reshape(-1, V), labels.reshape(-1))", True),
        ('CrossEntropyLoss(reduction="sum")', "loss_fct(logits.view(-1, V), labels.view(-1))", False),
        ("CrossEntropyLoss()", "loss_fct(logits[:, :-1].view(-1, V), labels[:, 1:].view(-1))", False),  # shifted
        ("CrossEntropyLoss()", "loss_fct(scores.view(-1, V), labels.view(-1))", False),  # not the logits
    ],
)
def test_only_a_default_cross_entropy_on_the_flat_logits_and_labels_counts_as_unshifted(loss_fct, loss, plain):
    from pipelines.autopatch.understand import _unshifted_cross_entropy

    forward = _forward_of(f"def forward(self, labels):\n    loss_fct = {loss_fct}\n    loss = {loss}\n")
    assert _unshifted_cross_entropy(forward.body[-1], forward, {"logits"}) is plain


def test_a_softcap_written_as_a_helper_function_is_passed_to_flce():
    from pipelines.autopatch.resolve import resolve
    from pipelines.autopatch.understand import decide_logits_transform
    from pipelines.autopatch.understand import read_facts
    from pipelines.autopatch.understand import softcap_functions

    class Src:  # the helper's forms: c * tanh(x / c), tanh(x / c) * c; anything else is no softcap
        tree = ast.parse(
            "def cap(values, c=None):\n    if c is None:\n        return values\n    return c * torch.tanh(values / c)\n"
            "if flag:\n    def cap2(c, x):\n        return torch.tanh(x / c) * c\n"
            "def not_cap(x, c):\n    return c * torch.tanh(x * c)\n"
        )

    assert softcap_functions(Src) == {"cap": (0, 1), "cap2": (1, 0)}
    forward = _forward_of("def forward(self, h):\n    logits = cap(logits, self.config.cap)\n")
    assert logits_op(forward.body[-1], {"logits"}, forward, "lm_head", {"cap": (0, 1)}) == {
        "softcap": "self.config.cap"
    }
    assert logits_op(forward.body[-1], {"logits"}, forward, "lm_head", {}) is None
    xlstm = decide_logits_transform(read_facts(resolve("xlstm")))  # `soft_cap(logits, self.config.output_...)`
    assert xlstm.status is Status.SETTLED and xlstm.value == [{"softcap": "self.config.output_logit_soft_cap"}]


def test_a_module_between_the_hidden_state_and_the_head_feeds_flce():
    profile = understand("modernbert-decoder")  # logits = self.decoder(self.lm_head(hidden_states))
    check = profile.checks["logits_transform"]
    assert check.status is Status.SETTLED and check.value == [{"pre_head": "self.lm_head"}]
    forward = act.render_lce_forward(act.plan(profile))
    assert "kept_hidden_states = self.lm_head(kept_hidden_states)" in forward
    assert "lm_head_weight=self.decoder.weight" in forward and "bias=self.decoder.bias" in forward
    assert "logits = self.decoder(kept_hidden_states)" in forward
    ast.parse(forward)
    assert profile.model_type == "modernbert_decoder" and profile.registry_keys == ("modernbert-decoder",)


def test_a_norm_that_some_layers_replace_by_another_module_is_patched_where_it_has_a_weight():
    from pipelines.autopatch.resolve import resolve
    from pipelines.autopatch.understand import read_facts

    # ModernBERT-decoder: `self.attn_norm = nn.LayerNorm(...) if layer_id != 0 else nn.Identity()`
    assert read_facts(resolve("modernbert-decoder")).optional_norms == ("attn_norm",)
    assert read_facts(resolve("llama")).optional_norms == ()
    plan = act.plan(understand("modernbert-decoder"))
    patch = act.render.render("autopatch/monkey_patch_fn.py.j2", **plan.context())
    assert 'if getattr(getattr(decoder_layer, "attn_norm", None), "weight", None) is not None:' in patch
    test = act.render_instance_test(plan)
    assert 'getattr(getattr(layer, "attn_norm", None), "weight", None) is None or' in test


# The rendered forward bound to a tiny TrOCR decoder beside HF's own, in training mode (FLCE through its reference)
UNSHIFTED_LOSS = r"""
import json, sys, types, torch
from pipelines.autopatch import kernel_references
from transformers import TrOCRConfig, TrOCRForCausalLM

kernel_references.install(use_references=True)
forward = types.ModuleType("generated_forward")
exec(sys.stdin.read(), forward.__dict__)
torch.manual_seed(0)
config = TrOCRConfig(
    vocab_size=64, d_model=32, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=64, dropout=0.0,
    attention_dropout=0.0, activation_dropout=0.0, decoder_layerdrop=0.0,
)
model = TrOCRForCausalLM(config).train()
ids = torch.randint(0, 64, (2, 8))
batch = {"input_ids": ids, "labels": ids, "shift_labels": torch.roll(ids, -1, 1), "num_items_in_batch": 3}
expected = model(**batch).loss
got = forward.lce_forward(model, **batch).loss
print(json.dumps({"expected": float(expected), "got": float(got)}))
"""


def test_an_unshifted_loss_ignores_the_callers_shift_labels_as_hf_does(trocr, liger_template):
    # HF's TrOCR forward swallows shift_labels and num_items_in_batch in **kwargs: its loss is on labels alone.
    # Taken as the labels, a collator's shift_labels (Liger's convergence batches) made Whisper and TrOCR diverge.
    import json
    import subprocess
    import sys

    source = act.render_lce_forward(act.plan(trocr))
    env = {"PYTHONPATH": f"{liger_template / 'src'}:{sys.path[0]}", "TRITON_INTERPRET": "1", "PATH": "/usr/bin"}
    argv = [sys.executable, "-c", UNSHIFTED_LOSS]
    proc = subprocess.run(argv, input=source, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert abs(found["expected"] - found["got"]) < 1e-5, found
