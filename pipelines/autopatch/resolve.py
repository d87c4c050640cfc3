"""Resolve what a person typed ("nemotron", "NemotronForCausalLM", "Qwen3-Next") to one decoder-only causal LM.

Resolution reads the installed transformers' auto mappings, never a hand-kept table. The name is validated
before anything else, because it later becomes part of module paths and file names.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import cache

from pipelines.outcome import PipelineError

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.\- ]{0,63}$")
# transformers names a causal LM `<Model>ForCausalLM`, or `<Model>LMHeadModel` where it predates that name (GPT-2, CTRL)
_CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")


@dataclass(frozen=True)
class ModelRef:
    """One resolved model: its registry key, its causal-LM class and the module that defines it."""

    model_type: str
    causal_lm_class: str
    config_class: str
    module_name: str  # the folder under transformers/models/
    display_name: str


def normalize(text: str) -> str:
    """Case- and punctuation-insensitive key: "Qwen3-Next" and "qwen3_next" both become "qwen3next"."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def validate_name(name: str) -> str:
    name = name.strip()
    if not _NAME_RE.match(name) or ".." in name:
        raise PipelineError(
            f"{name[:80]!r} is not a model name",
            hint="use a model_type (nemotron), a class name (NemotronForCausalLM) or a display name (Qwen3-Next)",
        )
    return name


@dataclass(frozen=True)
class _Mappings:
    configs: dict[str, str]  # model_type -> config class
    causal: dict[str, str]  # model_type -> causal LM class
    seq2seq: frozenset[str]
    masked: frozenset[str]
    multimodal: frozenset[str]
    display: dict[str, str]  # model_type -> display name, where transformers ships one
    special_modules: dict[str, str]


@cache
def mappings() -> _Mappings:
    from transformers.models.auto import configuration_auto
    from transformers.models.auto import modeling_auto

    display = dict(getattr(configuration_auto, "MODEL_NAMES_MAPPING", {}) or {})
    special = dict(getattr(configuration_auto, "SPECIAL_MODEL_TYPE_TO_MODULE_NAME", {}) or {})
    return _Mappings(
        configs=dict(configuration_auto.CONFIG_MAPPING_NAMES),
        causal=dict(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES),
        seq2seq=frozenset(modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES),
        masked=frozenset(modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES),
        multimodal=frozenset(modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES),
        display=display,
        special_modules=special,
    )


def _class_prefix(class_name: str) -> str:
    suffix = next((s for s in _CAUSAL_SUFFIXES if class_name.endswith(s)), "")
    return class_name[: len(class_name) - len(suffix)]


@cache
def _index() -> dict[str, list[str]]:
    """normalized name -> model_types it may mean (model_type, config, class, class prefix, display name)."""
    maps = mappings()
    index: dict[str, list[str]] = {}
    for model_type, config_class in maps.configs.items():
        names = [model_type, config_class, maps.display.get(model_type, "")]
        causal = maps.causal.get(model_type)
        if causal:
            names += [causal, _class_prefix(causal)]
        for name in filter(None, names):
            bucket = index.setdefault(normalize(name), [])
            if model_type not in bucket:
                bucket.append(model_type)
    return index


def _pick(candidates: list[str], key: str) -> str:
    """Several model types share a class (qwen3_5 and qwen3_5_text): the exact key, else the text-only one."""
    maps = mappings()
    for model_type in candidates:
        if normalize(model_type) == key:
            return model_type
    text_only = [m for m in candidates if m not in maps.multimodal]
    return (text_only or candidates)[0]


def suggestions(name: str, limit: int = 5) -> list[str]:
    key = normalize(name)
    keys = difflib.get_close_matches(key, list(_index()), n=limit * 3, cutoff=0.6)
    found: list[str] = []
    for close in keys:
        for model_type in _index()[close]:
            if model_type in mappings().causal and model_type not in found:
                found.append(model_type)
    return found[:limit]


def module_name(model_type: str) -> str:
    special = mappings().special_modules
    return special.get(model_type, model_type).replace("-", "_")


def liger_name(model_type: str) -> str:
    """The name Liger's files and functions are spelled with (`model/<name>.py`, `apply_liger_kernel_to_<name>`):
    the model_type with '-' as '_', as transformers spells its module (modernbert-decoder -> modernbert_decoder).
    The registry keeps the model_type itself as its key."""
    return model_type.replace("-", "_")


def display_name(model_type: str, causal_lm_class: str) -> str:
    shipped = mappings().display.get(model_type)
    return shipped or _class_prefix(causal_lm_class)


def resolve(name: str) -> ModelRef:
    name = validate_name(name)
    key = normalize(name)
    candidates = _index().get(key)
    if not candidates:
        close = suggestions(name)
        raise PipelineError(
            f"no transformers model is called {name!r}",
            hint=f"did you mean: {', '.join(close)}" if close else "give the model_type from the model's config.json",
        )
    model_type = _pick(candidates, key)
    _refuse_non_decoder(name, model_type)
    maps = mappings()
    causal = maps.causal[model_type]
    return ModelRef(
        model_type=model_type,
        causal_lm_class=causal,
        config_class=maps.configs[model_type],
        module_name=module_name(model_type),
        display_name=display_name(model_type, causal),
    )


def _refuse_non_decoder(name: str, model_type: str) -> None:
    maps = mappings()
    if model_type in maps.seq2seq:
        raise PipelineError(
            f"{name!r} ({model_type}) is an encoder-decoder model; Liger's autopatch covers decoder-only causal LMs",
        )
    causal = maps.causal.get(model_type)
    if causal is None or not causal.endswith(_CAUSAL_SUFFIXES) or model_type in maps.masked:
        kind = "an encoder (masked LM) model" if model_type in maps.masked else "not a decoder-only causal LM"
        text_type = f"{model_type}_text"
        hint = "autopatch needs a model with a *ForCausalLM class in transformers' causal LM mapping"
        if maps.causal.get(text_type, "").endswith(_CAUSAL_SUFFIXES):
            hint = f"its text model is {text_type!r} ({maps.causal[text_type]})"
        raise PipelineError(
            f"{name!r} ({model_type}) is {kind}; Liger's autopatch covers decoder-only causal LMs", hint=hint
        )
