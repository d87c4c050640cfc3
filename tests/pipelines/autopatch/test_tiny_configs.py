"""Breadth (issue 17): the tiny config a model is built with, and the names and registry keys its patch gets.

Each rule is checked on the config class or source of a real transformers model of the class it covers (no model
is built here: the rules are unit-tested, the harness builds them).
"""

from __future__ import annotations

import ast

import pytest

from pipelines.autopatch import act
from pipelines.autopatch import probes
from pipelines.autopatch.resolve import liger_name
from pipelines.autopatch.resolve import resolve
from pipelines.autopatch.source import configuration_path
from pipelines.autopatch.source import load
from pipelines.autopatch.understand import own_config_class
from pipelines.autopatch.understand import read_facts
from pipelines.autopatch.understand import registry_keys
from pipelines.outcome import GateStatus
from tests.pipelines.autopatch.hand_profiles import hand_profile


@pytest.fixture
def clean_repairs(monkeypatch):
    monkeypatch.setattr(probes, "_REPAIRS", {})
    monkeypatch.setattr(probes, "_UNBUILDABLE", {})


def test_a_field_the_config_class_lacks_is_given_on_the_sub_config_the_error_names():
    from transformers import DbrxConfig

    error = AttributeError("'DbrxAttentionConfig' object has no attribute 'rope_theta'")
    assert probes.checkpoint_field(DbrxConfig, error) == {"attn_config": {"rope_theta": 10000.0}}
    top = AttributeError("'DbrxConfig' object has no attribute 'pad_token_id'")
    assert probes.checkpoint_field(DbrxConfig, top) == {"pad_token_id": 0}
    assert probes.checkpoint_field(DbrxConfig, AttributeError("'X' object has no attribute 'weird'")) is None
    assert probes.checkpoint_field(DbrxConfig, KeyError("rope_theta")) is None


def test_repairs_accumulate_reach_the_tiny_config_and_stop_when_nothing_changes(clean_repairs):
    from transformers import DbrxConfig

    assert probes._add_repair(DbrxConfig, {"attn_config": {"rope_theta": 10000.0}})
    assert probes._add_repair(DbrxConfig, probes.none_fields(DbrxConfig))  # clip_qkv: None builds no forward
    assert not probes._add_repair(DbrxConfig, {"attn_config": {"clip_qkv": 8.0}})  # known: the loop stops
    config = probes.tiny_config(DbrxConfig)
    assert config.attn_config.rope_theta == 10000.0 and config.attn_config.clip_qkv == 8.0
    assert config.hidden_size == probes.TINY_CONFIG["hidden_size"]


def test_a_per_layer_field_defaulting_to_none_gets_one_entry_per_layer_of_each_config(clean_repairs):
    from transformers import Lfm2MoeConfig

    found = probes.none_fields(Lfm2MoeConfig)
    assert set(found) == {"layer_types"}
    probes._add_repair(Lfm2MoeConfig, found)
    assert probes.repairs(Lfm2MoeConfig, {"num_hidden_layers": 2}) == {"layer_types": ["full_attention"] * 2}
    kwargs = probes.tiny_config_kwargs(Lfm2MoeConfig)
    assert len(kwargs["layer_types"]) == kwargs["num_hidden_layers"]
    # the structure probe keeps the default layer count: the repair follows it instead of being dropped
    structure = probes.tiny_config(Lfm2MoeConfig, keep_defaults=probes.STRUCTURE_FIELDS)
    assert len(structure.layer_types) == Lfm2MoeConfig().num_hidden_layers


def test_rope_parameters_are_keyed_by_layer_type_where_the_model_reads_them_so():
    from transformers import CohereCompassTextConfig
    from transformers import LlamaConfig

    repair = probes.layer_rope_parameters(CohereCompassTextConfig, KeyError("full_attention"))
    assert repair == {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}}
    assert probes.layer_rope_parameters(CohereCompassTextConfig, KeyError("q_proj")) is None
    assert probes.layer_rope_parameters(LlamaConfig, KeyError("full_attention")) is None  # no layer_types


def test_ssm_heads_fit_the_tiny_width_and_an_aliased_head_count_is_set_once():
    from transformers import GPTNeoConfig
    from transformers import Mamba2Config

    kwargs = probes.tiny_config_kwargs(Mamba2Config)  # its validator: hidden_size * expand == num_heads * head_dim
    config = Mamba2Config(**kwargs)
    assert config.hidden_size == probes.TINY_CONFIG["hidden_size"]
    assert config.hidden_size * config.expand == config.num_heads * config.head_dim
    neo = probes.tiny_config_kwargs(GPTNeoConfig)  # attribute_map: num_attention_heads is num_heads
    assert "num_heads" not in neo and neo["num_attention_heads"] == probes.TINY_CONFIG["num_attention_heads"]


def test_a_model_type_with_a_dash_gets_a_python_name_and_keeps_its_registry_key():
    assert liger_name("modernbert-decoder") == "modernbert_decoder"
    assert act.validate_model_type(liger_name("modernbert-decoder")) == "modernbert_decoder"
    assert liger_name("llama") == "llama"
    ref = resolve("modernbert-decoder")
    assert registry_keys(ref, None) == ("modernbert-decoder",)


def _config_src(ref):
    return load(configuration_path(ref.module_name, ref.config_class))


@pytest.mark.parametrize(
    ("model", "config_class", "keys"),
    [
        ("emu3", "Emu3TextConfig", ("emu3", "emu3_text_model")),  # a text config with a model_type of its own
        ("dots3_note", "Dots3NoteTextConfig", ("dots3_note", "dots3_note_text")),  # two model types, one class
        ("llama", "LlamaConfig", ("llama",)),
    ],
)
def test_the_causal_lm_is_built_with_its_own_config_class_and_registered_under_every_model_type(
    model, config_class, keys
):
    ref = resolve(model)
    facts = read_facts(ref)
    own = own_config_class(facts.src, ref)
    assert own == config_class
    assert registry_keys(ref.__class__(**{**ref.__dict__, "config_class": own}), _config_src(ref)) == keys


def test_every_registry_key_maps_to_the_apply_function(liger_template):
    plan = act.plan(hand_profile("emu3"))
    source = (liger_template / act.MONKEY_PATCH).read_text()
    registry = act.edits.find_assignment(ast.parse(act.edit_monkey_patch(source, plan)), "MODEL_TYPE_TO_APPLY_LIGER_FN")
    entries = {
        act.edits.string_value(k): ast.unparse(v)
        for k, v in zip(registry.value.keys, registry.value.values, strict=True)
    }
    assert entries["emu3"] == entries["emu3_text_model"] == "apply_liger_kernel_to_emu3"


def test_a_config_class_in_no_auto_mapping_builds_the_causal_lm_class_itself():
    emu3 = act.render_instance_test(act.plan(hand_profile("emu3")))
    assert "from transformers.models.emu3.modeling_emu3 import Emu3ForCausalLM" in emu3
    assert "dummy_model_instance = Emu3ForCausalLM(config)" in emu3 and "AutoModelForCausalLM" not in emu3
    ast.parse(emu3)
    llama = act.render_instance_test(act.plan(hand_profile("helium")))
    assert "AutoModelForCausalLM.from_config(config)" in llama


@pytest.mark.parametrize(
    ("unpatched", "skipped"),
    [
        ({"ok": False, "error": "RuntimeError: expected both BFloat16 and Float"}, True),  # the model's own failure
        ({"ok": True, "smoke": True, "loss": [6.2]}, False),  # only the patch fails: a finding
        ({"ok": False, "error": "ValueError: other"}, False),  # another failure: the patch's stays reported
    ],
)
def test_a_bf16_step_the_unpatched_model_fails_too_is_skipped_with_both_errors(monkeypatch, unpatched, skipped):
    from pipelines.autopatch import model_check

    patched = {"ok": False, "error": "RuntimeError: expected both BFloat16 and Float", "where": "x"}
    runs = {True: patched, False: unpatched}
    monkeypatch.setattr(model_check, "_bf16_run", lambda spec, data, patched: runs[patched])
    monkeypatch.setattr(model_check, "revert", lambda spec: None)
    result = model_check._bf16_step({}, [])
    if skipped:
        assert result["ok"] and "unpatched model fails this bf16 step too" in result["skipped"]
        from pipelines.autopatch.verify import _run_summary

        assert _run_summary("class bf16", result).startswith("class bf16: skipped: the unpatched model fails")
    else:
        assert result is patched


def test_the_hidden_size_is_given_under_the_name_a_sub_config_copies():
    from transformers import DbrxConfig
    from transformers import LlamaConfig

    kwargs = probes.tiny_config_kwargs(DbrxConfig)  # attribute_map: hidden_size -> d_model, copied by __post_init__
    assert kwargs["d_model"] == probes.TINY_CONFIG["hidden_size"] and "hidden_size" not in kwargs
    assert DbrxConfig(**kwargs).ffn_config.hidden_size == probes.TINY_CONFIG["hidden_size"]
    assert "d_model" not in probes.tiny_config_kwargs(LlamaConfig)
    from pipelines.autopatch.verify import cpu_config

    assert cpu_config({"d_model": 1024})["d_model"] == 1024 // 8  # shrunk on the CPU like hidden_size


def test_the_in_place_probe_covers_every_instance_a_class_swap_reaches():
    import types

    import torch

    class Norm(torch.nn.Module):  # an RMSNorm
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.rand(8) + 0.5)

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    class Block(torch.nn.Module):  # A.X-K1's MoE block: its output is its own norm's, which the layer adds
        def __init__(self):
            super().__init__()
            self.proj, self.post_norm = torch.nn.Linear(8, 8), Norm()

        def forward(self, x):
            return self.post_norm(self.proj(x))

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm, self.mlp = Norm(), Block()

        def forward(self, x):
            return x + self.mlp(self.input_layernorm(x))

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers, self.norm = torch.nn.ModuleList([Layer(), Layer()]), Norm()

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return self.norm(x)

    torch.manual_seed(0)
    built = probes.TinyModel(None, None, None, Model())
    facts = types.SimpleNamespace(
        layers_attr="layers", attn_attr=None, decoder_norms={"input_layernorm": "Norm"}, final_norms={"norm": "Norm"}
    )
    facts.attn_norms = {}
    groups = built.norm_groups(facts)
    assert set(groups) == {"input_layernorm", "final.norm", "other.layers.mlp.post_norm"}
    assert len(groups["other.layers.mlp.post_norm"]) == 2
    x = torch.randn(2, 3, 8)
    result = probes.probe_in_place(built.model, lambda: built.model(x), groups)
    assert result.value is False and "other.layers.mlp.post_norm" in result.matched


def _norm_identity_profile(model):
    from pipelines.autopatch.profile import Identity
    from pipelines.autopatch.profile import Profile

    facts = read_facts(resolve(model))
    norm = next(iter({**facts.decoder_norms, **facts.final_norms}.values()))
    module = f"transformers.models.{facts.ref.module_name}.{facts.src.path.stem}"
    return Profile(
        Identity(
            model,
            model,
            facts.ref.causal_lm_class,
            facts.base_class,
            facts.ref.config_class,
            facts.decoder_class,
            module,
            facts.src.relative,
            norm_class=norm,
        )
    )


@pytest.mark.parametrize(
    ("model", "why"),
    [
        ("xlstm", "calls xLSTMRMSNorm(force_float32_reductions=, num_features=, use_bias=, use_weight=...)"),
        ("gemma4_unified", "with_scale="),  # 5.24 also calls it with dim=, 5.25 no longer
        ("llama", None),
        ("seed_oss", None),
    ],
)
def test_a_norm_class_whose_constructor_liger_s_lacks_is_patched_on_instances_only(model, why):
    model = "gemma4_unified_text" if model == "gemma4_unified" else model
    differs = act.norm_constructor_differs(_norm_identity_profile(model))
    assert (differs is None) if why is None else (why in differs)


def test_a_norm_patched_on_instances_only_is_not_swapped_at_class_level():
    norm = act.Norm("rms_norm", "XRMSNorm", "LigerRMSNorm", "partial(_patch_rms_norm_module)", "norm", ("a",), ())
    assert norm.class_level
    only = act.Norm(**{**norm.__dict__, "instance_only": "XRMSNorm.__init__ takes with_scale"})
    assert not only.class_level


def test_the_numerics_script_sets_a_softcap_off_past_a_strict_config_s_field_check():
    import json

    from transformers import Inkling2TextConfig

    from pipelines.autopatch.verify import NUMERICS_SCRIPT

    with pytest.raises(
        Exception, match="final_logit_softcapping"
    ):  # @strict checks each assignment: setattr cannot switch the softcap off
        Inkling2TextConfig().final_logit_softcapping = None
    head = NUMERICS_SCRIPT.split("modeling = importlib.import_module")[0]  # the config part, before any model
    spec = {
        "config_module": "transformers.models.inkling2.configuration_inkling2",
        "config_class": "Inkling2TextConfig",
        "config": {},
        "after": {"final_logit_softcapping": None},
    }
    scope: dict = {}
    import sys

    argv, sys.argv = sys.argv, ["numerics", json.dumps(spec)]
    try:
        exec(compile(head, "numerics", "exec"), scope)  # the pipeline's own script text, not transformers'
    finally:
        sys.argv = argv
    assert scope["config"].final_logit_softcapping is None


SOFTCAP_MODULE = """
import torch


class XConfig:
    def __init__(self, vocab_size=32, final_logit_softcapping=30.0):
        self.vocab_size, self.final_logit_softcapping = vocab_size, final_logit_softcapping


class XSoftcap(torch.nn.Module):  # as Inkling 2 Loop's: the cap is divided by whatever it is
    def __init__(self, cap):
        super().__init__()
        self.cap = cap

    def forward(self, x):
        return torch.tanh(x / self.cap) * self.cap


class XForCausalLM(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.lm_head = torch.nn.Embedding(config.vocab_size, config.vocab_size)
        self.softcap = XSoftcap(config.final_logit_softcapping)

    def forward(self, input_ids, labels):
        return self.softcap(self.lm_head(input_ids))
"""


def test_a_softcap_the_unpatched_model_cannot_run_without_skips_the_numerics_gate_with_why(tmp_path):
    import json
    import subprocess
    import sys

    from pipelines.autopatch import verify
    from pipelines.subprocesses import CommandResult

    (tmp_path / "x_softcap_model.py").write_text(SOFTCAP_MODULE)
    spec = {"config_module": "x_softcap_model", "config_class": "XConfig", "config": {}}
    spec |= {"modeling_module": "x_softcap_model", "causal_lm_class": "XForCausalLM"}
    spec |= {"model_type": "x", "after": {"final_logit_softcapping": None}}
    argv = [sys.executable, "-c", verify.NUMERICS_SCRIPT, json.dumps(spec)]
    proc = subprocess.run(argv, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found == {"reference_failed": "TypeError: unsupported operand type(s) for /: 'Tensor' and 'NoneType'"}

    class Replay:  # the gate reads that line back from its child
        has_gpu = False

        def run(self, argv, cwd, env=None, timeout=900):
            return CommandResult(tuple(argv), 0, proc.stdout)

    gate = verify.gate_cpu_numerics(hand_profile("llama"), tmp_path, Replay())
    assert gate.status is GateStatus.SKIP and not gate.hard
    assert "the unpatched HF model itself fails (TypeError: unsupported operand" in gate.detail
