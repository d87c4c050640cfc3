"""act: from a Profile, the Changeset of the files LinkedIn's liger-autopatch skill lists (text models: 12 of 13).

`plan` turns the profile's decisions into what gets patched (and refuses what cannot be generated safely);
`build_changeset` renders the templates and splices them into the target's files (see `edits.py`); `act` writes
the changeset and runs the target's own `ruff check --fix` and `ruff format` on the touched files.

Decisions marked `needs review`: where a conservative choice exists (RoPE, the norm, the MLP) that kernel is not
patched and the reason goes into the PR body; where the decision shapes the generated forward itself (structure,
vision, hidden-state access, output class, softcapping) act refuses and names the `--set field=value` to settle it.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
import time
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from pipelines import render
from pipelines.autopatch import edits
from pipelines.autopatch import supported
from pipelines.autopatch.profile import Profile
from pipelines.autopatch.profile import Status
from pipelines.autopatch.resolve import mappings
from pipelines.changeset import Changeset
from pipelines.changeset import FileChange
from pipelines.changeset import edit_file
from pipelines.changeset import format_with_target_style
from pipelines.outcome import PipelineError
from pipelines.target import Checkout

MODEL_TYPE_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
ROOT_EXPORTS = Path("src/liger_kernel/transformers/__init__.py")
MONKEY_PATCH = Path("src/liger_kernel/transformers/monkey_patch.py")
INSTANCE_TEST = Path("test/transformers/test_monkey_patch.py")
TEST_UTILS = Path("test/utils.py")
README = Path("README.md")
RMS_NORM = Path("src/liger_kernel/transformers/rms_norm.py")
CONVERGENCE_FILES = (
    Path("test/convergence/bf16/test_mini_models.py"),
    Path("test/convergence/bf16/test_mini_models_with_logits.py"),
    Path("test/convergence/fp32/test_mini_models.py"),
    Path("test/convergence/fp32/test_mini_models_with_logits.py"),
)
# Decisions the generated forward depends on: there is no conservative default, so `needs review` refuses.
FORWARD_DECISIONS = ("structure", "has_vision", "hidden_state_access", "output_class", "logit_softcapping")
STANDARD_OUTPUTS = ("LigerCausalLMOutputWithPast", "LigerMoeCausalLMOutputWithPast")
# (learning rate, loss atol, loss rtol, logprobs atol, logprobs rtol, param atol, param rtol): taken, file by file,
# from the target's own enabled entry for a model of the same family (REFERENCE_CASES); these are the fallback when
# a file has none. MoE needs qwen3_moe's lr 1e-5: with 1e-4 (Liger's commented-out mixtral entry) olmoe and qwen2_moe
# failed 6 of 7 cases on an H200.
REFERENCE_CASES = {"dense": "mini_mistral", "moe": "mini_qwen3_moe"}
TOLERANCES = {
    ("dense", "bfloat16"): ("1e-5", "1e-2", "5e-2", "1e-1", "1e-2", "1e-2", "1e-2"),
    ("dense", "float32"): ("1e-4", "1e-8", "1e-5", "5e-3", "1e-5", "5e-3", "1e-5"),
    ("moe", "bfloat16"): ("1e-5", "5e-2", "2e-1", "1e-1", "1e-1", "1e-2", "1e-2"),
    ("moe", "float32"): ("1e-5", "1e-5", "1e-3", "5e-3", "1e-2", "5e-3", "1e-5"),
}
# Liger's mini models train on test/resources/tiny_shakespeare_tokenized, tokenized with the Mistral-7B tokenizer:
# token ids go up to 31999, so the vocabulary must hold 32000 (the skill's 1024 indexes out of range).
CONVERGENCE_VOCAB_SIZE = 32000
PARAM_ANNOTATIONS = {
    "input_ids": "Optional[torch.LongTensor] = None",
    "attention_mask": "Optional[torch.Tensor] = None",
    "position_ids": "Optional[torch.LongTensor] = None",
    "inputs_embeds": "Optional[torch.FloatTensor] = None",
    "labels": "Optional[torch.LongTensor] = None",
    "use_cache": "Optional[bool] = None",
    "output_attentions": "Optional[bool] = None",
    "output_hidden_states": "Optional[bool] = None",
    "output_router_logits": "Optional[bool] = None",
    "cache_position": "Optional[torch.LongTensor] = None",
    "cache": "Optional[Cache] = None",
    "past_key_values": "Optional[Cache] = None",
    "logits_to_keep": "Union[int, torch.Tensor] = 0",
}
NOT_FORWARDED = ("labels", "logits_to_keep")  # consumed by the forward itself, not passed to the base model
OWN_PARAMS = ("return_dict", "skip_logits")  # the generated forward declares these itself


@dataclass(frozen=True)
class Norm:
    kind: str  # "rms_norm" or "layer_norm"
    hf_class: str
    class_value: str  # what the modeling module's norm class is replaced with
    patch_partial: str | None  # a partial of Liger's instance patcher when the semantics differ from its defaults
    final: str | None
    decoder: tuple[str, ...]
    attn: tuple[str, ...]
    optional: tuple[str, ...] = ()  # "attr" / "self_attn" / "self_attn.attr" that not every instance has
    attn_attr: str = "self_attn"
    subclass: dict | None = None  # a LigerRMSNorm subclass to add to rms_norm.py (class_value names it)
    instance_only: str | None = None  # why the class cannot be swapped (its constructor takes what Liger's lacks)

    def targets(self, layer: str) -> list[dict]:
        """Per norm on a decoder layer: its owner, attribute, whether an instance may lack it, and how to read it.

        Hybrid models build the attention only on some layers (Qwen3-Next: `self_attn` or `linear_attn`), so
        its norms are then read through `getattr(..., None)`.
        """
        found = [_target(layer, a, a in self.optional) for a in self.decoder]
        attn_optional = self.attn_attr in self.optional
        owner = f'getattr({layer}, "{self.attn_attr}", None)' if attn_optional else f"{layer}.{self.attn_attr}"
        found += [_target(owner, a, attn_optional or f"{self.attn_attr}.{a}" in self.optional) for a in self.attn]
        return found

    @property
    def param(self) -> str:
        return self.kind

    @property
    def label(self) -> str:
        return "RMSNorm" if self.kind == "rms_norm" else "LayerNorm"

    @property
    def liger_class(self) -> str:
        return "LigerRMSNorm" if self.kind == "rms_norm" else "LigerLayerNorm"

    @property
    def class_level(self) -> bool:
        """A class the modeling module defines can be swapped there; `nn.LayerNorm` is torch's own: swapping
        `modeling_x.nn.LayerNorm` would replace it in every module of the process."""
        return "." not in self.hf_class and not self.instance_only

    @property
    def patch_fn(self) -> str:
        if self.patch_partial:
            return f"_patch_{self.kind}_module_for_model"
        return f"_patch_{self.kind}_module"


def _target(owner: str, attr: str, optional: bool) -> dict:
    plain = owner.isidentifier() or owner.replace(".", "").isidentifier()
    return {
        "owner": owner,
        "attr": attr,
        "optional": optional,
        "expr": f"{owner}.{attr}" if plain else f'getattr({owner}, "{attr}")',
    }


@dataclass(frozen=True)
class Mlp:
    param: str  # swiglu | geglu | relu_squared
    label: str
    class_statement: str
    instance_statement: str
    before_check: str  # instance test: the layer is not patched yet
    after_check: str
    test_import: str | None = None
    extra_checks: tuple[tuple[str, str], ...] = ()  # (before, after) pairs beyond the first


@dataclass(frozen=True)
class Plan:
    """Everything the templates need, derived once from the profile."""

    profile: Profile
    rope: bool
    norm: Norm | None
    mlp: Mlp | None
    moe: bool  # routes tokens to experts (structure moe or hybrid)
    notes: tuple[str, ...] = field(default=())

    @property
    def model_type(self) -> str:
        return self.profile.model_type

    @property
    def tolerance_family(self) -> str:
        return "moe" if self.moe else "dense"

    @property
    def tolerance_note(self) -> str:
        kind = "a model with routed experts" if self.moe else "a dense model"
        fallback = f"`{REFERENCE_CASES[self.tolerance_family]}` entry of each file ({kind})"
        note = f"The convergence entries copy lr and tolerances from Liger's enabled {fallback}."
        if parents := self.profile.identity.derived_from:
            note += (
                f" Where a file has an enabled entry for a model that {self.model_type}'s modular file subclasses"
                f" ({', '.join(parents)}; routed only from routed; a parent with none there counts its entry in the"
                " same dtype's multimodal file), the smallest of their lrs is taken and each tolerance is the loosest"
                " of those entries and the family's."
            )
        if self.moe:  # why the mini router is dense, where a reviewer of the entry would ask
            note += (
                " Their mini router picks 2 of 2 experts: with a sparse router, the TF32 rounding of Liger's fused"
                " MoE in fp32 flips expert choices between the HF and Liger runs (tokens then differ by up to 1.3 in"
                " logprob, whatever the patch); sparse routing is checked exactly on the CPU, 2 of 8 experts."
                " Their hidden size, expert width, layer and head counts are those of the entry the tolerances come"
                " from: the TF32 error of Liger's fused experts grows with the width its dots reduce over."
            )
        return note

    @property
    def modeling_package(self) -> str:
        return self.profile.identity.modeling_module.rsplit(".", 1)[0]

    @property
    def modeling_name(self) -> str:
        return self.profile.identity.modeling_module.rsplit(".", 1)[1]

    @property
    def config_module(self) -> str:
        return config_module_of(self.profile)

    @property
    def available_flag(self) -> str:
        return f"{self.model_type.upper()}_AVAILABLE"

    @property
    def operations(self) -> str:
        ops = ["RoPE"] if self.rope else []
        ops += [self.norm.label] if self.norm else []
        ops += [self.mlp.label] if self.mlp else []
        return ", ".join(ops + ["CrossEntropyLoss", "FusedLinearCrossEntropy"])

    @property
    def apply_params(self) -> list[str]:
        params = ["rope"] if self.rope else []
        params += ["cross_entropy", "fused_linear_cross_entropy"]
        params += [self.norm.param] if self.norm else []
        params += [self.mlp.param] if self.mlp else []
        return params

    def context(self) -> dict:
        ident = self.profile.identity
        return {
            "model_type": self.model_type,
            "display_name": ident.display_name,
            "causal_lm_class": ident.causal_lm_class,
            "base_model_class": ident.base_model_class,
            "base_model_attr": ident.base_model_attr,
            "base_model_of": functools.partial(base_model_lookup, ident.base_model_attr),
            "config_class": ident.config_class,
            "modeling_module": ident.modeling_module,
            "modeling_file": ident.modeling_file,
            "modeling_package": self.modeling_package,
            "modeling_name": self.modeling_name,
            "config_module": self.config_module,
            "layers_attr": ident.layers_attr,
            "rotary_fn": ident.rotary_fn or "apply_rotary_pos_emb",
            "available_flag": self.available_flag,
            "rope": self.rope,
            "norm": self.norm,
            "mlp": self.mlp,
            "moe": self.moe,
            "notes": list(self.notes),
            # the convergence tests pass rope/rms_norm/swiglu to every model: absorb the ones this model lacks
            "absorbs_kwargs": not {"rope", "rms_norm", "swiglu"} <= set(self.apply_params),
        }


def validate_model_type(model_type: str) -> str:
    if not MODEL_TYPE_RE.match(model_type):
        raise PipelineError(
            f"{model_type!r} is not a model_type Liger can name files after (lowercase letters, digits, _): "
            f"apply_liger_kernel_to_<model_type> and model/<model_type>.py are spelled with it",
            hint="a model_type with '-' needs a hand-chosen Python name for its apply function",
        )
    return model_type


def _refuse_failed_checks(profile: Profile) -> None:
    for key in profile.failed_checks():
        check = profile.checks[key]
        where = ", ".join(f"{e.file}:{e.lines[0]} `{e.snippet.strip()}`" for e in check.evidence)
        raise PipelineError(
            f"{profile.model_type}: {check.reason} ({where}); the generated lce_forward computes the loss from "
            "lm_head's output directly and would drop it",
            hint="this model needs a hand-written lce_forward that applies the same transform",
        )


def _refuse_unsettled(profile: Profile) -> None:
    _refuse_failed_checks(profile)
    for key in FORWARD_DECISIONS:
        decision = profile.decisions.get(key)
        if decision is None or decision.status is Status.NEEDS_REVIEW:
            why = decision.reason if decision else "it is missing from the profile"
            raise PipelineError(
                f"{profile.model_type}: decision {key!r} needs review ({why}); the generated forward depends on it",
                hint=f"settle it with --set {key}=VALUE after reading the evidence",
            )
    if profile.value("has_vision"):
        raise PipelineError(
            f"{profile.model_type} has a vision encoder; autopatch generates text models only",
            hint="patch the text model's model_type, or write the VL patch by hand",
        )
    if profile.value("output_class") not in STANDARD_OUTPUTS:
        raise PipelineError(
            f"{profile.model_type}: output class {profile.value('output_class')!r} needs a new output_classes.py entry",
            hint=f"--set output_class={STANDARD_OUTPUTS[0]} if the model returns no extra fields",
        )


def _settled(profile: Profile, *keys: str) -> str | None:
    """The first of `keys` that is missing or needs review, or None when all are settled."""
    for key in keys:
        decision = profile.decisions.get(key)
        if decision is None or decision.status is Status.NEEDS_REVIEW:
            return key
    return None


LEFT_OUT = "Left out:"  # the prefix of every note that names a kernel this patch does not apply


def left_out(kernel: str, why: str, to_add: str) -> str:
    """A partial patch's note: the kernel, why it is not applied, and what would add it."""
    return f"{LEFT_OUT} {kernel}. Why: {why.rstrip('.')}. To add it: {to_add.rstrip('.')}."


def _reason(profile: Profile, key: str) -> str:
    decision = profile.decisions.get(key)
    return (decision.reason if decision and decision.reason else f"decision `{key}` is {profile.value(key)!r}")[:300]


def _activation(profile: Profile) -> str | None:
    """The config's default activation name when transformers' ACT2FN has it (what `/liger kernel` takes)."""
    from transformers.activations import ACT2FN

    package, name = profile.identity.modeling_module.rsplit(".", 1)
    try:
        module = importlib.import_module(f"{package}.{name.replace('modeling_', 'configuration_', 1)}")
        config = getattr(module, profile.identity.config_class)()
    except Exception:  # no configuration module of that name, or a config that refuses its own defaults
        return None
    for field_name in ("hidden_act", "activation_function", "hidden_activation"):
        value = getattr(config, field_name, None)
        if isinstance(value, str) and value in ACT2FN:
            return value
    return None


def _plan_rope(profile: Profile, notes: list[str]) -> bool:
    unsettled = _settled(profile, "rope")
    if unsettled:
        notes.append(
            left_out(
                "RoPE (liger_rotary_pos_emb)",
                f"decision `rope` needs review: {_reason(profile, 'rope')}",
                "`/liger set rope=standard` after reading the evidence (or `--set rope=standard` on the CLI)",
            )
        )
        return False
    if profile.value("rope") != "standard":
        reason = _reason(profile, "rope")
        if profile.value("rope") == "none" and "calls no rotary function" in reason:
            return False  # no rotary embedding at all (ALiBi, learned positions): nothing left out
        notes.append(
            left_out(
                "RoPE (liger_rotary_pos_emb)",
                f"the model's rotary embedding is {profile.value('rope')!r}: {reason}",
                "no `/liger` command builds it: Liger's rope kernel rotates halves (rotate_half, partial widths "
                "included); this variant needs its own kernel in src/liger_kernel/ops/rope.py, written by hand",
            )
        )
        return False
    return True


def _mlp_left_out(profile: Profile, why: str) -> str:
    activation = _activation(profile)
    to_add = (
        f"`/liger kernel {activation}` writes the Triton kernel for its activation `{activation}` (ops, module, "
        "tests, benchmark); binding it into this MLP is then one line of the apply function"
        if activation
        else "no `/liger` command builds it: the MLP's activation is not a transformers ACT2FN name; give "
        "`/liger kernel path/in/repo.py:function` a copy of it"
    )
    return left_out(f"the MLP ({profile.identity.mlp_class or profile.identity.experts_class})", why, to_add)


def _plan_norm(profile: Profile, notes: list[str]) -> Norm | None:
    ident = profile.identity
    unsettled = _settled(profile, "norm_type", "norm_attrs")
    if unsettled:
        notes.append(
            left_out(
                "the norms",
                f"decision `{unsettled}` needs review: {_reason(profile, unsettled)}",
                f"`/liger set {unsettled}=VALUE` after reading the evidence",
            )
        )
        return None
    norm_type = profile.value("norm_type")
    if norm_type not in ("rms", "layer") or not ident.norm_class:
        if norm_type != "none":
            notes.append(
                left_out(
                    "the norms",
                    f"norm type {norm_type!r} with class {ident.norm_class!r}",
                    "`/liger set norm_type=rms` or `norm_type=layer` if one family is meant",
                )
            )
        return None
    attrs = profile.value("norm_attrs") or {}
    final, decoder, attn = attrs.get("final"), tuple(attrs.get("decoder") or ()), tuple(attrs.get("attn") or ())

    def norm(kind: str, class_value: str, patch_partial: str | None = None, subclass: dict | None = None) -> Norm:
        return Norm(
            kind,
            ident.norm_class,
            class_value,
            patch_partial,
            final,
            decoder,
            attn,
            ident.optional_attrs,
            ident.attn_attr,
            subclass,
        )

    if norm_type == "layer":
        if _settled(profile, "rms_offset") is None and float(profile.value("rms_offset") or 0.0):
            notes.append(
                left_out(
                    "LayerNorm (LigerLayerNorm)",
                    "the model's LayerNorm adds 1 to its weight; LigerLayerNorm has no offset",
                    "`/liger kernel path/in/repo.py:function` with a copy of the norm's forward writes a kernel for it",
                )
            )
            return None
        missing = layer_norm_lacks(profile)
        if missing:
            notes.append(
                left_out(
                    "LayerNorm (LigerLayerNorm)",
                    f"{ident.norm_class} defines no {' and no '.join(missing)}: LigerLayerNorm's forward reads "
                    "self.bias and its repr self.eps, and a bias-free LayerNorm has no bias to hand it",
                    "a bias-free variant of LigerLayerNorm (bias=None in ops/layer_norm.py), written by hand",
                )
            )
            return None
        planned = norm("layer_norm", "LigerLayerNorm")
        if not planned.class_level:
            notes.append(
                f"LayerNorm is patched on model instances only: the modeling file builds torch's `{ident.norm_class}` "
                "directly, and a class-level swap would replace it in every module of the process."
            )
        return planned
    unsettled = _settled(profile, "rms_casting_mode", "rms_offset", "rms_in_place")
    if unsettled:
        notes.append(
            left_out(
                "RMSNorm (LigerRMSNorm)",
                f"decision `{unsettled}` needs review: {_reason(profile, unsettled)}",
                f"`/liger set {unsettled}=VALUE` after reading the probe's residuals",
            )
        )
        return None
    mode, offset, in_place = (
        profile.value("rms_casting_mode"),
        profile.value("rms_offset"),
        profile.value("rms_in_place"),
    )
    differs = norm_constructor_differs(profile)
    if differs:  # gemma4_unified's `dim=` / `with_scale=`, xLSTM's `num_features=`: Liger's class takes neither
        options = f'offset={float(offset)!r}, casting_mode="{mode}", in_place={bool(in_place)}'
        notes.append(f"RMSNorm is patched on model instances only: {differs}.")
        planned = norm("rms_norm", "LigerRMSNorm", f"partial(_patch_rms_norm_module, {options})")
        return Norm(**{**planned.__dict__, "instance_only": differs})
    if (mode, float(offset), bool(in_place)) == ("llama", 0.0, True):
        return norm("rms_norm", "LigerRMSNorm")
    options = f'offset={float(offset)!r}, casting_mode="{mode}", in_place={bool(in_place)}'
    init = ', init_fn="zeros"' if float(offset) else ""
    instance_patch = f"partial(_patch_rms_norm_module, {options})"
    checked_at = isinstance_checks(profile, ident.norm_class)
    if not checked_at:
        return norm("rms_norm", f"partial(LigerRMSNorm, {options}{init})", instance_patch)
    # a class the modeling file tests with isinstance (its _init_weights) must stay a class: Liger's convention,
    # a LigerRMSNorm subclass with these defaults in rms_norm.py (as LigerRMSNormForGemma)
    name = f"LigerRMSNormFor{_pascal(ident.display_name)}"
    subclass = {
        "name": name,
        "hf_class": ident.norm_class,
        "checked_at": checked_at,
        "offset": repr(float(offset)),
        "casting_mode": mode,
        "init_fn": "zeros" if float(offset) else "ones",
        "in_place": bool(in_place),
    }
    return norm("rms_norm", name, instance_patch, subclass)


def _pascal(display_name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^0-9A-Za-z]+", display_name) if part)


def isinstance_checks(profile: Profile, class_name: str) -> str | None:
    """`file:line` of the first `isinstance(..., class_name)` of the modeling file, if it has one."""
    src = modeling_source(profile)
    for node in ast.walk(src.tree) if src else ():
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2:
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            if any(getattr(kind, "id", None) == class_name for kind in kinds):
                return f"{profile.identity.modeling_file}:{node.lineno}"
    return None


def modeling_source(profile: Profile):
    """The profiled model's modeling file as parsed source, or None for a profile of a model this environment lacks
    (its readers then fall back to Liger's plain forms). Parsed once: `source.load` caches by path."""
    from pipelines.autopatch.source import load
    from pipelines.autopatch.source import site_packages

    try:
        return load(site_packages() / profile.identity.modeling_file)
    except (OSError, SyntaxError):
        return None


def layer_norm_lacks(profile: Profile) -> list[str]:
    """`bias` / `eps` a LayerNorm class defined in the modeling file never sets (Cohere's is bias-free and keeps
    only `variance_epsilon`); nn.LayerNorm and its subclasses have both."""
    ident, src = profile.identity, modeling_source(profile)
    if src is None:
        return []
    if ident.norm_class not in src.classes or any("LayerNorm" in b for b in src.external_bases(ident.norm_class)):
        return []
    assigned = {a.attr for name in src.lineage(ident.norm_class) for a in src.self_assignments(name)}
    return [attr for attr in ("bias", "eps") if attr not in assigned]


def _getsource_checks(target: str, liger: str) -> tuple[str, str]:
    return (
        f"inspect.getsource({target}.forward) != inspect.getsource({liger}.forward)",
        f"inspect.getsource({target}.forward) == inspect.getsource({liger}.forward)",
    )


def _plan_mlp(profile: Profile, notes: list[str]) -> Mlp | None:
    ident, modeling = profile.identity, profile.identity.modeling_module.rsplit(".", 1)[1]
    unsettled = _settled(profile, "mlp_kind")
    if unsettled:
        notes.append(_mlp_left_out(profile, f"decision `mlp_kind` needs review: {_reason(profile, 'mlp_kind')}"))
        return None
    kind, structure, mlp = profile.value("mlp_kind"), profile.value("structure"), f"decoder_layer.{ident.mlp_attr}"
    if structure in ("moe", "hybrid") and kind == "swiglu" and ident.experts_class and ident.experts_attr:
        return _moe_mlp(profile, notes)
    if kind == "none" and not ident.mlp_class and not ident.experts_class:
        return None  # no MLP on the decoder layer (mixer-only layers): nothing left out
    if structure != "dense":
        why = f"structure {structure!r} with mlp kind {kind!r}: {_reason(profile, 'mlp_kind')}"
        notes.append(_mlp_left_out(profile, why))
        return None
    if kind == "relu_squared":
        return Mlp(
            "relu_squared",
            "ReLUSquared",
            f'{modeling}.ACT2FN["relu2"] = LigerReLUSquared',
            f"{mlp}.act_fn = LigerReLUSquared()",
            f"not isinstance(layer.{ident.mlp_attr}.act_fn, LigerReLUSquared)",
            f"isinstance(layer.{ident.mlp_attr}.act_fn, LigerReLUSquared)",
            "from liger_kernel.transformers import LigerReLUSquared",
        )
    liger = {"swiglu": ("swiglu", "SwiGLU", "LigerSwiGLUMLP"), "geglu": ("geglu", "GeGLU", "LigerGEGLUMLP")}
    liger["phi3_swiglu"] = ("swiglu", "SwiGLU", "LigerPhi3SwiGLUMLP")
    if kind not in liger or not ident.mlp_class:
        notes.append(_mlp_left_out(profile, f"mlp kind {kind!r}: {_reason(profile, 'mlp_kind')}"))
        return None
    param, label, cls = liger[kind]
    instance = f"_patch_geglu_module({mlp})" if kind == "geglu" else f"_patch_swiglu_module({mlp}, {cls})"
    before, after = _getsource_checks(f"layer.{ident.mlp_attr}", cls)
    differs = class_swap_differs(profile, ident.mlp_class, cls)
    if differs:
        notes.append(f"{ident.mlp_class} is patched on instances only: {differs}.")
        return Mlp(param, label, "pass  # every swap is made on instances", instance, before, after)
    return Mlp(param, label, f"{modeling}.{ident.mlp_class} = {cls}", instance, before, after)


def _liger_mlp_parameters(liger_class: str, hidden: int, width: int) -> dict[str, tuple[int, ...]]:
    """The parameters Liger's MLP builds from a config (swiglu.py / geglu.py: bias-free, config.intermediate_size)."""
    if liger_class == "LigerPhi3SwiGLUMLP":
        return {"gate_up_proj.weight": (2 * width, hidden), "down_proj.weight": (hidden, width)}
    return {"gate_proj.weight": (width, hidden), "up_proj.weight": (width, hidden), "down_proj.weight": (hidden, width)}


LIGER_RMS_NORM_KEYWORDS = frozenset({"hidden_size", "eps"})  # what HF call sites may pass LigerRMSNorm by name


def norm_constructor_differs(profile: Profile) -> str | None:
    """Why `modeling.<Norm> = LigerRMSNorm` would break the model's own constructor calls, or None: the HF class
    takes parameters beyond (width, eps) (Gemma 4 Unified's `with_scale`), or a call in the modeling file passes
    a keyword LigerRMSNorm lacks (`dim=`, `num_features=`)."""
    import inspect

    name = profile.identity.norm_class
    cls = getattr(importlib.import_module(profile.identity.modeling_module), name or "", None)
    if cls is None or "." in (name or ""):
        return None
    params = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    extra = [p for p in params[1:] if p != "eps" and not p.startswith("*")]
    src = modeling_source(profile)
    used = set()
    for node in ast.walk(src.tree) if src else ():
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == name:
            used |= {k.arg for k in node.keywords if k.arg}
    unknown = sorted(used - LIGER_RMS_NORM_KEYWORDS)
    if unknown:
        return f"the modeling file calls {name}({', '.join(f'{k}=' for k in unknown)}...), which LigerRMSNorm lacks"
    if extra:
        return f"{name}.__init__ takes {', '.join(extra)}, which LigerRMSNorm lacks"
    return None


def class_swap_differs(profile: Profile, hf_class: str, liger_class: str) -> str | None:
    """Why replacing the HF MLP class by Liger's would build other parameters (RecurrentGemma: biases, half the
    config's width), or None when it builds the same: the instance patch keeps HF's modules and only binds
    Liger's forward, the class swap builds Liger's. Checked on the probes' tiny config."""
    from pipelines.autopatch import probes

    modeling = importlib.import_module(profile.identity.modeling_module)
    lacks = _constructor_lacks(getattr(modeling, hf_class, None), liger_class)
    if lacks:
        return f"{hf_class}.__init__ requires {', '.join(lacks)}, which {liger_class}'s constructor lacks"
    try:
        config = probes.tiny_config(config_class_of(profile))
        built = getattr(modeling, hf_class)(config)
    except Exception:  # needs more than a config (a layer index): as before, the whole-model gate judges the swap
        return None
    got = {name: tuple(p.shape) for name, p in built.named_parameters()}
    expected = _liger_mlp_parameters(liger_class, config.hidden_size, config.intermediate_size)
    if got == expected:
        return None
    only_hf = sorted(set(got) - set(expected))
    reshaped = sorted(n for n in set(got) & set(expected) if got[n] != expected[n])
    parts = [f"{liger_class} has no {', '.join(only_hf)}"] if only_hf else []
    parts += [f"{n} is {got[n]} in HF, {expected[n]} in {liger_class}" for n in reshaped]
    return "; ".join(parts) or f"{liger_class} builds {', '.join(sorted(set(expected) - set(got)))} it lacks"


# What Liger 0.8.5's dense MLP classes take (swiglu.py / geglu.py): the modeling file's own calls of the HF class
# pass the same arguments to the class swapped in.
LIGER_MLP_CONSTRUCTORS = {
    "LigerSwiGLUMLP": ("config", "intermediate_size"),
    "LigerGEGLUMLP": ("config",),
    "LigerPhi3SwiGLUMLP": ("config",),
}


def _constructor_lacks(hf_cls: type | None, liger_class: str) -> list[str]:
    """The required parameters of the HF class's constructor, after the config, that Liger's class does not take
    (Gemma 4 Unified's MLP(config, layer_idx): swapped, the model's own call would raise TypeError)."""
    import inspect

    if hf_cls is None or liger_class not in LIGER_MLP_CONSTRUCTORS:
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = [p for p in inspect.signature(hf_cls.__init__).parameters.values() if p.name != "self"]
    required = [p.name for p in params[1:] if p.kind in kinds and p.default is inspect.Parameter.empty]
    return [name for name in required if name not in LIGER_MLP_CONSTRUCTORS[liger_class]]


MOE_DENSE_MLP = "LigerSwiGLUMLP"  # the dense layers and shared experts of MoE models (Liger: also Qwen3Moe-named)


def _swaps_at_class_level(profile: Profile, class_name: str) -> bool:
    """Whether the HF MLP class can be replaced by MOE_DENSE_MLP: its constructor takes what that one takes."""
    import inspect

    cls = getattr(importlib.import_module(profile.identity.modeling_module), class_name, None)
    if cls is None:
        return False
    params = set(inspect.signature(cls.__init__).parameters) - {"self"}
    return params <= {"config", "intermediate_size"}


# experts conventions LigerExperts cannot serve (probes.experts_convention / serves_weightless_experts): why
EXPERTS_LEFT_TO_HF = {
    "pre_routed": "it takes pre-routed rows, LigerExperts takes (x, top_k_index, top_k_weights)",
    "weightless_experts": "its router also picks experts past its weights (zero-computation experts, which return "
    "their input scaled by the routing weight), and LigerExperts computes every picked expert from gate_up_proj / "
    "down_proj rows",
}


def _moe_mlp(profile: Profile, notes: list[str]) -> Mlp | None:
    """Experts -> LigerExperts; the dense layers' MLP and the shared experts -> MOE_DENSE_MLP (the probe
    proved SwiGLU for both), on instances per layer: a layer with experts is a MoE block, one without is dense."""
    ident, modeling = profile.identity, profile.identity.modeling_module.rsplit(".", 1)[1]
    mlp, layer_mlp, experts = f"decoder_layer.{ident.mlp_attr}", f"layer.{ident.mlp_attr}", ident.experts_attr
    has_experts, layer_has_experts = f'hasattr({mlp}, "{experts}")', f'hasattr({layer_mlp}, "{experts}")'
    left_out = EXPERTS_LEFT_TO_HF.get(ident.experts_convention)
    routed = left_out is None
    classes = [f"{modeling}.{ident.experts_class} = LigerExperts"] if routed else []
    if not routed:
        notes.append(
            f"{ident.experts_class} is left to HF: {left_out}; the shared expert and the dense layers get "
            "LigerSwiGLUMLP."
        )
    if ident.mlp_class and _swaps_at_class_level(profile, ident.mlp_class):
        classes.append(f"{modeling}.{ident.mlp_class} = {MOE_DENSE_MLP}")
    elif ident.mlp_class:
        notes.append(f"{ident.mlp_class} is patched on instances only: its constructor differs from {MOE_DENSE_MLP}'s.")
    instance, checks = [f"if {has_experts}:"], []
    if routed:
        instance.append(f"    _patch_swiglu_module({mlp}.{experts}, LigerExperts)")
        before, after = _getsource_checks(f"{layer_mlp}.{experts}", "LigerExperts")
        checks.append((f"not {layer_has_experts} or {before}", f"not {layer_has_experts} or {after}"))
    shared = ident.shared_mlp_attr if ident.shared_mlp_class and ident.shared_mlp_class == ident.mlp_class else None
    if shared:
        instance += [
            f'    if getattr({mlp}, "{shared}", None) is not None:',
            f"        _patch_swiglu_module({mlp}.{shared}, {MOE_DENSE_MLP})",
        ]
        none = f'not {layer_has_experts} or getattr({layer_mlp}, "{shared}", None) is None'
        before, after = _getsource_checks(f"{layer_mlp}.{shared}", MOE_DENSE_MLP)
        checks.append((f"{none} or {before}", f"{none} or {after}"))
    if len(instance) == 1:
        instance.append("    pass  # the experts stay HF's")
    if ident.mlp_class:
        instance += ["else:", f"    _patch_swiglu_module({mlp}, {MOE_DENSE_MLP})"]
        before, after = _getsource_checks(layer_mlp, MOE_DENSE_MLP)
        checks.append((f"{layer_has_experts} or {before}", f"{layer_has_experts} or {after}"))
    if not checks:
        notes.append(_mlp_left_out(profile, "nothing in this MoE block has a Liger module"))
        return None
    class_statement = "\n".join(classes) or "pass  # every swap is made on instances"
    (first_before, first_after), *rest = checks
    return Mlp("swiglu", "SwiGLU", class_statement, "\n".join(instance), first_before, first_after, tuple(rest))


def plan(profile: Profile) -> Plan:
    validate_model_type(profile.model_type)
    _refuse_unsettled(profile)
    notes: list[str] = []
    rope = _plan_rope(profile, notes)
    norm = _plan_norm(profile, notes)
    mlp = _plan_mlp(profile, notes)
    # Routing, not the kernel, decides the family: a hybrid (GLM-4-MoE's first dense layers) routes tokens like any
    # MoE, and the dense family's fp32 loss rtol 1e-5 failed glm4_moe and exaone_moe on an H200 (TF32 fused MoE).
    routed = profile.value("structure") in ("moe", "hybrid")
    return Plan(profile, rope, norm, mlp, routed, tuple(notes))


# --- rendered pieces ---------------------------------------------------------------------------------------------


def forward_param_names(plan: Plan) -> list[str]:
    """The CausalLM's named parameters; `*args`/`**kwargs` (however the profile spells them) are the forward's own."""
    params = [p for p in plan.profile.identity.forward_params if not p.startswith("*")]
    return [p for p in params if p not in OWN_PARAMS and p not in ("args", "kwargs")]


def _forward_params(plan: Plan) -> list[str]:
    names = forward_param_names(plan)
    if not names:
        raise PipelineError(f"{plan.model_type}: the profile lists no forward parameters of the CausalLM")
    return [f"{name}: {PARAM_ANNOTATIONS[name]}" if name in PARAM_ANNOTATIONS else f"{name}=None" for name in names]


LM_HEAD_HELPER = "lce_maybe_trainable_lm_head"


def lm_head_helper_module(root: Path) -> str:
    """The target module defining the lm_head helper every non-softcapping forward calls (model/llama.py in Liger)."""
    for path in sorted((root / "src/liger_kernel/transformers/model").glob("*.py")):
        if f"def {LM_HEAD_HELPER}(" in path.read_text():
            return f"liger_kernel.transformers.model.{path.stem}"
    return "liger_kernel.transformers.model.llama"


def logits_ops(profile: Profile) -> list[dict]:
    """The settled logits transform (scales and a softcap FLCE reproduces exactly), [] when there is none."""
    check = profile.checks.get("logits_transform")
    if check is None or check.status is Status.NEEDS_REVIEW or not isinstance(check.value, list):
        return []
    return check.value


def own_softcap(profile: Profile) -> str | None:
    """The cap the forward applies itself, whatever the config says (RecurrentGemma's `tanh(logits / cap) * cap`)."""
    return next((op["softcap"] for op in logits_ops(profile) if "softcap" in op), None)


def softcap_expr(profile: Profile) -> str | None:
    """What the forward passes as FLCE's softcap: the forward's own cap or the config's final_logit_softcapping."""
    own = own_softcap(profile)
    if own:
        return own
    return "self.config.final_logit_softcapping" if profile.value("logit_softcapping") else None


def scaled(expr: str, ops: list[dict]) -> str:
    """`expr` with the model's logit scales applied in order (`h * self.logit_scale`, `h / self.config.x`)."""
    for op in ops:
        if "multiply" in op:
            expr = f"{expr} * {op['multiply']}"
        elif "divide" in op:
            expr = f"{expr} / {op['divide']}"
    return expr


def base_output_fields(plan: Plan, cache_field: str) -> list[str]:
    """The base model's output fields HF's CausalLM forward passes on (Mamba returns no attentions)."""
    src, wanted = modeling_source(plan.profile), [cache_field, "hidden_states", "attentions"]
    if src is None:  # a profile of a model this environment lacks: the standard three
        return wanted
    forward = src.method(plan.profile.identity.causal_lm_class, "forward")
    returned = set()
    for node in ast.walk(forward) if forward else ():
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Call):
            returned |= {kw.arg for kw in node.value.keywords}
    if not returned:
        return wanted
    return [
        name for name in wanted if name in returned or (name == cache_field and returned & {"cache", "past_key_values"})
    ]


def lm_head_facts(plan: Plan) -> tuple[bool, str | None]:
    """(lm_head keeps a bias, the dtype HF casts lm_head's input to), read from the CausalLM's source.

    FLCE takes the bias as a keyword; Liger's lm_head helper passes only the weight, so a forward without it never
    trains the bias (Phi's whole-model gate: no gradient for lm_head.bias). A forward without the cast hands FLCE
    an fp32 hidden state beside a bf16 weight (Mamba on an H200: "mat1 and mat2 ... float != BFloat16")."""
    from pipelines.autopatch.understand import lm_head_has_bias
    from pipelines.autopatch.understand import lm_head_input_cast

    ident, src = plan.profile.identity, modeling_source(plan.profile)
    if src is None:  # a profile of a model this environment lacks: Liger's plain call
        return False, None
    head = ident.output_head_attr
    return bool(lm_head_has_bias(src, ident.causal_lm_class, head)), lm_head_input_cast(
        src, ident.causal_lm_class, head
    )


def loss_vocab_size(plan: Plan) -> str:
    """The vocab_size HF's forward hands its loss (understand.loss_vocab_size), for the forward's logits path."""
    from pipelines.autopatch.understand import loss_vocab_size as read

    src = modeling_source(plan.profile)
    return read(src, plan.profile.identity.causal_lm_class) if src else "self.config.vocab_size"


def render_lce_forward(plan: Plan, helper_module: str = "liger_kernel.transformers.model.llama") -> str:
    names = forward_param_names(plan)
    ops = [op for op in logits_ops(plan.profile) if "multiply" in op or "divide" in op]
    pre_heads = [op["pre_head"] for op in logits_ops(plan.profile) if "pre_head" in op]
    cut = next((op["vocab_slice"] for op in logits_ops(plan.profile) if "vocab_slice" in op), None)
    rows = f"[: {cut}]" if cut else ""  # a vocabulary cut: the head's first rows (Inkling's unpadded_vocab_size)
    head = plan.profile.identity.output_head_attr
    factor = next((op["head_scale"] for op in logits_ops(plan.profile) if "head_scale" in op), None)
    weight = f"self.{head}.weight{rows}"
    if factor:  # the head's own forward scales each class's logit (Dory): the same factor on each weight row
        weight = f"{weight} * torch.as_tensor({factor}).reshape(-1, 1){rows}.to(self.{head}.weight.dtype)"
    bias, cast = lm_head_facts(plan)
    if bias and ops:
        raise PipelineError(
            f"{plan.profile.identity.causal_lm_class} scales logits after an lm_head with a bias: "
            "the scale cannot be folded into FLCE's hidden states",
            hint="this model needs a hand-written lce_forward that adds the bias before the scale",
        )
    hidden = "outputs[0]" if plan.profile.value("hidden_state_access") == "outputs[0]" else "outputs.last_hidden_state"
    softcap = softcap_expr(plan.profile)
    return render.render(
        "autopatch/lce_forward.py.j2",
        # the forward carries the load-balancing loss only where HF's does (DeepSeek-V2 is MoE without aux_loss)
        **{**plan.context(), "moe": plan.profile.value("output_class") == "LigerMoeCausalLMOutputWithPast"},
        params=_forward_params(plan),
        model_args=[n for n in names if n not in NOT_FORWARDED],
        hidden_states=hidden,
        softcap=softcap,
        scaled_hidden_states=scaled("kept_hidden_states", ops) if ops else None,
        logits_statements=[f"logits = {scaled('logits', [op])}" for op in ops]
        + ([f"logits = logits[..., : {cut}]"] if cut else []),
        output_class=plan.profile.value("output_class"),
        output_fields=base_output_fields(plan, "cache" if "cache" in names else "past_key_values"),
        uses_cache_type=bool({"cache", "past_key_values"} & set(names)),
        lm_head_helper_module=helper_module,
        output_head=plan.profile.identity.output_head_attr,
        direct_loss=bool(softcap) or bool(cut or factor) or plan.profile.identity.output_head_attr != "lm_head",
        head_weight=weight,
        head_bias=f"self.{head}.bias{rows}",
        vocab_cut=cut,
        head_scaled=bool(factor),
        keeps_logits="logits_to_keep" in names,
        lm_head_bias=bias,
        lm_head_input_cast=cast,
        pre_heads=pre_heads,
        unshifted_labels=any(op.get("unshifted_labels") for op in logits_ops(plan.profile)),
        loss_vocab_size=loss_vocab_size(plan),
    )


def base_model_lookup(attr_path: str, instance: str) -> str:
    """The expression for the module holding the decoder layers, from a CausalLM or from that module itself (as
    Liger's apply functions take either): `getattr(model, "model", model)`, one getattr per level of
    "model.decoder" (OPT)."""
    expression = instance
    for attr in attr_path.split("."):
        expression = f'getattr({expression}, "{attr}", {expression})'
    return expression


def config_module_of(profile: Profile) -> str:
    if profile.identity.config_module:  # an alias: its config beside no modeling file of its own
        return profile.identity.config_module
    package, name = profile.identity.modeling_module.rsplit(".", 1)
    return f"{package}.{name.replace('modeling_', 'configuration_', 1)}"


def config_class_of(profile: Profile) -> type:
    module_name = config_module_of(profile)
    if importlib.util.find_spec(module_name) is None:
        raise PipelineError(f"{module_name} is not importable in this environment")
    return getattr(importlib.import_module(module_name), profile.identity.config_class)


def config_class(plan: Plan) -> type:
    return config_class_of(plan.profile)


MINI_TEST_CONFIG = (
    ("d_model", "32"),  # the hidden size under its own name (DBRX: probes.TINY_CONFIG says why)
    ("hidden_size", "32"),
    ("intermediate_size", "64"),
    ("moe_intermediate_size", "64"),
    ("num_hidden_layers", "2"),
    ("num_attention_heads", "4"),
    ("num_key_value_heads", "2"),
    ("head_dim", "8"),
    ("num_local_experts", "4"),
    ("num_experts", "4"),
    ("num_experts_per_tok", "2"),
    ("n_shared_experts", "1"),  # Dots1's default None builds no model
    ("n_group", "1"),  # group-limited routing within the 4 experts
    ("topk_group", "1"),
    ("vocab_size", "1024"),
    ("pad_token_id", "0"),  # some defaults (GLM-4: 151329) point outside the tiny vocabulary
    ("num_heads", "8"),  # Mamba-2's SSM heads: hidden_size * expand == num_heads * head_dim
    ("decoder_attention_heads", "4"),  # Whisper / TrOCR decoders
)
ROUTED_EXPERT_FIELDS = ("moe_num_experts", "n_routed_experts", "num_experts", "num_local_experts")
ROUTER_TOP_K_FIELDS = ("moe_k", "moe_topk", "num_experts_per_tok", "num_experts_per_token")
MINI_ROUTER_PICKS = "2"  # the GPU entry's top-k, and so its expert count (MINI_CONVERGENCE_CONFIG says why)
MINI_CONVERGENCE_CONFIG = (
    ("attention_dropout", "0.0"),
    ("bos_token_id", "1"),
    ("eos_token_id", "2"),
    ("pad_token_id", "2"),
    ("d_model", "1024"),  # the hidden size under its own name (DBRX: probes.TINY_CONFIG says why)
    ("hidden_size", "1024"),
    ("initializer_range", "0.02"),
    ("intermediate_size", "2048"),
    ("moe_intermediate_size", "1024"),
    ("max_position_embeddings", "8192"),
    ("num_attention_heads", "8"),
    ("num_hidden_layers", "4"),
    ("num_key_value_heads", "2"),
    ("head_dim", "128"),
    ("num_heads", "16"),  # Mamba-2's SSM heads: hidden_size * expand == num_heads * head_dim
    ("decoder_attention_heads", "8"),  # Whisper / TrOCR decoders
    # A router with as many experts as it picks per token (2 of 2): in fp32, Liger's fused MoE runs its dots in TF32,
    # and with a sparse router that rounding flips a token's expert choice between the HF and Liger runs, after which
    # its logprobs differ by up to 1.3 (H200: 5 of 12 MoE entries failed at 2 of 8 experts, 12 of 12 passed at 2 of
    # 2; Liger's own mini_qwen3_moe fails at the mini widths). verify's CPU gate keeps a sparse router (exact there).
    *((name, MINI_ROUTER_PICKS) for name in ROUTED_EXPERT_FIELDS + ROUTER_TOP_K_FIELDS),
    ("num_expert_group", "1"),  # group-limited routing (Kimi Linear, Bailing) within the 2 mini experts
    ("n_shared_experts", "1"),  # Dots1's default None builds no model; its checkpoints have shared experts
    ("rotary_dim", "64"),  # CodeGen / GPT-J: a partial rotary width within the mini head_dim
    ("n_group", "1"),  # group-limited routing must fit in the mini experts (a default of 8 groups picks top 2 of 1)
    ("topk_group", "1"),
    ("kv_lora_rank", "256"),  # MLA attentions: every width scaled to the mini hidden size, as Liger's deepseek_v3
    ("q_lora_rank", "512"),
    ("qk_nope_head_dim", "64"),
    ("qk_rope_head_dim", "64"),
    ("v_head_dim", "128"),
    ("rms_norm_eps", "1e-5"),
    ("tie_word_embeddings", "False"),
    ("use_cache", "True"),
    ("vocab_size", str(CONVERGENCE_VOCAB_SIZE)),
)
MINI_EXPERT_WIDTH = dict(MINI_CONVERGENCE_CONFIG)["moe_intermediate_size"]  # expert_width_fields says why


def mini_config(plan: Plan, candidates: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    """The candidate fields this model's config class actually has (v5 configs accept unknown keys silently)."""
    from pipelines.autopatch import probes

    cls = config_class(plan)
    defaults, chosen = cls(), {}
    for name, value in candidates:
        if has_field(defaults, name) and not probes._aliased(cls, name, chosen):  # GPT-Neo: num_heads is heads
            chosen[name] = value
    return list(chosen.items())


# Config fields that make a training step random (dropout, router jitter, input noise): the convergence test compares
# two runs step by step, so they are turned off where the config class defaults them on (Seed-OSS: residual_dropout
# 0.1 made the two runs diverge).
STOCHASTIC_FIELD = re.compile(r"(dropout|jitter|noise)")


def stochastic_fields_off(defaults, fixed: set[str]) -> list[tuple[str, str]]:
    values = defaults.to_dict() if hasattr(defaults, "to_dict") else {}
    return [
        (name, "0.0")
        for name, value in sorted(values.items())
        if STOCHASTIC_FIELD.search(name) and name not in fixed and isinstance(value, float) and value > 0
    ]


def attention_implementation(plan: Plan) -> str:
    """SDPA where the model class supports it (VaultGemma refuses it: softcapping), else eager."""
    modeling = importlib.import_module(plan.profile.identity.modeling_module)
    model_class = getattr(modeling, plan.profile.identity.causal_lm_class)
    return "sdpa" if getattr(model_class, "_supports_sdpa", False) else "eager"


def convergence_config(plan: Plan, reference: dict[str, int] | None = None) -> list[tuple[str, str]]:
    """The generated convergence entry's config: the mini sizes this config class has, randomness off, sorted; then
    checked by running the unpatched HF model once at it (widths shrunk as verify's CPU gate shrinks them). A routed
    model takes the widths of `reference` (the int fields of the entry whose tolerances it copies) where the model
    runs at them."""
    from pipelines.autopatch import probes

    cls = config_class(plan)
    unbuildable = set(probes._UNBUILDABLE.get(cls, ()))  # what the probes' tiny model could not take
    fields = [
        (n, v)
        for n, v in mini_config(plan, MINI_CONVERGENCE_CONFIG)
        if n not in unbuildable and probes._settable(cls, n)  # Falcon's head_dim is a read-only property
    ]
    fields += stochastic_fields_off(cls(), {name for name, _ in fields})
    fields = expert_width_fields(plan, fields)
    sized = reference_sized(plan, fields, reference or {})
    if sized != fields and (runnable := _runnable(plan, with_repairs(cls, sized))) is not None:
        return sorted(runnable)
    return sorted(runnable_convergence_fields(plan, with_repairs(cls, fields)))


# The widths the fused experts' TF32 dots reduce over (hidden size, expert width) and the layer and head counts the
# error runs through: Liger set a routed entry's tolerances at its own, so a routed model's entry copying them takes
# them too (H200: granitemoe and lara_mini at hidden 1024 / experts 1024 were 5.3e-3 to 7.5e-3 off in fp32 top-k
# logprobs against the 5e-3 that mini_qwen3_moe passes at 896 / 768). Its router stays 2 of 2 (MINI_ROUTER_PICKS).
REFERENCE_WIDTH_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
HIDDEN_SIZE_NAMES = ("hidden_size", "d_model")
EXPERT_WIDTH_NAMES = ("moe_intermediate_size", "intermediate_size")  # the first a config has is its experts' width


def reference_sized(plan: Plan, fields: list[tuple[str, str]], reference: dict[str, int]) -> list[tuple[str, str]]:
    """`fields` with the reference entry's widths, each under the name this config gives it; dense models as they are
    (their tolerances hold at the mini widths on an H200)."""
    if not plan.moe:
        return fields
    names, wanted = dict(fields), {n: reference[n] for n in REFERENCE_WIDTH_FIELDS if n in reference}
    hidden = wanted.pop("hidden_size", None)
    expert = next((reference[n] for n in EXPERT_WIDTH_NAMES if n in reference), None)
    ours = {
        **{n: v for n, v in wanted.items() if n in names},
        **{n: hidden for n in HIDDEN_SIZE_NAMES if n in names and hidden},
        **{n: expert for n in _first_present(EXPERT_WIDTH_NAMES, names) if expert},
    }
    for name, value in ours.items():
        fields = _with(fields, name, str(value))
    return fields


def _first_present(candidates: tuple[str, ...], names: dict) -> list[str]:
    return [n for n in candidates if n in names][:1]


def with_repairs(cls, fields: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """`fields` and the checkpoint fields the probes' tiny model needed (DBRX's attn_config.rope_theta, LFM2-MoE's
    layer_types for this config's layer count), written as literals."""
    from pipelines.autopatch import probes

    values = {n: ast.literal_eval(v) for n, v in fields}
    return fields + [(n, repr(v)) for n, v in probes.repairs(cls, values).items() if n not in values]


def expert_width_fields(plan: Plan, fields: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """A routed model whose experts read `intermediate_size` (no `moe_intermediate_size`: PhiMoE, MiniMax, Mixtral)
    gets the mini expert width there: its fp32 entry's logprobs carry the TF32 error of Liger's fused MoE, which grows
    with the width (H200: PhiMoE and MiniMax at 2048 were 5.4e-3 off against the 5e-3 of qwen3_moe's entry, while
    every model with 1024-wide experts passed)."""
    names = dict(fields)
    if not plan.moe or "moe_intermediate_size" in names or "intermediate_size" not in names:
        return fields
    return _with(fields, "intermediate_size", MINI_EXPERT_WIDTH)


# Tried in order when the unpatched model does not run at the mini config: no KV cache (a hybrid whose four mini
# layers are all linear attention or Mamba has no attention layer for the cache to measure), then no grouped KV heads
# as well (MLA attentions assume none), each also with one non-size field at its default (an MLA rotary width that
# the mini head_dim contradicts, a layer pattern), then with one width tied to another as the defaults tie them.
CONVERGENCE_SIZE_FIELDS = ("d_model", "hidden_size", "intermediate_size", "moe_intermediate_size", "vocab_size")


CONFIG_SEARCH_BUDGET_S = 60.0  # a model slow to build at the mini size (Gemma 3n's per-layer tables) stops early


def runnable_convergence_fields(plan: Plan, fields: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return _runnable(plan, fields) or fields  # nothing helps: the whole-model gate reports the model's own error


def _runnable(plan: Plan, fields: list[tuple[str, str]]) -> list[tuple[str, str]] | None:
    """`fields`, or the first variant of it tried above that the unpatched model trains at; None if none does."""
    if _reference_error(plan, fields) is None:
        return fields
    deadline = time.monotonic() + CONFIG_SEARCH_BUDGET_S
    uncached = _with(fields, "use_cache", "False")
    heads = dict(fields).get("num_attention_heads")
    bases = [uncached] + ([_with(uncached, "num_key_value_heads", heads)] if heads else [])
    for base in bases:
        candidates = [base] + [
            [(n, v) for n, v in base if n != name]
            for name, _ in base
            if name not in CONVERGENCE_SIZE_FIELDS and name not in ("use_cache", "num_key_value_heads")
        ]
        for candidate in candidates + _tied_variants(plan, base):
            if time.monotonic() > deadline:
                return None
            if _reference_error(plan, candidate) is None:
                return candidate
    return None


def _tied_variants(plan: Plan, fields: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """`fields` with one width set to another's value where the config class defaults both to one number: the model
    may read one as the other (LongCat-Flash's rotary width is head_dim, which defaults to qk_rope_head_dim's 64)."""
    from pipelines.autopatch.verify import WIDTH_FIELDS

    defaults = config_class(plan)()
    widths = [(n, v) for n, v in fields if n in WIDTH_FIELDS and has_field(defaults, n)]
    default = {n: getattr(defaults, n) for n, _ in widths}
    return [
        _with(fields, name, other_value)
        for name, value in widths
        for other, other_value in widths
        if other != name and other_value != value and type(default[name]) is int and default[name] == default[other]
    ]


def _with(fields: list[tuple[str, str]], name: str, value: str) -> list[tuple[str, str]]:
    return [(n, v) for n, v in fields if n != name] + [(name, value)]


def _reference_error(plan: Plan, fields: list[tuple[str, str]]) -> Exception | None:
    """One training forward of the unpatched HF model at `fields` (widths / 8; its router as Liger's GPU test has it
    and, when that runs, as verify's CPU gate has it: both must build)."""
    from pipelines.autopatch.verify import cpu_config

    written = {n: ast.literal_eval(v) for n, v in fields}
    as_liger_runs, as_the_gate_runs = cpu_config(written, sparse_router=False), cpu_config(written)
    error = _training_error(plan, as_liger_runs)
    if error is not None or as_the_gate_runs == as_liger_runs:
        return error
    return _training_error(plan, as_the_gate_runs)


def _training_error(plan: Plan, values: dict) -> Exception | None:
    import torch

    from pipelines.autopatch import model_check

    modeling = importlib.import_module(plan.profile.identity.modeling_module)
    try:
        config = config_class(plan)(**values, attn_implementation=attention_implementation(plan))
        torch.manual_seed(0)
        model = getattr(modeling, plan.profile.identity.causal_lm_class)(config)
        (batch,) = model_check.batches(int(values.get("vocab_size", 1024)), 1, "cpu")  # the gate's own batch
        model(**batch).loss.backward()
    except Exception as exc:  # the model's own code refused this config
        return exc
    return None


def has_field(config, name: str) -> bool:
    try:
        return hasattr(config, name)
    except Exception:  # per-layer fields of heterogeneous configs (Gemma 4) refuse a global read: not set here
        return False


def buildable_test_config(plan: Plan) -> list[tuple[str, str]]:
    """MINI_TEST_CONFIG's fields this config class has, can be given (Falcon's head_dim is a read-only property)
    and accepts together (strict validators: GPT-Neo's layer pattern): one refused field keeps its default."""
    from pipelines.autopatch import probes

    cls = config_class(plan)
    fields = [(n, v) for n, v in mini_config(plan, MINI_TEST_CONFIG) if probes._settable(cls, n)]
    unbuildable = set(probes._UNBUILDABLE.get(cls, ()))  # what the probes' tiny model could not be built with
    fields = [(n, v) for n, v in fields if n not in unbuildable]

    def constructs(chosen) -> bool:
        return probes._constructs(cls, {n: ast.literal_eval(v) for n, v in with_repairs(cls, chosen)}) is None

    if constructs(fields):
        return with_repairs(cls, fields)
    for name, _ in fields:
        fewer = [(n, v) for n, v in fields if n != name]
        if constructs(fewer):
            return with_repairs(cls, fewer)
    return with_repairs(cls, fields)


def render_instance_test(plan: Plan) -> str:
    model_checks, layer_checks = [], []
    if plan.norm:
        liger = plan.norm.liger_class
        if plan.norm.final:
            model_checks.append(_check(*_getsource_checks(f"base_model.{plan.norm.final}", liger)))
        for target in plan.norm.targets("layer"):
            before, after = _getsource_checks(target["expr"], liger)
            if target["optional"]:
                # absent, or a module without a weight in its place (ModernBERT-decoder's first layer: nn.Identity)
                absent = f'getattr(getattr({target["owner"]}, "{target["attr"]}", None), "weight", None) is None or '
                before, after = absent + before, absent + after
            layer_checks.append(_check(before, after))
    if plan.mlp:
        mlp_checks = [(plan.mlp.before_check, plan.mlp.after_check), *plan.mlp.extra_checks]
        layer_checks[:0] = [_check(before, after) for before, after in mlp_checks]
    return render.render(
        "autopatch/instance_patch_test.py.j2",
        **plan.context(),
        test_config=buildable_test_config(plan),
        auto_mapped=auto_mapped(plan.profile.identity.config_class),
        model_checks=model_checks,
        layer_checks=layer_checks,
        extra_imports=[plan.mlp.test_import] if plan.mlp and plan.mlp.test_import else [],
    )


def auto_mapped(config_class: str) -> bool:
    """Whether AutoModelForCausalLM builds from this config class (Emu3TextConfig: in no causal LM mapping)."""
    maps = mappings()
    return any(maps.configs.get(model_type) == config_class for model_type in maps.causal)


def _check(before: str, after: str) -> dict:
    return {"before": before, "after": after}


def readme_row(plan: Plan) -> str:
    api = f"`liger_kernel.transformers.apply_liger_kernel_to_{plan.model_type}`"
    return f"| {plan.profile.identity.display_name} | {api} | {plan.operations} |"


# --- edits of the target's existing files ------------------------------------------------------------------------


def _apply_fn(plan: Plan) -> str:
    return f"apply_liger_kernel_to_{plan.model_type}"


# Where each name the generated apply function uses comes from (a removal or refactor may have dropped it).
RMS_NORM_MODULE = "liger_kernel.transformers.rms_norm"
LIGER_IMPORTS = {
    "LigerRMSNorm": RMS_NORM_MODULE,
    "LigerLayerNorm": "liger_kernel.transformers.layer_norm",
    "LigerSwiGLUMLP": "liger_kernel.transformers.swiglu",
    "LigerPhi3SwiGLUMLP": "liger_kernel.transformers.swiglu",
    "LigerExperts": "liger_kernel.transformers.swiglu",
    "LigerGEGLUMLP": "liger_kernel.transformers.geglu",
    "LigerReLUSquared": "liger_kernel.transformers.relu_squared",
    "liger_rotary_pos_emb": "liger_kernel.transformers.rope",
    "liger_cross_entropy": "liger_kernel.transformers.functional",
}


def _module_level_names(source: str) -> set[str]:
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def ensure_liger_imports(source: str, function: str, added: dict[str, str] | None = None) -> str:
    """Import every Liger name `function` uses that monkey_patch.py does not bind at module level (`added`: names
    this changeset defines, and their modules)."""
    known = {**LIGER_IMPORTS, **(added or {})}
    used = {n.id for n in ast.walk(ast.parse(function)) if isinstance(n, ast.Name)}
    for name in sorted((used & known.keys()) - _module_level_names(source)):
        line, key = f"from {known[name]} import {name}", f"{known[name]}.{name}"
        source = edits.insert_top_level(
            source, lambda n: edits.imported_name(n, "liger_kernel.transformers."), key, line
        )
    return source


def edit_rms_norm(source: str, plan: Plan) -> str:
    subclass = plan.norm.subclass
    block = render.render("autopatch/rms_norm_subclass.py.j2", **subclass)
    return edits.insert_top_level(source, lambda n: edits.defined_name(n, "LigerRMSNormFor"), subclass["name"], block)


def edit_monkey_patch(source: str, plan: Plan) -> str:
    x = plan.model_type
    line = f"from liger_kernel.transformers.model.{x} import lce_forward as {x}_lce_forward"
    key = f"liger_kernel.transformers.model.{x}.lce_forward"
    source = edits.insert_top_level(
        source, lambda n: edits.imported_name(n, "liger_kernel.transformers.model."), key, line
    )
    function = render.render("autopatch/monkey_patch_fn.py.j2", **plan.context())
    subclass = plan.norm.subclass if plan.norm else None
    source = ensure_liger_imports(source, function, {subclass["name"]: RMS_NORM_MODULE} if subclass else {})
    source = edits.insert_top_level(
        source, lambda n: edits.defined_name(n, "apply_liger_kernel_to_"), _apply_fn(plan), function
    )
    for key in plan.profile.registry_keys:  # every config.model_type this class reports (dots3_note, _text)
        registry = supported.registry_dict(source)
        source = edits.insert_element(source, registry.keys, edits.string_value, key, f'"{key}": {_apply_fn(plan)}')
    return source


def _apply_fn_string(node: ast.expr) -> str | None:
    value = edits.string_value(node)
    return value if value and value.startswith("apply_liger_kernel_to_") else None


def edit_root_exports(source: str, plan: Plan) -> str:
    name = _apply_fn(plan)
    block = edits.find_if_type_checking(ast.parse(source))
    line = f"from liger_kernel.transformers.monkey_patch import {name}  # noqa: F401"
    source = edits.insert_statement(source, block.body, _monkey_patch_import, name, line)
    symbols = edits.find_assignment(ast.parse(source), "monkey_patch_symbols").value
    source = edits.insert_element(source, symbols.elts, _apply_fn_string, name, f'"{name}"')
    exports = edits.find_extend_list(ast.parse(source), "__all__")
    return edits.insert_element(source, exports.elts, _apply_fn_string, name, f'"{name}"')


def _monkey_patch_import(node: ast.stmt) -> str | None:
    if isinstance(node, ast.ImportFrom) and node.module == "liger_kernel.transformers.monkey_patch":
        name = node.names[0].name
        return name if name.startswith("apply_liger_kernel_to_") else None
    return None


def edit_instance_test(source: str, plan: Plan) -> str:
    x = plan.model_type
    available = render.render("autopatch/is_available.py.j2", **plan.context())
    source = edits.ensure_top_level(source, _available_checker, f"is_{x}_available", available)
    test = render_instance_test(plan)
    prefix = "test_apply_liger_kernel_to_instance_for_"
    return edits.insert_top_level(source, lambda n: edits.defined_name(n, prefix), f"{prefix}{x}", test)


def _available_checker(node: ast.stmt) -> str | None:
    name = edits.defined_name(node, "is_")
    return name if name and name.endswith("_available") else None


def edit_test_utils(source: str, plan: Plan) -> str:
    revert = render.render("autopatch/revert_fn.py.j2", **plan.context())
    key = f"revert_liger_kernel_to_{plan.model_type}"
    return edits.insert_top_level(source, lambda n: edits.defined_name(n, "revert_liger_kernel_to_"), key, revert)


def edit_convergence(source: str, plan: Plan, dtype: str, multimodal: str | None = None) -> str:
    """The generated entry in one convergence file; `multimodal` is the same dtype's multimodal file, read for the
    entries of parents the file itself has none for (reference_tolerances)."""
    x, ctx = plan.model_type, plan.context()
    apply_line = f"from liger_kernel.transformers import {_apply_fn(plan)}"
    source = edits.ensure_top_level(source, _root_apply_import, _apply_fn(plan), apply_line)
    revert = f"revert_liger_kernel_to_{x}"
    source = edits.ensure_top_level(source, _revert_import, revert, f"from test.utils import {revert}")
    guard = render.render("autopatch/convergence_guard.py.j2", **ctx)
    source = edits.insert_top_level(source, lambda n: edits.assigned_flag(n, "_AVAILABLE"), plan.available_flag, guard)
    setup = render.render(
        "autopatch/convergence_setup.py.j2",
        **ctx,
        mini_config=convergence_config(plan, reference_widths(source, plan)),
        attn_implementation=attention_implementation(plan),
    )
    source = edits.insert_top_level(source, edits.guarded_setup, f"mini_{x}", setup)
    tree = ast.parse(source)
    cases = edits.find_parametrize_list(edits.find_function(tree, "test_mini_model"))
    setups = edits.mini_model_setups(tree)
    others = multimodal_cases(multimodal) if multimodal else None
    lr, *tolerances = reference_tolerances(source, cases.elts, setups, plan, dtype, others)
    param = render.render("autopatch/convergence_param.py.j2", **ctx, lr=lr, dtype=dtype, tolerances=tolerances)
    return edits.insert_element(source, cases.elts, edits.case_name, f"mini_{x}", param.strip().rstrip(","))


# Liger's multimodal convergence files: a model tested only there (gemma4 in fp32: `mini_gemma4`, lr 1e-5) still
# has an entry its maintainers tuned to the architecture.
MULTIMODAL_FILE = "test_mini_models_multimodal.py"
MULTIMODAL_TEST = "test_mini_model_multimodal"


@dataclass(frozen=True)
class OtherCases:
    """Another convergence file's enabled cases and setups, read for parents' entries only."""

    source: str
    cases: dict[str, ast.expr]
    setups: dict[str, edits.MiniSetup]


def multimodal_cases(source: str) -> OtherCases | None:
    """The enabled cases of a multimodal file (its test is `test_mini_model_multimodal`); None where it has none."""
    tree = ast.parse(source)
    try:
        cases = edits.find_parametrize_list(edits.find_function(tree, MULTIMODAL_TEST)).elts
    except edits.EditError:
        return None
    return OtherCases(source, _enabled_cases(cases), edits.mini_model_setups(tree))


def reference_tolerances(
    source: str,
    cases: list[ast.expr],
    setups: dict[str, edits.MiniSetup],
    plan: Plan,
    dtype: str,
    others: OtherCases | None = None,
) -> list[str]:
    """lr and the six tolerances of the generated entry, as the target writes them. The family's entry
    (REFERENCE_CASES, else TOLERANCES) is the floor; where the file has an enabled entry for a model that `plan`'s
    modular file subclasses (a routed one for a routed model), each tolerance is the looser of the two: Liger's
    maintainers tuned that entry to the architecture (mini_granite3's loss rtol 1e-4 for granite's multipliers, where
    mini_mistral's 1e-5 fails granite_swa on an H200). A parent with no entry in the file counts its entry in
    `others` (the same dtype's multimodal file). The lr is the smallest of the parents' entries: the lr is what
    amplifies fp32 rounding over the training steps, and for every Gemma 3 / 4 entry Liger's maintainers chose 1e-5
    (gemma4_unified_text at llama's 1e-4 diverged in fp32 whatever the patch: the unpatched model with its lm_head
    rounded differently moved its top-k log-probs by 1.7e-2, past the 5e-3 tolerance; at 1e-5, 1.5e-4). A
    commented-out entry is never copied."""
    # only the chosen cases' values are read out: get_source_segment splits the whole file on every call (152 cases
    # of 7 values each in Liger's fp32 file took 15 s a file)
    full = _enabled_cases(cases)
    fallback = full.get(REFERENCE_CASES[plan.tolerance_family])
    floor = _segments(source, fallback) if fallback else list(TOLERANCES[(plan.tolerance_family, dtype)])
    entries = [_segments(source, full[name]) for name in _parent_cases(setups, list(full), plan)]
    if others is not None:
        found = {_patch_parent(setups[name], plan) for name in _parent_cases(setups, list(full), plan)}
        for name in _parent_cases(others.setups, list(others.cases), plan):
            if _patch_parent(others.setups[name], plan) not in found:
                entries.append(_segments(others.source, others.cases[name]))
    if not entries:
        return floor
    loosest = floor[1:]
    for _, *tolerances in entries:  # a model built on several (gemma4_unified: gemma2's layer, gemma4's causal LM)
        loosest = [_looser(theirs, ours) for theirs, ours in zip(tolerances, loosest, strict=True)]
    return [_smallest([lr for lr, *_ in entries]), *loosest]


def _patch_parent(setup: edits.MiniSetup, plan: Plan) -> str | None:
    """The parent (of `plan`'s derived_from) whose apply function the setup calls."""
    return next(
        (p for p in plan.profile.identity.derived_from if setup.patch_fn in _parent_patch_fns(p)),
        None,
    )


def _smallest(values: list[str]) -> str:
    """The smallest of the lrs as written; the first where one is not a plain number literal."""
    try:
        return min(values, key=lambda v: float(ast.literal_eval(v)))
    except (ValueError, TypeError, SyntaxError):
        return values[0]


def _enabled_cases(cases: list[ast.expr]) -> dict[str, ast.expr]:
    return {name: case for case in cases if (name := edits.case_name(case)) and len(_values(case)) >= 10}


def reference_widths(source: str, plan: Plan) -> dict[str, int]:
    """The int fields of the setup whose entry leads reference_tolerances (the parent's, else the family's): the
    widths those tolerances were set at."""
    tree = ast.parse(source)
    names = list(_enabled_cases(edits.find_parametrize_list(edits.find_function(tree, "test_mini_model")).elts))
    setups = edits.mini_model_setups(tree)
    fallback = REFERENCE_CASES[plan.tolerance_family]
    name = _parent_case(setups, names, plan) or (fallback if fallback in names else None)
    return dict(setups[name].int_fields) if name in setups else {}


def _looser(theirs: str, ours: str) -> str:
    """The larger of two tolerances as written; ours where theirs is not a plain number literal."""
    try:
        return theirs if float(ast.literal_eval(theirs)) > float(ast.literal_eval(ours)) else ours
    except (ValueError, TypeError, SyntaxError):
        return ours


def _parent_case(setups: dict[str, edits.MiniSetup], names: list[str], plan: Plan) -> str | None:
    """The first parent's entry: its lr and widths are the generated entry's."""
    return next(iter(_parent_cases(setups, names, plan)), None)


def _parent_cases(setups: dict[str, edits.MiniSetup], names: list[str], plan: Plan) -> list[str]:
    """Every parent's entry, in `derived_from` order: one per parent, routed only for a routed model. A parent's
    text-only apply function counts as its own (gemma4's causal LM is tested as `mini_gemma4_text`, patched by
    apply_liger_kernel_to_gemma4_text)."""
    found = []
    for parent in plan.profile.identity.derived_from:
        patch_fns = _parent_patch_fns(parent)
        for name in names:
            setup = setups.get(name)
            if setup is None or setup.patch_fn not in patch_fns:
                continue
            if bool(setup.config_fields & set(ROUTED_EXPERT_FIELDS)) == plan.moe:
                found.append(name)
                break
    return found


def _parent_patch_fns(parent: str) -> tuple[str, str]:
    return (f"apply_liger_kernel_to_{parent}", f"apply_liger_kernel_to_{parent}_text")


def _values(case: ast.expr) -> list[ast.expr]:
    return case.args if isinstance(case, ast.Call) else getattr(case, "elts", [])


def _segments(source: str, case: ast.expr) -> list[str]:
    """A case's lr and six tolerances (`"mini_x", 32, lr, dtype, loss atol, loss rtol, ...`), as written."""
    values = _values(case)
    return [ast.get_source_segment(source, value) for value in (values[2], *values[4:10])]


def _root_apply_import(node: ast.stmt) -> str | None:
    if isinstance(node, ast.ImportFrom) and node.module == "liger_kernel.transformers":
        name = node.names[0].name
        return name if name.startswith("apply_liger_kernel_to_") else None
    return None


def _revert_import(node: ast.stmt) -> str | None:
    if isinstance(node, ast.ImportFrom) and node.module == "test.utils":
        name = node.names[0].name
        return name if name.startswith("revert_liger_kernel_to_") else None
    return None


def _readme_key(line: str) -> str | None:
    found = re.search(r"apply_liger_kernel_to_(\w+)", line)
    return found.group(1) if found else None


def edit_readme(source: str, plan: Plan) -> str:
    return edits.insert_markdown_row(source, "### Patching", _readme_key, plan.model_type, readme_row(plan))


# --- the changeset -----------------------------------------------------------------------------------------------


def model_file(model_type: str) -> Path:
    return Path("src/liger_kernel/transformers/model") / f"{validate_model_type(model_type)}.py"


def build_changeset(checkout: Checkout, profile: Profile) -> Changeset:
    """All edits made in memory; nothing is written. Raises PipelineError if an anchor is missing."""
    if profile.identity.alias_of:  # another model's class: one registry entry to that model's apply function
        from pipelines.autopatch import alias  # alias builds on this module

        return alias.build_changeset(checkout, profile)
    the_plan = plan(profile)
    new_file = model_file(profile.model_type)
    if checkout.path(new_file).exists():
        raise PipelineError(
            f"{new_file} exists already in {checkout.root}", hint="autopatch creates support for unsupported models"
        )
    edits_by_file = [
        (MONKEY_PATCH, edit_monkey_patch),
        (ROOT_EXPORTS, edit_root_exports),
        (INSTANCE_TEST, edit_instance_test),
        (TEST_UTILS, edit_test_utils),
        (README, edit_readme),
    ]
    if the_plan.norm and the_plan.norm.subclass:
        edits_by_file.append((RMS_NORM, edit_rms_norm))
    forward = render_lce_forward(the_plan, lm_head_helper_module(checkout.root))
    changes = [FileChange(str(new_file), forward, created=True)]
    try:
        for path, edit in edits_by_file:
            changes.append(edit_file(checkout.root, path, lambda text, edit=edit: edit(text, the_plan)))
        for path in CONVERGENCE_FILES:
            dtype = "bfloat16" if path.parts[2] == "bf16" else "float32"
            sibling = checkout.root / path.with_name(MULTIMODAL_FILE)
            multimodal = sibling.read_text() if sibling.is_file() else None
            changes.append(
                edit_file(
                    checkout.root, path, lambda text, d=dtype, m=multimodal: edit_convergence(text, the_plan, d, m)
                )
            )
    except (edits.EditError, FileNotFoundError) as exc:
        raise PipelineError(
            f"cannot place the {profile.model_type} patch in {checkout.root}: {exc}",
            hint="the target's files differ from what autopatch expects (is this a liger-kernel 0.8.x checkout?)",
        ) from exc
    for change in changes:
        if change.path.endswith(".py"):
            _must_parse(change)
    return Changeset(tuple(changes), (*the_plan.notes, the_plan.tolerance_note))


def _must_parse(change: FileChange) -> None:
    try:
        ast.parse(change.text)
    except SyntaxError as exc:
        raise RuntimeError(f"generated {change.path} does not parse: {exc}") from exc


def act(checkout: Checkout, profile: Profile) -> Changeset:
    changeset = build_changeset(checkout, profile)
    changeset.write(checkout.root)
    format_with_target_style(checkout, changeset.paths)
    return changeset
