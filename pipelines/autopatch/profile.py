"""The model profile: what `understand` proves about a HF model and what `act` generates from.

Twelve decisions (LinkedIn's liger-autopatch decision-matrix.md), each with the method that settled it and
its evidence. `to_json()` is a stable interface (the App and our evaluation read it): change it additively.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import Any

from pipelines.outcome import PipelineError


class Method(str, enum.Enum):
    AST = "ast"  # read from the modeling/config source
    PROBE = "probe"  # HF module run beside candidate Liger semantics on random inputs
    OVERRIDE = "override"  # a reviewer's `--set field=value`


class Status(str, enum.Enum):
    SETTLED = "settled"
    NEEDS_REVIEW = "needs review"


@dataclass(frozen=True)
class Evidence:
    file: str  # path relative to site-packages, e.g. transformers/models/llama/modeling_llama.py
    lines: tuple[int, int]  # first and last line, 1-based, inclusive
    snippet: str
    probe: dict[str, Any] | None = None  # for Method.PROBE: candidates tried and their max abs residuals

    def to_json(self) -> dict:
        out = {"file": self.file, "lines": list(self.lines), "snippet": self.snippet}
        if self.probe is not None:
            out["probe"] = self.probe
        return out

    @classmethod
    def from_json(cls, data: dict) -> Evidence:
        first, last = data["lines"]
        return cls(data["file"], (int(first), int(last)), data["snippet"], data.get("probe"))


@dataclass(frozen=True)
class Decision:
    value: Any
    method: Method
    evidence: tuple[Evidence, ...] = ()
    status: Status = Status.SETTLED
    reason: str = ""  # why it needs review, or what an override replaced

    def to_json(self) -> dict:
        out = {
            "value": self.value,
            "method": self.method.value,
            "evidence": [e.to_json() for e in self.evidence],
            "status": self.status.value,
        }
        if self.reason:
            out["reason"] = self.reason
        return out

    @classmethod
    def from_json(cls, data: dict) -> Decision:
        evidence = tuple(Evidence.from_json(e) for e in data.get("evidence") or ())
        return cls(data["value"], Method(data["method"]), evidence, Status(data["status"]), data.get("reason", ""))


# The 12 decisions, in the order of decision-matrix.md, with the values each may take: exactly the values
# understand can settle them to (the probes' candidates), so an override cannot name a kind nothing implements.
NORM_TYPES = ("rms", "layer", "both", "none")
CASTING_MODES = ("llama", "gemma", "none")
MLP_KINDS = ("swiglu", "geglu", "geglu (exact gelu)", "phi3_swiglu", "phi3_geglu", "relu_squared", "none")
STRUCTURES = ("dense", "moe", "hybrid")
ROPE_KINDS = ("standard", "gpt_oss", "llama4", "mrope", "none")
HIDDEN_STATE_ACCESS = ("outputs[0]", "outputs.last_hidden_state")
OUTPUT_CLASSES = ("LigerCausalLMOutputWithPast", "LigerMoeCausalLMOutputWithPast")

DECISION_KEYS = (
    "norm_type",
    "rms_casting_mode",
    "rms_offset",
    "rms_in_place",
    "mlp_kind",
    "structure",
    "has_vision",
    "rope",
    "output_class",
    "hidden_state_access",
    "logit_softcapping",
    "norm_attrs",
)


@dataclass(frozen=True)
class Identity:
    """Names `act` derives paths and code from. All are read from the HF source, none typed by hand."""

    model_type: str
    display_name: str  # e.g. "Nemotron" (README row, docstrings)
    causal_lm_class: str
    base_model_class: str
    config_class: str
    decoder_layer_class: str
    modeling_module: str  # transformers.models.X.modeling_X
    modeling_file: str  # relative to site-packages
    base_model_prefix: str = "model"
    base_model_attr: str = "model"  # the CausalLM's attribute holding the base model (Llama 4: not its prefix)
    output_head_attr: str = "lm_head"  # the CausalLM's vocabulary projection (BioGPT: output_projection)
    layers_attr: str = "layers"  # base_model.<layers_attr> holds the decoder layers
    mlp_attr: str = "mlp"  # decoder_layer.<mlp_attr> is the MLP (or MoE block)
    norm_class: str | None = None  # the RMSNorm/LayerNorm class the modeling module defines or uses
    mlp_class: str | None = None
    experts_class: str | None = None  # MoE: the fused experts class (transformers v5)
    experts_attr: str | None = None  # MoE: path from the MoE block to the experts, e.g. "experts"
    # MoE: how the block calls its experts: "routed" (x, top_k_index, top_k_weights), LigerExperts' convention, or
    # "pre_routed" (one tensor of rows already grouped per expert, Llama 4) or "weightless_experts" (routed, with
    # zero-computation experts past the weights, LongCat-Flash), which LigerExperts cannot replace
    experts_convention: str | None = None
    shared_mlp_attr: str | None = None  # MoE: the block's always-on MLP beside the experts, e.g. "shared_experts"
    shared_mlp_class: str | None = None
    attn_attr: str = "self_attn"  # decoder_layer.<attn_attr> is the attention (holds the attention's norms)
    optional_attrs: tuple[str, ...] = ()  # layer / attention attributes __init__ creates only under an `if`
    rotary_fn: str | None = None  # e.g. "apply_rotary_pos_emb"
    forward_params: tuple[str, ...] = ()  # CausalLM.forward's parameters, in order, without self
    supported_by: str | None = None  # apply_liger_kernel_to_* when the target already supports it
    source_sha256: str | None = None  # of the modeling file understand read: act refuses a profile of another source
    derived_from: tuple[str, ...] = ()  # the models its modular file builds on (act copies their test tolerances)
    # the `config.model_type` values Liger's registry maps to the apply function (a model_type with '-', a class
    # two model types share, a text config with a model_type of its own); empty: model_type alone
    registry_keys: tuple[str, ...] = ()
    # a model_type without a modeling file of its own, run by another model's CausalLM class (exaone:
    # LlamaForCausalLM): that model's model_type, whose apply function the registry entry reuses; None otherwise
    alias_of: str | None = None
    config_module: str | None = None  # where the config class lives when not beside the modeling module (an alias)


# Checks beside the 12 decisions: facts no Liger option expresses, so a patch cannot be generated while one needs
# review. `logits_transform`: what CausalLM.forward does to the logits between lm_head and the loss besides slicing
# and softcapping (Granite divides by config.logits_scaling); the fused linear cross entropy would skip it.
CHECK_KEYS = ("logits_transform",)


@dataclass(frozen=True)
class Profile:
    identity: Identity
    decisions: dict[str, Decision] = field(default_factory=dict)
    checks: dict[str, Decision] = field(default_factory=dict)

    @property
    def model_type(self) -> str:
        return self.identity.model_type

    @property
    def registry_keys(self) -> tuple[str, ...]:
        return self.identity.registry_keys or (self.identity.model_type,)

    def value(self, key: str) -> Any:
        return self.decisions[key].value

    def needs_review(self) -> list[str]:
        return [k for k in DECISION_KEYS if k in self.decisions and self.decisions[k].status is Status.NEEDS_REVIEW]

    def to_json(self) -> dict:
        ident = asdict(self.identity)
        ident["forward_params"] = list(self.identity.forward_params)
        ident["optional_attrs"] = list(self.identity.optional_attrs)
        ident["derived_from"] = list(self.identity.derived_from)
        ident["registry_keys"] = list(self.identity.registry_keys)
        return {
            "model_type": self.identity.model_type,
            "causal_lm_class": self.identity.causal_lm_class,
            "modeling_file": self.identity.modeling_file,
            "identity": ident,
            "supported_by": self.identity.supported_by,
            "decisions": {k: self.decisions[k].to_json() for k in DECISION_KEYS if k in self.decisions},
            "needs_review": self.needs_review(),
            "checks": {k: self.checks[k].to_json() for k in CHECK_KEYS if k in self.checks},
        }

    @classmethod
    def from_json(cls, data: dict) -> Profile:
        """The profile `to_json` wrote (what a reviewer saw and approved); refuses JSON of another shape."""
        try:
            ident = dict(data["identity"])
            ident["forward_params"] = tuple(ident.get("forward_params") or ())
            ident["optional_attrs"] = tuple(ident.get("optional_attrs") or ())
            ident["derived_from"] = tuple(ident.get("derived_from") or ())
            ident["registry_keys"] = tuple(ident.get("registry_keys") or ())
            identity = Identity(**ident)
            decisions = {k: Decision.from_json(v) for k, v in (data.get("decisions") or {}).items()}
            checks = {k: Decision.from_json(v) for k, v in (data.get("checks") or {}).items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise PipelineError(f"not an autopatch profile: {type(exc).__name__}: {exc}") from None
        unknown = (set(decisions) - set(DECISION_KEYS)) | (set(checks) - set(CHECK_KEYS))
        if unknown:
            raise PipelineError(f"not an autopatch profile: unknown decisions {sorted(unknown)}")
        return cls(identity, decisions, checks)

    def failed_checks(self) -> list[str]:
        return [k for k in CHECK_KEYS if k in self.checks and self.checks[k].status is Status.NEEDS_REVIEW]

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=False)

    def with_overrides(self, overrides: dict[str, Any]) -> Profile:
        """Idempotent: an override already in the profile (an approved profile carries its overrides) is kept."""
        decisions = dict(self.decisions)
        for key, value in overrides.items():
            before = decisions.get(key)
            if before is not None and before.method is Method.OVERRIDE and before.value == value:
                continue
            was = f"was {before.value!r} ({before.method.value})" if before else "was unset"
            decisions[key] = Decision(value, Method.OVERRIDE, (), Status.SETTLED, f"set by reviewer; {was}")
        return replace(self, decisions=decisions)


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError("expected true or false")


def _parse_choice(choices: tuple[str, ...], open_ended: bool = False):
    def parse(text: str) -> str:
        value = text.strip()
        if value in choices or (open_ended and value.isidentifier()):
            return value
        raise ValueError(f"expected one of {', '.join(choices)}" + (" or another identifier" if open_ended else ""))

    return parse


def _parse_offset(text: str) -> float:
    return float(text)


def _parse_norm_attrs(text: str) -> dict:
    value = json.loads(text)
    if not isinstance(value, dict) or set(value) - {"decoder", "final", "attn"}:
        raise ValueError('expected JSON like {"decoder": [...], "final": "norm", "attn": [...]}')
    return value


OVERRIDE_PARSERS = {
    "norm_type": _parse_choice(NORM_TYPES),
    "rms_casting_mode": _parse_choice(CASTING_MODES),
    "rms_offset": _parse_offset,
    "rms_in_place": _parse_bool,
    "mlp_kind": _parse_choice(MLP_KINDS),
    "structure": _parse_choice(STRUCTURES),
    "has_vision": _parse_bool,
    "rope": _parse_choice(ROPE_KINDS),
    "output_class": _parse_choice(OUTPUT_CLASSES, open_ended=True),
    "hidden_state_access": _parse_choice(HIDDEN_STATE_ACCESS),
    "logit_softcapping": _parse_bool,
    "norm_attrs": _parse_norm_attrs,
}


OVERRIDE_VALUES = {
    "norm_type": NORM_TYPES,
    "rms_casting_mode": CASTING_MODES,
    "rms_offset": ("a number, e.g. 0.0 or 1.0",),
    "rms_in_place": ("true", "false"),
    "mlp_kind": MLP_KINDS,
    "structure": STRUCTURES,
    "has_vision": ("true", "false"),
    "rope": ROPE_KINDS,
    "output_class": (*OUTPUT_CLASSES, "or another class name"),
    "hidden_state_access": HIDDEN_STATE_ACCESS,
    "logit_softcapping": ("true", "false"),
    "norm_attrs": ('JSON {"decoder": [...], "final": "norm", "attn": [...]}',),
}
OVERRIDE_HELP = "fields and values: " + "; ".join(f"{k}: {' | '.join(v)}" for k, v in OVERRIDE_VALUES.items())


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`["rms_offset=1.0", "rope=none"]` -> typed values; unknown fields and bad values are refused."""
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep:
            raise PipelineError(f"--set {item!r} is not field=value", hint="for example --set rms_offset=1.0")
        if key not in OVERRIDE_PARSERS:
            raise PipelineError(f"--set: unknown field {key!r}", hint=OVERRIDE_HELP)
        try:
            overrides[key] = OVERRIDE_PARSERS[key](raw)
        except ValueError as exc:
            raise PipelineError(f"--set {key}: bad value {raw!r} ({exc})", hint=OVERRIDE_HELP) from None
    return overrides
