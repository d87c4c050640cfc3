"""Act: the skill's file list rendered from `kernel_templates/kernel/` and spliced into the target with libcst.

Everything is built in memory first; nothing is written until every file rendered and every edit found its place,
so a refusal leaves the target untouched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pipelines import render
from pipelines.changeset import Changeset
from pipelines.changeset import generated_changeset
from pipelines.kernel import exports
from pipelines.kernel.profile import ELEMENTWISE_BLOCK
from pipelines.kernel.profile import ELEMENTWISE_WARPS
from pipelines.kernel.spec import pascal
from pipelines.kernel.understand import Tier
from pipelines.kernel.understand import Understanding
from pipelines.outcome import PipelineError
from pipelines.target import Checkout

OPS_INIT = Path("src/liger_kernel/ops/__init__.py")
TRANSFORMERS_INIT = Path("src/liger_kernel/transformers/__init__.py")
FUNCTIONAL = Path("src/liger_kernel/transformers/functional.py")


@dataclass(frozen=True)
class KernelFiles:
    ops: Path
    module: Path
    test: Path
    benchmark: Path

    @classmethod
    def of(cls, name: str) -> KernelFiles:
        return cls(
            Path(f"src/liger_kernel/ops/{name}.py"),
            Path(f"src/liger_kernel/transformers/{name}.py"),
            Path(f"test/transformers/test_{name}.py"),
            Path(f"benchmark/scripts/benchmark_{name}.py"),
        )


def check_no_clash(checkout: Checkout, name: str) -> None:
    """A kernel name must be new: no file of that name, no class or function spelled from it."""
    files = KernelFiles.of(name)
    existing = [str(p) for p in (files.ops, files.module, files.test, files.benchmark) if checkout.path(p).exists()]
    identifiers = [f"Liger{pascal(name)}Function", f"Liger{pascal(name)}", f"liger_{name}"]
    for path in (OPS_INIT, TRANSFORMERS_INIT, FUNCTIONAL):
        text = checkout.path(path).read_text()
        existing += [f"{ident} in {path}" for ident in identifiers if re.search(rf"\b{ident}\b", text)]
    if existing:
        raise PipelineError(
            f"a kernel named {name!r} exists already in {checkout.root}: {', '.join(sorted(set(existing)))}",
            hint="choose another name with --name (the existing kernel is left as it is)",
        )


def context(u: Understanding) -> dict:
    weights = [w.name for w in u.weights]
    grads = [w for w in weights if f"d{w}" in u.backward.col_sums]
    stored = u.backward.scalar_stores | u.backward.vector_stores
    scalar_grads = [w for w in weights if f"d{w}" in stored]
    runtime = [p for p in u.reference.float_params if p.name in u.runtime_floats]
    tier2 = u.tier == Tier.ROWWISE
    ref = u.reference
    input_grads = [i for i in u.inputs if i.grad_arg in u.backward.stores]
    cached = [f"{var}_rows" for var in u.backward.cached]  # fp32 row statistics, saved for the backward
    # columns are independent in a backward that reduces nothing along a row: its grid may split them
    backward = u.backward
    column_split = (
        tier2 and bool(grads or backward.totals) and not (backward.row_reductions or backward.uses_n_cols or cached)
    )
    inputs = [i.arg for i in u.inputs]
    fixed = u.dropin.functional.fixed if u.dropin and u.dropin.functional else []
    return {
        "name": u.spec.name,
        "pascal": pascal(u.spec.name),
        "spec": u.spec.text,
        "source": ref.source_note,
        "forward": u.forward,
        "backward": u.backward,
        "weights": weights,
        "weight_specs": u.weights,
        "learnable": [w.name for w in u.weights if w.learnable],
        "grads": grads,
        "scalar_grads": scalar_grads,
        "scalar_weights": [w.name for w in u.weights if w.scalar],
        "all_grads": grads + scalar_grads,
        "floats": u.runtime_floats,
        "float_params": ref.float_params,
        "runtime_floats": u.runtime_floats,
        "runtime_float_params": runtime,
        "inputs": u.inputs,
        "outputs": u.outputs,
        "first": u.inputs[0],
        "input_args": ", ".join(inputs),
        "output_args": ", ".join(o.arg for o in u.outputs),
        "grad_output_args": ", ".join(o.grad_arg for o in u.outputs),
        "input_grads": input_grads,
        "input_grad_args": ", ".join(i.grad_arg for i in input_grads),
        # a new tensor object over each buffer: autograd can adopt it as the input's .grad instead of copying it
        "input_grad_returns": ", ".join(f"{i.grad_arg}.detach()" if i in input_grads else "None" for i in u.inputs),
        "grad_buffers": _grad_buffers(input_grads, u.outputs),
        "reused_phrase": _reused_phrase(input_grads, u.outputs),
        "forward_row_views": _row_views(inputs, inputs),
        "backward_row_views": _row_views(
            [f"{i.grad_arg}_rows" for i in input_grads] + [o.grad_arg for o in u.outputs] + inputs,
            [i.grad_arg for i in input_grads] + [o.grad_arg for o in u.outputs] + inputs,
        ),
        "output_views": ", ".join(f"{o.arg}.view(*shape)" for o in u.outputs),
        "float32_outputs": {o.arg for o, d in zip(u.outputs, u.output_dtypes, strict=True) if d == "float32"},
        "block_size": ELEMENTWISE_BLOCK,
        "num_warps": ELEMENTWISE_WARPS,
        "saved_unpack": _saved_unpack([*inputs, *weights, *cached]),
        "saved_args": ", ".join([*inputs, *weights, *cached]),
        "cached_rows": cached,
        "column_split": column_split,
        "backward_results": ", ".join([*(i.grad_arg for i in u.inputs), *[f"d{w}" for w in weights]]),
        "module_inputs": u.reference.inputs,
        "dropin": u.dropin,
        "function_fixed": fixed,
        "function_fixed_text": ", ".join(f"{n}={d}" for n, d in fixed).replace('"', "'"),
        "ctor_signature": u.dropin.signature()
        if u.dropin
        else _ctor_signature(ref, sorted({w.optional for w in u.weights if w.optional})),
        "reference_class_source": ref.source_note,
        "forward_fn_arg": f", forward_{u.spec.name}" if len(u.inputs) + len(u.outputs) > 2 else "",
        "needs_hidden": ref.has_weights,
        "first_column": next((w.name for w in u.weights if not w.scalar and not w.optional), ""),
        "optional_weights": [w for w in u.weights if w.optional],
        "optional_flags": sorted({w.optional for w in u.weights if w.optional}),
        "state_keys": {w.state_key: w.name for w in u.weights},
        "reference_imports": ref.imports,
        # a test module of the target may switch torch.use_deterministic_algorithms on when imported (Liger's
        # test_rms_norm.py does); then every torch.empty fills its memory, which the benchmark must not time
        "reference_from_tests": any(line.startswith("from test.") for line in ref.imports),
        "reference_code": ref.code.rstrip() + "\n",
        "reference_class": ref.class_name,
        "fp32_tol": ("1e-4", "1e-5") if tier2 else ("1e-5", "1e-5"),
        "bf16_tol": ("2e-1", "2e-2") if tier2 else ("1e-1", "5e-2"),
    }


def _saved_unpack(saved: list[str]) -> str:
    return ", ".join(saved) if len(saved) > 1 else f"({saved[0]},)"


def _grad_buffers(input_grads: list, outputs: list) -> dict[str, str]:
    """The k-th input gradient may be written into the k-th incoming gradient's buffer (same shape, one each)."""
    return {i.grad_arg: (outputs[k].grad_arg if k < len(outputs) else "") for k, i in enumerate(input_grads)}


def _ctor_signature(ref, flags: list[str]) -> str:
    floats = [f"{p.name}={p.default}" for p in ref.float_params]
    switches = [f"{f}=True" for f in flags]
    return ", ".join((["hidden_size"] if ref.has_weights else []) + switches + floats + ["in_place=True"])


def _row_views(names: list[str], tensors: list[str]) -> str:
    """`a, b = a.view(-1, n_cols), b.view(-1, n_cols)`: the row-wise functions work on 2-D views."""
    return f"{', '.join(names)} = {', '.join(f'{t}.view(-1, n_cols)' for t in tensors)}"


def _reused_phrase(input_grads: list, outputs: list) -> str:
    pairs = [(i.grad_arg, o.grad_arg) for i, o in zip(input_grads, outputs, strict=False)]
    return " and ".join(f"{g} into {d}'s storage" for g, d in pairs)


def render_files(u: Understanding) -> dict[str, str]:
    """New files, by template: the ops kernel, the module, the test, the benchmark."""
    ctx = context(u)
    files = KernelFiles.of(u.spec.name)
    ops_template = "kernel/ops_elementwise.py.j2" if u.tier == Tier.ELEMENTWISE else "kernel/ops_rowwise.py.j2"
    return {
        str(files.ops): render.render(ops_template, **ctx),
        str(files.module): render.render("kernel/module.py.j2", **ctx),
        str(files.test): render.render("kernel/unit_test.py.j2", **ctx),
        str(files.benchmark): render.render("kernel/benchmark.py.j2", **ctx),
    }


def _export_lines(ctx: dict) -> list[str]:
    return [line for line in render.render("kernel/exports.py.j2", **ctx).splitlines() if line.startswith("from ")]


def edit_existing(checkout: Checkout, u: Understanding) -> dict[str, str]:
    ctx = context(u)
    ops_import, module_import, functional_import = _export_lines(ctx)
    name, cls = ctx["name"], ctx["pascal"]
    try:
        ops_init = exports.insert_statement(
            checkout.path(OPS_INIT).read_text(),
            exports.import_key("liger_kernel.ops."),
            f"liger_kernel.ops.{name}.Liger{cls}Function",
            ops_import,
        )
        tr_init = checkout.path(TRANSFORMERS_INIT).read_text()
        tr_init = exports.insert_statement(
            tr_init,
            exports.import_key("liger_kernel.transformers."),
            f"liger_kernel.transformers.{name}.Liger{cls}",
            module_import,
        )
        tr_init = exports.insert_all_entry(tr_init, f"Liger{cls}")
        functional = checkout.path(FUNCTIONAL).read_text()
        functional = exports.insert_statement(
            functional,
            exports.import_key("liger_kernel.ops"),
            f"liger_kernel.ops.Liger{cls}Function",
            functional_import,
        )
        function = render.render("kernel/functional_fn.py.j2", **ctx)
        functional = exports.insert_statement(functional, exports.function_key("liger_"), f"liger_{name}", function)
    except (exports.ExportError, FileNotFoundError) as exc:
        raise PipelineError(
            f"cannot place the {name} exports in {checkout.root}: {exc}",
            hint="the target's files differ from what the kernel pipeline expects (a liger-kernel 0.8.x checkout?)",
        ) from exc
    return {str(OPS_INIT): ops_init, str(TRANSFORMERS_INIT): tr_init, str(FUNCTIONAL): functional}


def build_changeset(checkout: Checkout, u: Understanding) -> Changeset:
    if u.tier == Tier.COMPLEX:
        raise PipelineError(f"{u.spec.text}: {u.refusal}", hint="the default engine refuses tier-3 ops")
    check_no_clash(checkout, u.spec.name)
    return generated_changeset(render_files(u), edit_existing(checkout, u))
