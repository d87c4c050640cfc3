"""The profile as markdown, in the shape of LinkedIn's model-analyzer.md (Identity, Normalization, MLP, ...)."""

from __future__ import annotations

import json

from pipelines.autopatch.profile import Decision
from pipelines.autopatch.profile import Profile

SECTIONS = (
    ("Normalization", ("norm_type", "rms_casting_mode", "rms_offset", "rms_in_place", "norm_attrs")),
    ("MLP", ("mlp_kind",)),
    ("Structure", ("structure",)),
    ("Positional Embedding", ("rope",)),
    ("Output", ("output_class", "hidden_state_access", "logit_softcapping")),
    ("Vision", ("has_vision",)),
)
IDENTITY_FIELDS = (
    "model_type",
    "display_name",
    "causal_lm_class",
    "base_model_class",
    "base_model_prefix",
    "base_model_attr",
    "config_class",
    "decoder_layer_class",
    "modeling_module",
    "modeling_file",
    "norm_class",
    "mlp_class",
    "experts_class",
    "rotary_fn",
    "supported_by",
)


def _value(value) -> str:
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def _residuals(probe: dict) -> str:
    parts = []
    for name, score in probe.get("candidates", {}).items():
        if "n/a" in score:
            parts.append(f"{name}: n/a")
        else:
            parts.append(
                f"{name}: fp32 {score.get('fp32', float('nan')):.2g} / bf16 {score.get('bf16', float('nan')):.2g}"
            )
    return "; ".join(parts)


def _gradients(probe: dict) -> str:
    runs = [
        f"{run}: {g['differing']} of {g['of']} gradients moved (max relative {g['max_relative']:.2g})"
        for run, g in probe["gradients"].items()
    ]
    return "; ".join(runs)


def decision_lines(key: str, decision: Decision) -> list[str]:
    lines = [f"- {key}: **{_value(decision.value)}** ({decision.method.value}, {decision.status.value})"]
    if decision.reason:
        lines.append(f"  - {decision.reason}")
    for evidence in decision.evidence:
        first, last = evidence.lines
        where = f"{evidence.file}:{first}" + (f"-{last}" if last != first else "")
        lines.append(f"  - evidence: `{where}`")
        if evidence.probe and "gradients" in evidence.probe:
            lines.append(f"  - probe (in-place backward) {_gradients(evidence.probe)}")
        elif evidence.probe and "candidates" not in evidence.probe:
            lines.append(f"  - probe: {_value(evidence.probe)}")
        elif evidence.probe:
            module = f"{evidence.probe['module']}: " if "module" in evidence.probe else ""
            lines.append(f"  - probe {module}matched {evidence.probe.get('matched')}; {_residuals(evidence.probe)}")
    return lines


def render(profile: Profile) -> str:
    ident = profile.identity
    out = [f"# Model Profile: {ident.display_name}", "", "## Identity"]
    for name in IDENTITY_FIELDS:
        value = getattr(ident, name)
        if value is not None:
            out.append(f"- {name}: {value}")
    if ident.supported_by:
        out.append(f"- note: already supported by the target (`{ident.supported_by}`)")
    for title, keys in SECTIONS:
        out += ["", f"## {title}"]
        for key in keys:
            if key in profile.decisions:
                out += decision_lines(key, profile.decisions[key])
    if profile.checks:
        out += ["", "## Checks"]
        for key, check in profile.checks.items():
            out += decision_lines(key, check)
    out += ["", "## Forward Signature", ", ".join(ident.forward_params) or "(none)"]
    review = profile.needs_review()
    out += ["", "## Needs review"]
    if not review and not profile.failed_checks():
        out.append("Nothing: every decision is settled.")
    for key in review:
        out.append(f"- {key}: {profile.decisions[key].reason} (`--set {key}=...` settles it)")
    for key in profile.failed_checks():
        out.append(f"- {key}: {profile.checks[key].reason} (no patch can be generated; see Checks)")
    return "\n".join(out) + "\n"
