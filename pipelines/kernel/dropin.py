"""Drop-in signatures: when the reference is one of the target's own (a class in its `test/` files) and that test
file imports the Liger module it tests, the generated module takes that module's constructor and call signature, so
the target's own unit test for the op can run against the generated kernel by swapping one import.

Read from source (ast), never by importing the target: the Liger class is found in the test file's
`from liger_kernel.transformers.X import LigerY` lines, and picked by its forward taking as many tensors as the
reference's. Each constructor parameter is then the size (hidden_size), a runtime float of the reference (eps), the
generated module's own `in_place`, or a parameter the kernel does not vary (offset, casting_mode): accepted at the
Liger default only, since the target's test pairs the reference with those values. Where the target's functional
API has the function that applies the same autograd Function (`liger_fused_add_rms_norm(X, R, W, eps, offset=0.0,
casting_mode="llama", in_place=True)`), the generated functional and Function take its arguments too, in its order.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from dataclasses import replace
from pathlib import Path

from pipelines.kernel.reference import ReferenceCode
from pipelines.kernel.spec import Spec
from pipelines.kernel.spec import SpecKind
from pipelines.kernel.spec import snake


@dataclass(frozen=True)
class FunctionalDropIn:
    name: str  # liger_fused_add_rms_norm
    params: list[tuple[str, str]]  # its parameters: (name, default as source, "" if none)
    fixed: list[tuple[str, str]]  # the arguments after the runtime floats that the kernel does not vary

    def signature(self) -> str:
        return ", ".join(name if not default else f"{name}={default}" for name, default in self.params)

    def call(self) -> str:
        return ", ".join(name for name, _ in self.params)


@dataclass(frozen=True)
class DropIn:
    liger_class: str  # liger_kernel.transformers.fused_add_rms_norm.LigerFusedAddRMSNorm
    params: list[tuple[str, str]]  # the constructor's parameters after self: (name, default as source, "" if none)
    fixed: list[tuple[str, str]]  # the parameters the kernel computes only at their default: (name, default)
    forward_inputs: list[str]  # the forward's tensor arguments (hidden_states, residual)
    functional: FunctionalDropIn | None = None

    def signature(self) -> str:
        return ", ".join(name if not default else f"{name}={default}" for name, default in self.params)


def find(
    spec: Spec, ref: ReferenceCode, n_weights: int, runtime_floats: list[str], flags: list[str] = ()
) -> DropIn | None:
    """The Liger module the reference's own test file tests, if its constructor maps onto the generated module's.
    A file outside the target that imports a Liger module (a reference Liger's test writes inline, spelled out:
    `torch.nn.LayerNorm(hidden_size, eps=1e-6)` beside `from liger_kernel.transformers.layer_norm import
    LigerLayerNorm`) stands for that module the same way."""
    if ref.repo is None or spec.kind not in (SpecKind.REPO, SpecKind.FILE):
        return None
    if spec.kind == SpecKind.REPO and "test" not in spec.path.relative_to(ref.repo).parts[:1]:
        return None
    tree = ast.parse(spec.path.read_text())
    for module, name in _liger_module_imports(tree):
        source = ref.repo / "src" / Path(*module.split(".")).with_suffix(".py")
        cls = _class(source, name)
        if cls is None:
            continue
        found = _mapped(f"{module}.{name}", cls, ref, set(flags))
        if found is not None:
            functional = ref.repo / "src/liger_kernel/transformers/functional.py"
            function = _applied_function(cls)
            arity = len(ref.inputs) + n_weights + len(runtime_floats)
            # a module that dispatches among backends (LigerLayerNorm) applies no Function itself: its functional
            # is then the one named after it (liger_layer_norm), whichever Function that applies
            named = "liger_" + snake(name.removeprefix("Liger"))
            own = _functional(functional, function, arity, runtime_floats, None if function else named)
            found = replace(found, functional=own)
            return _paired(found, paired_values(tree, spec.qualname))
    return None


def paired_values(tree: ast.Module, reference: str) -> dict[str, str]:
    """The values the test file pairs with the reference in its parametrize lists: `("reference, offset,
    casting_mode", [(LlamaRMSNorm, 0.0, "llama"), (GemmaRMSNorm, 1.0, "gemma"), ...])` gives GemmaRMSNorm
    {offset: 1.0, casting_mode: "gemma"}: what the kernel generated from it computes, which the target's module
    spells with those arguments. Values as source; a name paired with two values is left out."""
    found: dict[str, set[str]] = {}
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and ast.unparse(call.func).endswith("parametrize") and len(call.args) >= 2):
            continue
        names, rows = call.args[0], call.args[1]
        if not (isinstance(names, ast.Constant) and isinstance(names.value, str) and isinstance(rows, ast.List)):
            continue
        keys = [n.strip() for n in names.value.split(",")]
        for row in rows.elts:
            if isinstance(row, ast.Call) and ast.unparse(row.func).endswith("param"):
                values = row.args
            elif isinstance(row, ast.Tuple):
                values = row.elts
            else:
                continue
            if len(values) != len(keys) or not any(isinstance(v, ast.Name) and v.id == reference for v in values):
                continue
            for key, value in zip(keys, values, strict=True):
                if not (isinstance(value, ast.Name) and value.id == reference):
                    found.setdefault(key, set()).add(ast.unparse(value))
    return {key: next(iter(values)) for key, values in found.items() if len(values) == 1}


def _paired(found: DropIn, paired: dict[str, str]) -> DropIn:
    """The parameters the kernel does not vary take the values the target's test pairs with the reference."""

    def pick(pairs: list[tuple[str, str]], fixed: set[str]) -> list[tuple[str, str]]:
        return [(n, paired.get(n, d) if n in fixed else d) for n, d in pairs]

    fixed = {n for n, _ in found.fixed}
    functional = found.functional
    if functional is not None:
        own = {n for n, _ in functional.fixed}
        functional = replace(functional, params=pick(functional.params, own), fixed=pick(functional.fixed, own))
    return replace(found, params=pick(found.params, fixed), fixed=pick(found.fixed, fixed), functional=functional)


def _applied_function(cls: ast.ClassDef) -> str | None:
    """The autograd Function the module's forward applies (`LigerFusedAddRMSNormFunction`)."""
    forward = _method(cls, "forward")
    calls = [n for n in ast.walk(forward) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    applied = [c.func.value.id for c in calls if c.func.attr == "apply" and isinstance(c.func.value, ast.Name)]
    return applied[0] if len(applied) == 1 else None


def _functional(
    source: Path, function: str | None, arity: int, runtime_floats: list[str] = (), named: str | None = None
) -> FunctionalDropIn | None:
    """The `liger_*` function whose body is `return {function}.apply(<its own parameters, in order>)`; its arguments
    after the generated Function's (inputs, weights, runtime floats) are ones the kernel does not vary, then in_place.
    A runtime float of the reference must be among the first ones by name (eps), never among the rest: Liger's
    liger_modulated_rms_norm(X, W, scale, shift, eps, offset, ...) orders its tensors otherwise, and its offset is
    a float the kernel takes at run time."""
    if not source.is_file():
        return None
    for fn in ast.parse(source.read_text()).body:
        if not (isinstance(fn, ast.FunctionDef) and len(fn.body) == 1 and isinstance(fn.body[0], ast.Return)):
            continue
        call = fn.body[0].value
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute) or call.func.attr != "apply":
            continue
        if (function and ast.unparse(call.func) != f"{function}.apply") or (named and fn.name != named):
            continue
        params = _all_params(fn)
        if [ast.unparse(a) for a in call.args] != [n for n, _ in params] or call.keywords:
            return None
        rest = params[arity:]
        if any(name not in [n for n, _ in params[:arity]] for name in runtime_floats):
            return None  # the function orders its arguments otherwise than the generated Function
        if rest and rest[-1][0] == "in_place":
            rest = rest[:-1]
        if len(params) < arity or any(not default for _, default in rest):
            return None
        return FunctionalDropIn(fn.name, params, rest)
    return None


def _all_params(fn: ast.FunctionDef) -> list[tuple[str, str]]:
    args = fn.args.args
    defaults = [""] * (len(args) - len(fn.args.defaults)) + [ast.unparse(d) for d in fn.args.defaults]
    return list(zip([a.arg for a in args], defaults, strict=True))


def _liger_module_imports(tree: ast.Module) -> list[tuple[str, str]]:
    return [
        (stmt.module, alias.name)
        for stmt in tree.body
        if isinstance(stmt, ast.ImportFrom) and (stmt.module or "").startswith("liger_kernel.transformers.")
        for alias in stmt.names
        if alias.name.startswith("Liger")
    ]


def _class(source: Path, name: str) -> ast.ClassDef | None:
    if not source.is_file():
        return None
    tree = ast.parse(source.read_text())
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _params(method: ast.FunctionDef) -> list[tuple[str, str]]:
    return _all_params(method)[1:]  # after self


def _mapped(path: str, cls: ast.ClassDef, ref: ReferenceCode, flags: set[str]) -> DropIn | None:
    init, forward = _method(cls, "__init__"), _method(cls, "forward")
    if init is None or forward is None:
        return None
    inputs = [name for name, default in _params(forward) if not default]
    if len(inputs) != len(ref.inputs) or init.args.vararg or init.args.kwonlyargs:
        return None
    params = _params(init)
    floats = {p.name for p in ref.float_params}
    names = {name for name, _ in params}
    if not floats | flags <= names or ref.has_weights != ("hidden_size" in names):
        return None  # a runtime float or switch of the reference that Liger's constructor does not take: no drop-in
    if any(not default and name != "hidden_size" for name, default in params):
        return None
    # a switch that leaves an optional parameter out (beta, elementwise_affine) is the generated module's own
    handled = floats | flags | {"in_place", "hidden_size"}
    fixed = [(name, default) for name, default in params if name not in handled]
    # in_place keeps the generated module's default: its rule (overwrite dY only where no one else reads it) is safe
    params = [(n, "True" if n == "in_place" else d) for n, d in params] + [("in_place", "True")] * (
        "in_place" not in names
    )
    return DropIn(path, params, fixed, inputs)
