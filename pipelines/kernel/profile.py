"""The kernel profile, in the fields of the liger-kernel-dev skill's kernel-profile-format.md.

Every field is derived from the understanding (the traced graph and the reference), never typed per op.
`to_json()` is a stable interface: change it additively.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from dataclasses import dataclass

from pipelines.kernel.lowering import PRECISION_SENSITIVE
from pipelines.kernel.spec import pascal
from pipelines.kernel.understand import TIER_NAMES
from pipelines.kernel.understand import Tier
from pipelines.kernel.understand import Understanding

ELEMENTWISE_BLOCK = 2048  # elements per program of the flat grid: best fwd and bwd of the H200 sweep (NOTES.md)
ELEMENTWISE_WARPS = 8


@dataclass(frozen=True)
class KernelProfile:
    operation_name: str
    function_class_name: str
    module_class_name: str
    functional_name: str
    tier: int
    tier_description: str
    closest_existing_kernel: str
    forward_inputs: list[dict]
    forward_outputs: list[dict]
    forward_computation: str
    precision_sensitive_ops: list[str]
    backward_saved_tensors: list[str]
    backward_recompute: str
    gradient_formulas: dict[str, str]
    grid_dimensions: str
    grid_description: str
    block_size_source: str
    needs_sm_parallelism: bool
    module_init_params: list[dict]
    learnable_params: list[dict]
    benchmark_variable: str
    benchmark_x_label: str
    benchmark_x_values_suggestion: list[int]
    benchmark_providers: list[str]
    benchmark_fixed_config: dict
    source: str
    refusal: str = ""

    def to_json(self) -> dict:
        return asdict(self)

    def to_markdown(self) -> str:
        rows = ["| field | value |", "|---|---|"]
        for key, value in asdict(self).items():
            shown = (json.dumps(value) if not isinstance(value, str) else value).replace("|", "\\|")
            rows.append(f"| {key} | {shown} |")
        return "\n".join(rows)


def _formula(body, output: str) -> str:
    if body is None:
        return ""
    lines = [f"{s.var} = {s.expr}" for s in body.stmts]
    if output in body.scalar_stores:
        sums = [f"{t} = sum over all elements of {src}" for t, src in body.totals.items()]
        after = [f"{s.var} = {s.expr}" for s in body.epilogue]
        return "; ".join(lines + sums + after + [f"{output} = {body.scalar_stores[output]}"])
    var = body.stores.get(output) or body.col_sums.get(output, "")
    tail = f"{output} = {var}" if output in body.stores else f"{output} = sum over rows of {var}"
    return "; ".join(lines + [tail])


def build(u: Understanding) -> KernelProfile:
    name = u.spec.name
    weights = [w.name for w in u.weights]
    columns = [w.name for w in u.weights if not w.scalar]
    elementwise = u.tier == Tier.ELEMENTWISE
    ops = sorted(set().union(*(b.ops for b in (u.forward, u.backward) if b)))
    sensitive = sorted({op for op in ops if op.split()[-1] in PRECISION_SENSITIVE})
    learnable = [w.name for w in u.weights if w.learnable]
    stored = u.backward.stores if u.backward else {}  # a tier-3 op has no backward body
    grads = {i.grad_arg: _formula(u.backward, i.grad_arg) for i in u.inputs if i.grad_arg in stored}
    grads |= {f"d{w}": _formula(u.backward, f"d{w}") for w in learnable}
    floats = [{"name": p.name, "type": "float", "default": p.default} for p in u.reference.float_params]
    return KernelProfile(
        operation_name=name,
        function_class_name=f"Liger{pascal(name)}Function",
        module_class_name=f"Liger{pascal(name)}",
        functional_name=f"liger_{name}",
        tier=u.tier,
        tier_description=TIER_NAMES[u.tier],
        closest_existing_kernel="relu_squared (flat grid variant)" if elementwise else "rms_norm",
        forward_inputs=[{"name": i.arg, "shape": "(..., H)", "dtype": "input dtype"} for i in u.inputs]
        + [{"name": w.name, "shape": str(w.shape) if w.scalar else "(H,)", "dtype": "input dtype"} for w in u.weights],
        forward_outputs=[
            {"name": o.arg, "shape": "(..., H)", "dtype": "float32" if dtype == "float32" else "same as input"}
            for o, dtype in zip(u.outputs, u.output_dtypes, strict=True)
        ],
        forward_computation=" | ".join(_formula(u.forward, o.arg) for o in u.outputs),
        precision_sensitive_ops=sensitive,
        backward_saved_tensors=[*(i.arg for i in u.inputs), *weights],
        backward_recompute=f"every forward intermediate is recomputed from {', '.join(i.arg for i in u.inputs)} in the "
        "backward kernel" + ("" if elementwise else " (row statistics: one more reduction over the row in registers)"),
        gradient_formulas=grads,
        grid_dimensions="1D",
        grid_description="flat: one program per BLOCK_SIZE elements of the flattened tensor"
        if elementwise
        else "forward: one program per row; backward: "
        + (
            "min(SM count, rows) programs, each looping over its rows and accumulating dW"
            if columns
            else "one program per row"
        ),
        block_size_source=f"custom: BLOCK_SIZE={ELEMENTWISE_BLOCK}, num_warps={ELEMENTWISE_WARPS} (bandwidth-bound flat grid)"
        if elementwise
        else "calculate_settings(n_cols)",
        needs_sm_parallelism=bool(columns),
        module_init_params=([{"name": "hidden_size", "type": "int"}] if u.reference.has_weights else [])
        + floats
        + [{"name": "in_place", "type": "bool", "default": True}],
        learnable_params=[
            {"name": w.name, "shape": str(w.shape) if w.scalar else "(hidden_size,)", "init": w.init}
            for w in u.weights
            if w.learnable
        ],
        benchmark_variable="BT",
        benchmark_x_label="total tokens",
        benchmark_x_values_suggestion=[1024, 2048, 4096, 8192, 16384],
        benchmark_providers=["liger", "torch", "torch_compile"],
        benchmark_fixed_config={"hidden_size": "model config", "dtype": "torch.bfloat16"},
        source=u.reference.source_note,
        refusal=u.refusal,
    )
