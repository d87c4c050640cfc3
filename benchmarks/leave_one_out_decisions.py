"""Leave-one-out evaluation of `understand`'s decisions against what Liger-Kernel itself does.

For every text model (dense and MoE, not VL) in a Liger checkout's MODEL_TYPE_TO_APPLY_LIGER_FN, run
`understand` (which never reads Liger's patch for that model) and compare each of the 12 decisions with
what `apply_liger_kernel_to_<x>` actually uses, read from the checkout with ast: which Liger norm / MLP
classes it swaps in, the casting_mode / offset / in_place of its `_patch_rms_norm_module` calls (and
partials), the rope function it assigns, the output class, hidden-state access and softcapping of the
lce_forward it installs, and the norm attributes it patches on an instance.

    python -m benchmarks.leave_one_out_decisions [--repo DIR] [--out FILE.json] [MODEL ...]

Liger is not ground truth: every disagreement is printed with both sides' evidence.
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
import time
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from pipelines import target
from pipelines.autopatch.profile import DECISION_KEYS
from pipelines.autopatch.resolve import mappings
from pipelines.autopatch.source import dotted_name

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
MOE_KERNELS = {"LigerExperts", "LigerBlockSparseTop2MLP", "LigerQwen3MoeSwiGLUMLP"}
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


def registry(monkey_patch: Path) -> dict[str, str]:
    from bot.cli.autopatch import supported_models

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
        partials = self._partials(func)
        rms_calls, layer_calls = self._norm_calls(func, partials)
        self._norms(patch, func, names, rms_calls, layer_calls)
        self._mlp(patch, func, names)
        self._rope(patch, func)
        self._forward(patch, func)
        return patch

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
        for node in ast.walk(func):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = dotted_name(node.func)
            base = partials.get(name, {}).get("base", name)
            kwargs = {k: v for k, v in partials.get(name, {}).items() if k != "base"}
            kwargs |= {k.arg: k.value.value for k in node.keywords if isinstance(k.value, ast.Constant)}
            attr = dotted_name(node.args[0])
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
        patch.values["structure"] = "moe" if names & MOE_KERNELS or "experts" in ast.unparse(func) else "dense"
        patch.values["has_vision"] = False  # text models only; the VL entry points are left out

    def _rope(self, patch, func) -> None:
        patch.values["rope"] = "none"
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in ROPE_FUNCTIONS:
                patch.values["rope"] = ROPE_FUNCTIONS[node.value.id]
                patch.lines["rope"] = self.where(node)
                break

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
        for key in ("output_class", "hidden_state_access", "logit_softcapping"):
            patch.lines[key] = f"{rel}:{fn.lineno} ({name})"


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
    if key in EQUIVALENT:
        return EQUIVALENT[key]
    liger_at = patch.lines.get(key, f"{target.MONKEY_PATCH} ({patch.function})")
    status = ours["status"]
    reason = ours.get("reason", "")
    return f"ours={ours['value']!r} ({ours['method']}, {status}: {reason[:160]}) [{evidence_summary(ours)}]; " + (
        f"liger={theirs!r} [{liger_at}]"
    )


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
                row["explanation"] = explain(key, ours, theirs, patch)
                row["equivalent"] = key in EQUIVALENT
            rows.append(row)
    return {"rows": rows, "timings_s": timings, "models": chosen}


def table(result: dict) -> str:
    rows = result["rows"]
    lines = ["| decision | agree | equivalent | differ | accuracy (agree+equivalent) |", "|---|---|---|---|---|"]
    for key in DECISION_KEYS:
        mine = [r for r in rows if r["decision"] == key]
        agree = sum(r["agree"] for r in mine)
        equivalent = sum(bool(r.get("equivalent")) for r in mine)
        differ = len(mine) - agree - equivalent
        lines.append(f"| {key} | {agree} | {equivalent} | {differ} | {(agree + equivalent) / len(mine):.0%} |")
    lines += ["", "| model | agree / 12 | differs on |", "|---|---|---|"]
    for model in result["models"]:
        mine = [r for r in rows if r["model"] == model]
        differ = [r["decision"] for r in mine if not r["agree"] and not r.get("equivalent")]
        lines.append(
            f"| {model} | {sum(r['agree'] or bool(r.get('equivalent')) for r in mine)} | {', '.join(differ)} |"
        )
    times = sorted(result["timings_s"].values())
    lines += ["", f"understand wall time per model: median {statistics.median(times):.2f}s, max {times[-1]:.2f}s"]
    lines += ["", "Disagreements:"]
    for r in rows:
        if not r["agree"] and not r.get("equivalent"):
            lines.append(f"- {r['model']}.{r['decision']}: {r['explanation']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model types (default: every text model in the registry)")
    parser.add_argument("--repo", help="a Liger-Kernel checkout (default: the cached 0.8.5 template)")
    parser.add_argument("--out", default="leave_one_out_decisions.json", help="where to write the JSON")
    args = parser.parse_args(argv)
    root = Path(args.repo) if args.repo else target.template_repository(target.DEFAULT_VERSION)
    result = evaluate(root, args.models or None)
    Path(args.out).write_text(json.dumps(result, indent=2, default=str))
    print(table(result))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
