"""The chunked-loss profile: what understand found, each piece with its evidence. `to_json()` is a stable
interface: change it additively."""

from __future__ import annotations

import json
from dataclasses import asdict
from dataclasses import dataclass

from pipelines.chunked_loss.act import names
from pipelines.chunked_loss.reference import PAIRED
from pipelines.chunked_loss.understand import Understanding


@dataclass(frozen=True)
class ChunkedLossProfile:
    loss_name: str
    kind: str  # paired preference | unpaired preference
    base_class: str
    function_class_name: str
    module_class_name: str
    functional_name: str
    source: str
    per_chunk_loss: str  # the generated preference_loss_fn
    inputs: list[dict]  # name, role, default
    average_log_prob: bool
    compute_nll_loss: bool
    use_ref_model: bool
    normalisation: str
    outputs: list[str]
    decomposition: dict  # the probe: chunks, max abs diff per output, passed
    shape_static: dict  # boolean selections written as masks: applied, why (not), the check by running
    specialised: dict
    evidence: list[dict]

    def to_json(self) -> dict:
        return asdict(self)

    def to_markdown(self) -> str:
        rows = ["| field | value |", "|---|---|"]
        for key, value in asdict(self).items():
            if key in ("per_chunk_loss", "evidence"):
                continue
            shown = (json.dumps(value) if not isinstance(value, str) else value).replace("|", "\\|")
            rows.append(f"| {key} | {shown} |")
        evidence = ["| evidence | file | lines | snippet |", "|---|---|---|---|"]
        for ev in self.evidence:
            snippet = ev["snippet"].replace("|", "\\|")
            evidence.append(f"| {ev['what']} | {ev['file']} | {ev['lines'][0]}-{ev['lines'][1]} | `{snippet}` |")
        code = f"```python\n{self.per_chunk_loss}\n```"
        return "\n".join(rows) + "\n\n" + "\n".join(evidence) + "\n\nPer-chunk loss:\n\n" + code


def build(u: Understanding) -> ChunkedLossProfile:
    ref = u.reference
    paired = ref.kind == PAIRED
    n = names(u.spec.name)
    inputs = [{"name": "chosen_logps", "role": "policy log-probs (per sequence)", "default": None}]
    inputs += [{"name": "rejected_logps", "role": "policy log-probs (per sequence)", "default": None}]
    if ref.uses_ref:
        inputs += [
            {"name": r, "role": "reference-model log-probs", "default": None}
            for r in ("ref_chosen_logps", "ref_rejected_logps")
        ]
    inputs += [{"name": e, "role": "extra tensor input", "default": None} for e in ref.extra_tensors]
    inputs += [{"name": h.name, "role": "hyper-parameter", "default": h.default} for h in ref.hypers]
    return ChunkedLossProfile(
        loss_name=u.spec.name,
        kind=ref.kind,
        base_class="LigerFusedLinearPreferenceBase" if paired else "LigerFusedLinearUnpairedPreferenceBase",
        function_class_name=n["function_class"],
        module_class_name=n["module_class"],
        functional_name=n["functional_name"],
        source=ref.origin,
        per_chunk_loss=u.chunk_source,
        inputs=inputs,
        average_log_prob=ref.average_log_prob,
        compute_nll_loss=ref.compute_nll_loss,
        use_ref_model=ref.uses_ref,
        normalisation="losses.sum() / (full_target.shape[0] // 2) per chunk (pairs)"
        if paired
        else "losses.sum() / full_target.shape[0] per chunk (sequences)",
        outputs=u.outputs,
        decomposition=u.probe.to_json(),
        shape_static=u.masking.to_json(),
        specialised=dict(ref.specialised),
        evidence=[e.to_json() for e in ref.evidence],
    )
