"""Leave-one-out evaluation of `understand`'s decisions against what Liger-Kernel itself does.

For every text model (dense and MoE, not VL) in a Liger checkout's MODEL_TYPE_TO_APPLY_LIGER_FN, run
`understand` (which never reads Liger's patch for that model) and compare each of the 12 decisions with
what `apply_liger_kernel_to_<x>` actually uses, read from the checkout with ast: which Liger norm / MLP
classes it swaps in, the casting_mode / offset / in_place of its `_patch_rms_norm_module` calls (and
partials), the rope function it assigns, the output class, hidden-state access and softcapping of the
lce_forward it installs, and the norm attributes it patches on an instance.

    python -m benchmarks.leave_one_out_decisions [--repo DIR] [--out FILE.json] [MODEL ...]

Liger is not ground truth: every disagreement gets a category (`Category`: equivalent, liger-approximates,
liger-conservative, liger-lacks-kernel, liger-wrong, or ours-wrong when no rule explains it) and one line of
evidence (the probe's residuals, the gradient runs, or Liger's own words). `--notes benchmarks/NOTES.md` also
rewrites this benchmark's section of that file.
"""

from __future__ import annotations

import argparse
import ast
import enum
import json
import statistics
import sys
import time
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from benchmarks import notes
from pipelines import target
from pipelines.autopatch.profile import DECISION_KEYS
from pipelines.autopatch.resolve import mappings
from pipelines.autopatch.resolve import resolve
from pipelines.autopatch.source import dotted_name
from pipelines.autopatch.understand import read_facts

RMS_DEFAULTS = {"offset": 0.0, "casting_mode": "llama", "in_place": True}
MLP_KINDS = {
    "LigerSwiGLUMLP": "swiglu",
    "LigerExperts": "swiglu",
    "LigerBlockSparseTop2MLP": "swiglu",
    "LigerQwen3MoeSwiGLUMLP": "swiglu",
    "LigerHunyuanV1SwiGLUMLP": "swiglu",
    "LigerFalconH1SwiGLUMLP": "swiglu",
    "LigerSwiGLUMLPForMuseGlimmer": "swiglu",
    "LigerGEGLUMLP": "geglu",
    "LigerGEGLUMLPForGemma4": "geglu",
    "LigerPhi3SwiGLUMLP": "phi3_swiglu",
    "LigerReLUSquared": "relu_squared",
}
# LigerQwen3MoeSwiGLUMLP is left out: it is one SwiGLU MLP with Qwen's signature, swapped in for dense MLPs
# too (Qwen3.5 dense, DeepSeek shared experts); an MoE patch shows itself by experts / routers (MOE_ATTRIBUTES).
MOE_KERNELS = {"LigerExperts", "LigerBlockSparseTop2MLP"}
ROPE_INSTALLERS = {"apply_liger_llama4_rope_full": "llama4"}
MOE_ATTRIBUTES = {"experts", "shared_expert", "shared_experts", "is_moe_layer", "block_sparse_moe"}
ROPE_FUNCTIONS = {
    "liger_rotary_pos_emb": "standard",
    "liger_llama4_text_rotary_pos_emb": "llama4",
    "liger_multimodal_rotary_pos_emb": "mrope",
    "liger_rotary_pos_emb_gpt_oss": "gpt_oss",
}
# Why a disagreement of this kind is not a miss of either side (filled in per decision below when it applies).
EQUIVALENT = {
    "hidden_state_access": "equivalent: on a ModelOutput `outputs[0]` is `outputs.last_hidden_state`; transformers "
    "5.24's own forward reads the attribute, Liger's lce_forward (written for older releases) the index",
}


@dataclass
class LigerPatch:
    """What one apply_liger_kernel_to_* function does, as read from the checkout."""

    model_type: str
    function: str
    values: dict = field(default_factory=dict)
    lines: dict = field(default_factory=dict)  # decision -> "file:line" of the Liger source that says so
    replaced: dict = field(default_factory=dict)  # HF class -> the Liger class swapped in at class level
    stated: list = field(default_factory=list)  # what the function itself says it does not do, and why
    forward_has_aux_loss: bool = False
    branches_per_layer: bool = False  # patches each layer by its MLP kind (isinstance / is_moe_layer)


def registry(monkey_patch: Path) -> dict[str, str]:
    from pipelines.autopatch.supported import supported_models

    return supported_models(monkey_patch)


def text_models(reg: dict[str, str]) -> list[str]:
    maps = mappings()
    return [m for m in reg if maps.causal.get(m, "").endswith("ForCausalLM") and m not in maps.multimodal]


class LigerReader:
    def __init__(self, root: Path):
        self.root = root
        self.monkey_patch = root / target.MONKEY_PATCH
        self.tree = ast.parse(self.monkey_patch.read_text())
        self.functions = {n.name: n for n in self.tree.body if isinstance(n, ast.FunctionDef)}
        self.imports = {
            alias.asname or alias.name: (node.module, alias.name)
            for node in ast.walk(self.tree)
            if isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names
        }
        self.rms_classes = self._rms_class_defaults()

    def _rms_class_defaults(self) -> dict[str, dict]:
        tree = ast.parse((self.root / "src/liger_kernel/transformers/rms_norm.py").read_text())
        out = {}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
                if init is None:
                    continue
                names = [a.arg for a in init.args.args][-len(init.args.defaults) :] if init.args.defaults else []
                values = {
                    n: d.value for n, d in zip(names, init.args.defaults, strict=True) if isinstance(d, ast.Constant)
                }
                out[node.name] = {k: values[k] for k in ("offset", "casting_mode", "in_place") if k in values}
        return out

    def where(self, node: ast.AST) -> str:
        return f"{target.MONKEY_PATCH}:{node.lineno}"

    def read(self, model_type: str, function: str) -> LigerPatch:
        func = self.functions[function]
        patch = LigerPatch(model_type, function)
        names = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)}
        partials = self._wrappers(func, self._partials(func))
        rms_calls, layer_calls = self._norm_calls(func, partials)
        patch.replaced = class_replacements(func)
        self._norms(patch, func, names, rms_calls, layer_calls)
        self._class_level_norms(patch)
        self._forward(patch, func)
        self._mlp(patch, func, names)
        self._rope(patch, func)
        patch.stated = stated_reasons(func)
        return patch

    def _wrappers(self, func, partials: dict[str, dict]) -> dict[str, dict]:
        """Local helpers that forward their first argument to a norm patcher (Gemma 4's `_maybe_patch_scaled_norm`)."""
        patchers = {"_patch_rms_norm_module", "_patch_layer_norm_module"}
        for node in ast.walk(func):
            if not isinstance(node, ast.FunctionDef) or node is func or not node.args.args:
                continue
            first = node.args.args[0].arg
            for call in ast.walk(node):
                name = dotted_name(call.func) if isinstance(call, ast.Call) else ""
                if (name in partials or name in patchers) and call.args and dotted_name(call.args[0]) == first:
                    partials[node.name] = partials.get(name, {"base": name})
                    break
        return partials

    def _class_level_norms(self, patch: LigerPatch) -> None:
        """Add the norm attributes Liger's class-level swap covers (`modeling_x.<Norm> = Liger...`), so that
        norm_attrs compares what Liger's patch turns into Liger norms, not only what it re-patches on an instance."""
        swapped = {hf for hf, liger in patch.replaced.items() if "Norm" in liger}
        if not swapped:
            return
        try:
            facts = read_facts(resolve(patch.model_type))
        except Exception:  # the HF side cannot be read: keep the instance-level reading
            return
        attrs = patch.values["norm_attrs"]
        added = []
        for key, norms in (("decoder", facts.decoder_norms), ("attn", facts.attn_norms)):
            extra = [a for a, cls in norms.items() if cls in swapped and a not in attrs[key]]
            attrs[key] = sorted(attrs[key] + extra)
            added += [f"{key}.{a}" for a in extra]
        if attrs["final"] is None:
            attrs["final"] = next((a for a, cls in facts.final_norms.items() if cls in swapped), None)
        if added:
            patch.lines["norm_attrs"] = f"class-level swap of {', '.join(sorted(swapped))} covers {', '.join(added)}"

    def _partials(self, func) -> dict[str, dict]:
        out = {}
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                if dotted_name(node.value.func) == "partial" and node.value.args:
                    base = dotted_name(node.value.args[0])
                    kwargs = {k.arg: k.value.value for k in node.value.keywords if isinstance(k.value, ast.Constant)}
                    out[node.targets[0].id] = {"base": base, **kwargs}
        return out

    def _norm_calls(self, func, partials):
        rms, layer = [], []
        vision = vision_names(func)
        nested = {
            id(n) for d in ast.walk(func) if isinstance(d, ast.FunctionDef) and d is not func for n in ast.walk(d)
        }
        for node in ast.walk(func):
            if not isinstance(node, ast.Call) or not node.args or id(node) in nested:
                continue
            name = dotted_name(node.func)
            base = partials.get(name, {}).get("base", name)
            kwargs = {k: v for k, v in partials.get(name, {}).items() if k != "base"}
            kwargs |= {k.arg: k.value.value for k in node.keywords if isinstance(k.value, ast.Constant)}
            attr = module_path(node.args[0])
            if attr.split(".")[0] in vision:  # the shared function also patches a vision tower's norms
                continue
            if base == "_patch_rms_norm_module":
                rms.append((attr, {**RMS_DEFAULTS, **kwargs}, node))
            elif base == "_patch_layer_norm_module":
                layer.append((attr, kwargs, node))
        return rms, layer

    def _norms(self, patch, func, names, rms_calls, layer_calls) -> None:
        rms_classes = sorted(n for n in names if n in self.rms_classes)
        has_rms = bool(rms_calls or rms_classes)
        has_layer = bool(layer_calls or "LigerLayerNorm" in names)
        patch.values["norm_type"] = (
            "both" if has_rms and has_layer else "rms" if has_rms else "layer" if has_layer else "none"
        )
        decoder_calls = [c for c in rms_calls if c[0].startswith("decoder_layer.") and c[0].count(".") == 1]
        if decoder_calls:
            attr, kwargs, node = decoder_calls[0]
            settings = kwargs
            patch.lines["rms_casting_mode"] = self.where(node)
        elif rms_classes:
            settings = {**RMS_DEFAULTS, **self.rms_classes[rms_classes[0]]}
        else:
            settings = {"casting_mode": None, "offset": None, "in_place": None}
        patch.values["rms_casting_mode"] = settings["casting_mode"]
        patch.values["rms_offset"] = float(settings["offset"]) if settings["offset"] is not None else None
        patch.values["rms_in_place"] = settings["in_place"]
        decoder, final, attn = [], None, []
        for attr, _, _ in rms_calls + layer_calls:
            parts = attr.split(".")
            if parts[0] == "decoder_layer" and len(parts) == 2:
                decoder.append(parts[1])
            elif parts[0] == "decoder_layer" and len(parts) == 3:
                attn.append(parts[2])
            elif parts[0] in ("base_model", "model", "text_model") and final is None:
                final = parts[-1]
        patch.values["norm_attrs"] = {"decoder": sorted(set(decoder)), "final": final, "attn": sorted(set(attn))}

    def _mlp(self, patch, func, names) -> None:
        kinds = [MLP_KINDS[n] for n in sorted(names) if n in MLP_KINDS]
        patch.values["mlp_kind"] = kinds[0] if kinds else "none"
        patch.values["has_vision"] = False  # text models only; the VL entry points are left out
        # MoE when Liger swaps in an experts kernel, touches a router/expert attribute of a layer, or its
        # lce_forward carries the load-balancing loss (GPT-OSS: no experts kernel, still an MoE patch)
        markers = sorted({n.attr for n in ast.walk(func) if isinstance(n, ast.Attribute) and n.attr in MOE_ATTRIBUTES})
        if names & MOE_KERNELS:
            patch.values["structure"], why = "moe", f"swaps in {', '.join(sorted(names & MOE_KERNELS))}"
        elif markers:
            patch.values["structure"], why = "moe", f"patches {', '.join(markers)} of MoE layers"
        elif patch.forward_has_aux_loss:
            patch.values["structure"], why = "moe", "its lce_forward returns the load-balancing aux_loss"
        else:
            patch.values["structure"], why = "dense", "no experts kernel, expert attribute or aux_loss"
        patch.lines["structure"] = f"{target.MONKEY_PATCH} ({patch.function}: {why})"
        patch.branches_per_layer = any(
            isinstance(n, ast.If)
            and ("isinstance(decoder_layer." in ast.unparse(n.test) or "is_moe_layer" in ast.unparse(n.test))
            for n in ast.walk(func)
        )

    def _rope(self, patch, func) -> None:
        patch.values["rope"] = "none"
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in ROPE_FUNCTIONS:
                patch.values["rope"] = ROPE_FUNCTIONS[node.value.id]
                patch.lines["rope"] = self.where(node)
                return
            if isinstance(node, ast.Call) and dotted_name(node.func) in ROPE_INSTALLERS:  # Llama 4's helper
                patch.values["rope"] = ROPE_INSTALLERS[dotted_name(node.func)]
                patch.lines["rope"] = self.where(node)
                return

    def _forward(self, patch, func) -> None:
        """The lce_forward the function installs: its file's output class, hidden-state access, softcapping."""
        forward = None
        for node in ast.walk(func):
            if isinstance(node, ast.ImportFrom) and node.module and ".model." in node.module:
                for alias in node.names:
                    if "forward" in alias.name:
                        forward = (node.module, alias.name)
            if isinstance(node, ast.Call) and dotted_name(node.func) == "MethodType" and node.args:
                name = dotted_name(node.args[0])
                forward = forward or self.imports.get(name)
        if forward is None:
            return
        module, name = forward
        path = self.root / "src" / Path(*module.split(".")).with_suffix(".py")
        tree = ast.parse(path.read_text())
        fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
        if fn is None:
            return
        text = ast.unparse(fn)
        rel = path.relative_to(self.root)
        patch.values["output_class"] = (
            "LigerMoeCausalLMOutputWithPast" if "MoeCausalLMOutputWithPast" in text else "LigerCausalLMOutputWithPast"
        )
        index, attr = text.find("outputs[0]"), text.find("outputs.last_hidden_state")
        found = [(i, v) for i, v in ((index, "outputs[0]"), (attr, "outputs.last_hidden_state")) if i >= 0]
        patch.values["hidden_state_access"] = min(found)[1] if found else None
        patch.values["logit_softcapping"] = "final_logit_softcapping" in text
        patch.forward_has_aux_loss = "aux_loss" in {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
        for key in ("output_class", "hidden_state_access", "logit_softcapping"):
            patch.lines[key] = f"{rel}:{fn.lineno} ({name})"


def module_path(node: ast.AST) -> str:
    """`decoder_layer.self_attn.q_norm` for that expression and for `getattr(decoder_layer.self_attn, "q_norm", None)`."""
    if isinstance(node, ast.Call) and dotted_name(node.func) == "getattr" and len(node.args) >= 2:
        name = node.args[1]
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            return f"{module_path(node.args[0])}.{name.value}"
    return dotted_name(node)


def vision_names(func: ast.FunctionDef) -> set[str]:
    """Variables that hold a vision tower or iterate over its layers."""
    names = {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and "vision" in n.id}
    for node in ast.walk(func):
        if isinstance(node, ast.For) and "vision" in ast.unparse(node.iter) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def class_replacements(func: ast.FunctionDef) -> dict[str, str]:
    """`modeling_x.Olmo2RMSNorm = LigerRMSNormForOlmo2` -> {"Olmo2RMSNorm": "LigerRMSNormForOlmo2"}."""
    out = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute):
            owner = dotted_name(node.targets[0].value)
            if owner.startswith("modeling_") and node.targets[0].attr[:1].isupper():
                out[node.targets[0].attr] = dotted_name(node.value) or ast.unparse(node.value)[:60]
    return out


def stated_reasons(func: ast.FunctionDef) -> list[str]:
    """The function's own words on what it leaves out: NotImplementedError messages and docstring 'not' lines."""
    said = []
    for node in ast.walk(func):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            if dotted_name(node.exc.func) == "NotImplementedError" and isinstance(node.exc.args[0], ast.Constant):
                said.append(f"raises NotImplementedError({node.exc.args[0].value!r}) (line {node.lineno})")
    doc = " ".join((ast.get_docstring(func) or "").split("Args:")[0].split())
    for sentence in doc.split(". "):
        if " not " in f" {sentence} " or "no-op" in sentence:
            said.append(f"docstring: {sentence.strip().rstrip('.')}.")
    return said


def same(key: str, ours, theirs) -> bool:
    if key == "norm_attrs" and isinstance(ours, dict) and isinstance(theirs, dict):
        return (
            sorted(ours.get("decoder", [])) == theirs["decoder"]
            and ours.get("final") == theirs["final"]
            and sorted(ours.get("attn", [])) == theirs["attn"]
        )
    if key == "rms_offset" and ours is not None and theirs is not None:
        return float(ours) == float(theirs)
    return ours == theirs


def evidence_summary(decision) -> str:
    parts = []
    for ev in decision.get("evidence", [])[:2]:
        where = f"{ev['file']}:{ev['lines'][0]}-{ev['lines'][1]}"
        probe = ev.get("probe") or {}
        if "matched" in probe:
            where += f" probe matched {probe['matched']}"
        parts.append(where)
    return "; ".join(parts)


def explain(key: str, ours: dict, theirs, patch: LigerPatch) -> str:
    liger_at = patch.lines.get(key, f"{target.MONKEY_PATCH} ({patch.function})")
    status = ours["status"]
    reason = ours.get("reason", "")
    return f"ours={ours['value']!r} ({ours['method']}, {status}: {reason[:160]}) [{evidence_summary(ours)}]; " + (
        f"liger={theirs!r} [{liger_at}]"
    )


class Category(str, enum.Enum):
    """Why a decision differs from Liger's patch. Only OURS_WRONG counts against `understand`."""

    EQUIVALENT = "equivalent"  # both compute the same thing, written differently
    LIGER_APPROXIMATES = "liger-approximates"  # Liger's choice computes measurably differently from HF (probe)
    LIGER_CONSERVATIVE = "liger-conservative"  # Liger leaves off what its kernel can do; ours is proven to match
    LIGER_LACKS_KERNEL = "liger-lacks-kernel"  # Liger has no kernel or forward for it, and says so
    LIGER_WRONG = "liger-wrong"  # the probe shows Liger's choice corrupts the result
    OURS_WRONG = "ours-wrong"  # nothing explains it


EXPLAINED = tuple(c for c in Category if c is not Category.OURS_WRONG)
# What each decision's "not supported" remarks in a Liger function mention.
TOPICS = {
    "norm_type": ("norm",),
    "rms_offset": ("norm",),
    "norm_attrs": ("norm",),
    "rope": ("rope", "rotary"),
    "mlp_kind": ("swiglu", "geglu", "expert"),
    "output_class": ("fused_linear_cross_entropy", "fusedlinearcrossentropy"),
    "logit_softcapping": ("fused_linear_cross_entropy", "fusedlinearcrossentropy"),
    "hidden_state_access": ("fused_linear_cross_entropy", "fusedlinearcrossentropy"),
}
ROPE_PARTIAL = (
    "Liger 0.8.5's rope kernel rotates a partial width: ops/rope.py `_resolve_rotary_dim` takes "
    "rotary_dim = min(cos.shape[-1], head_dim) and leaves [rotary_dim:head_dim] untouched"
)


def _probe(ours: dict) -> dict:
    return next((e["probe"] for e in ours.get("evidence", []) if e.get("probe")), {})


def _stated(key: str, patch: LigerPatch) -> list[str]:
    words = TOPICS.get(key, ())
    return [said for said in patch.stated if any(w in said.lower() for w in words)]


def _weightless_extras(model_type: str, ours: dict, theirs: dict) -> dict[str, str]:
    """The norms only Liger lists, when every one is built without a weight (`with_scale=False`): attr -> where.
    Empty unless ours is otherwise the same as Liger's."""
    from pipelines.autopatch.understand import built_without_weight

    if ours.get("final") != theirs.get("final") or set(ours.get("decoder") or ()) != set(theirs.get("decoder") or ()):
        return {}
    extra = set(theirs.get("attn") or ()) - set(ours.get("attn") or ())
    if not extra or set(ours.get("attn") or ()) - set(theirs.get("attn") or ()):
        return {}
    facts = read_facts(resolve(model_type))
    found = {}
    for assign in facts.src.self_assignments(facts.attn_class):
        if assign.attr in extra and built_without_weight(assign.node):
            found.setdefault(assign.attr, f"{facts.src.relative}:{assign.node.lineno}")
    return found if set(found) == extra else {}


def classify(key: str, ours: dict, theirs, patch: LigerPatch) -> tuple[Category, str]:
    """The category of one disagreement and its one-line evidence (rules, in order; the last is OURS_WRONG)."""
    value, probe = ours["value"], _probe(ours)
    if key == "structure" and (value, theirs) == ("hybrid", "moe") and patch.branches_per_layer:
        return Category.EQUIVALENT, (
            "Liger's patch branches per layer on its MLP kind (dense MLP or MoE block), which is what hybrid "
            "means; its patches have no 'hybrid' value to read"
        )
    if key == "rms_casting_mode" and value and theirs and probe.get("candidates"):
        theirs_runs = {n: r for n, r in probe["candidates"].items() if n.startswith(f"rms/{theirs}/")}
        off = {n: r for n, r in theirs_runs.items() if r.get("bf16", 0) > 0 or r.get("fp32", 0) > 0}
        if off and len(off) == len(theirs_runs):
            shown = "; ".join(
                f"{n} off by bf16 {r.get('bf16', 0):.2g} / fp32 {r.get('fp32', 0):.2g}" for n, r in off.items()
            )
            return Category.LIGER_APPROXIMATES, f"probe: {shown}; ours {probe['matched']} exact"
    if key == "rms_in_place" and "gradients" in probe:
        runs = "; ".join(f"{run}: {g['differing']}/{g['of']} gradients moved" for run, g in probe["gradients"].items())
        if value is True and theirs is False:
            return Category.LIGER_CONSERVATIVE, (
                f"in-place backward emulated on the tiny model: {runs} (tolerance "
                f"{probe['tolerance']['gradient_relative']:g}); in_place=False costs one dY-sized buffer per norm"
            )
        if value is False and theirs is True:
            return Category.LIGER_WRONG, f"in-place backward emulated on the tiny model: {runs}"
    if key == "norm_attrs" and isinstance(value, dict) and isinstance(theirs, dict):
        weightless = _weightless_extras(patch.model_type, value, theirs)
        if weightless:
            return Category.EQUIVALENT, (
                f"Liger also names {', '.join(weightless)}, but binds its forward only to norms that have a weight "
                "(`_maybe_patch_scaled_norm`), and those are built without one: "
                + "; ".join(f"{a} at {where}" for a, where in weightless.items())
            )
    if key == "rope" and value == "standard" and theirs == "none" and probe.get("matched") == ["partial_rotary"]:
        said = "; ".join(_stated(key, patch)) or "no reason given"
        return Category.LIGER_CONSERVATIVE, f"{ROPE_PARTIAL}; the probe matches it exactly. Liger's function: {said}"
    empty = theirs in (None, "none") or (isinstance(theirs, dict) and not any(theirs.values()))
    if empty and _stated(key, patch):  # Liger has nothing to compare with, and says why
        return Category.LIGER_LACKS_KERNEL, "Liger's function: " + "; ".join(_stated(key, patch))
    if key in EQUIVALENT:
        return Category.EQUIVALENT, EQUIVALENT[key]
    return Category.OURS_WRONG, explain(key, ours, theirs, patch)


def evaluate(root: Path, models: list[str] | None = None) -> dict:
    from pipelines.autopatch.understand import understand

    reader = LigerReader(root)
    reg = registry(reader.monkey_patch)
    chosen = models or text_models(reg)
    rows, timings = [], {}
    for model_type in chosen:
        patch = reader.read(model_type, reg[model_type])
        started = time.perf_counter()
        try:
            profile = understand(model_type).to_json()
        except Exception as exc:  # a crash is a result too: every decision counts as missed
            profile = {"decisions": {}, "error": f"{type(exc).__name__}: {exc}"}
        timings[model_type] = time.perf_counter() - started
        for key in DECISION_KEYS:
            ours = profile["decisions"].get(key, {"value": None, "method": "-", "status": "crashed", "evidence": []})
            theirs = patch.values.get(key)
            agree = same(key, ours["value"], theirs)
            row = {"model": model_type, "decision": key, "ours": ours["value"], "liger": theirs, "agree": agree}
            row["status"] = ours["status"]
            if not agree:
                category, why = classify(key, ours, theirs, patch)
                row["category"], row["explanation"] = category.value, why
                row["equivalent"] = category is Category.EQUIVALENT
            rows.append(row)
    return {"rows": rows, "timings_s": timings, "models": chosen}


def _counts(rows: list[dict]) -> dict[str, int]:
    counts = {"agree": sum(r["agree"] for r in rows)}
    for category in Category:
        counts[category.value] = sum(r.get("category") == category.value for r in rows)
    return counts


def table(result: dict) -> str:
    """Markdown: accuracy per decision and per model, then every disagreement with its category and evidence."""
    rows = result["rows"]
    columns = ["agree", *(c.value for c in Category)]
    head = "| decision | " + " | ".join(columns) + " | agree+equivalent | explained |"
    lines = [head, "|---" * (len(columns) + 3) + "|"]
    for key in [*DECISION_KEYS, None]:
        mine = [r for r in rows if key is None or r["decision"] == key]
        counts = _counts(mine)
        right = counts["agree"] + counts["equivalent"]
        explained = counts["agree"] + sum(counts[c.value] for c in EXPLAINED)
        cells = " | ".join(str(counts[c]) for c in columns)
        name = key or "**all**"
        lines.append(f"| {name} | {cells} | {right}/{len(mine)} ({right / len(mine):.0%}) | {explained}/{len(mine)} |")
    lines += ["", "| model | agree+equivalent / 12 | differs on (category) |", "|---|---|---|"]
    for model in result["models"]:
        mine = [r for r in rows if r["model"] == model]
        differ = [f"{r['decision']} ({r['category']})" for r in mine if not r["agree"] and not r.get("equivalent")]
        right = sum(r["agree"] or bool(r.get("equivalent")) for r in mine)
        lines.append(f"| {model} | {right} | {', '.join(differ)} |")
    times = sorted(result["timings_s"].values())
    lines += ["", f"understand wall time per model: median {statistics.median(times):.2f}s, max {times[-1]:.2f}s"]
    lines += ["", "Disagreements (category: evidence; one line per distinct explanation):"]
    grouped: dict[tuple, list[dict]] = {}
    for r in rows:
        if not r["agree"]:
            grouped.setdefault((r["decision"], r["category"], r["explanation"]), []).append(r)
    for (decision, category, why), group in grouped.items():
        if len(group) == 1:
            r = group[0]
            lines.append(f"- {r['model']}.{decision} [{category}]: ours={r['ours']!r} liger={r['liger']!r}. {why}")
        else:
            models = ", ".join(r["model"] for r in group)
            lines.append(f"- {decision} [{category}] for {len(group)} models ({models}): {why}")
    return "\n".join(lines)


NOTES_SECTION = "## autopatch leave-one-out: decisions"
NOTES_PREAMBLE = """`understand` never reads Liger's patch for the model; each of its 12 decisions is compared with what
`apply_liger_kernel_to_<model>` in the Liger 0.8.5 checkout does (read with ast: the norm/MLP classes it swaps in,
class-level swaps included, its `_patch_*` calls and partials, the rope function it installs, its lce_forward).
Only `ours-wrong` counts against us; the other categories say why Liger's value differs, with evidence.

- **rms_in_place** is settled by autograd, not by "two norms in sequence": Liger's backward with in_place=True writes
  dX into dY's storage, and autograd gives an add's gradient to both operands as one tensor, so a norm whose output
  is added to the residual (post-norm: OLMo 2/3, EXAONE 4, Gemma 2/3/4, GLM-4) corrupts the residual's gradient.
  The source read names those norms; the probe runs the tiny model's backward with every norm emulating the in-place
  write and compares all parameter gradients (corruption moves them by O(1) and more; the emulation's own reordering
  by ~1e-5). Qwen3-Next / Qwen3.5 are pre-norm: in place leaves every gradient unchanged. Liger's False there comes
  with `LigerRMSNormForQwen3Next`, whose defaults (offset 1, gemma, zeros, in_place=False) copy the Gemma 2/3
  classes; Qwen3.5 and Qwen3.5-MoE reuse it (Liger PRs 1109, 1123 say they mirror Qwen3-Next). Correct, one
  dY-sized buffer per norm more than needed.
- **rope**: Liger 0.8.5's rope kernel does partial rotary (`ops/rope.py` `_resolve_rotary_dim`: rotary_dim =
  min(cos.shape[-1], head_dim), the rest left untouched), so Qwen3-Next's `liger_rotary_pos_emb` is right and
  partial rotary is "standard"; Nemotron's docstring and Qwen3.5's NotImplementedError predate that kernel.
- **rms_casting_mode**: OLMo 2/3, GPT-OSS and DeepSeek-V4 compute their RMSNorm in fp32 and cast at the end
  (gemma mode: exact in the probe); Liger patches them with llama mode, one bf16 rounding step off."""


def write_notes(path: Path, body: str) -> None:
    """Replace this benchmark's own section of NOTES.md (other sections belong to other benchmarks)."""
    regenerate = f"Regenerate: `python -m benchmarks.leave_one_out_decisions --notes {path}`"
    notes.replace_section(path, NOTES_SECTION, f"{NOTES_SECTION}\n\n{regenerate}\n\n{NOTES_PREAMBLE}\n\n{body}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model types (default: every text model in the registry)")
    parser.add_argument("--repo", help="a Liger-Kernel checkout (default: the cached 0.8.5 template)")
    parser.add_argument("--out", default="leave_one_out_decisions.json", help="where to write the JSON")
    parser.add_argument("--notes", help="also replace this benchmark's section of a NOTES.md with the tables")
    args = parser.parse_args(argv)
    root = Path(args.repo) if args.repo else target.template_repository(target.DEFAULT_VERSION)
    result = evaluate(root, args.models or None)
    Path(args.out).write_text(json.dumps(result, indent=2, default=str))
    print(table(result))
    if args.notes:
        write_notes(Path(args.notes), table(result))
        print(f"updated {NOTES_SECTION!r} in {args.notes}")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
