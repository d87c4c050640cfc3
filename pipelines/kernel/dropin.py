"""Drop-in signatures: when the reference is one of the target's own (a class in its `test/` files) and that test
file imports the Liger module it tests, the generated module takes that module's constructor and call signature, so
the target's own unit test for the op can run against the generated kernel by swapping one import.

Read from source (ast), never by importing the target: the Liger class is found in the test file's
`from liger_kernel.transformers.X import LigerY` lines, and picked by its forward taking as many tensors as the
reference's. Each constructor parameter is then the size (hidden_size), a runtime float of the reference (eps), the
generated module's own `in_place`, or a parameter the kernel does not vary (offset, casting_mode): accepted at the
Liger default only, since the target's test pairs the reference with those values.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from pipelines.kernel.reference import ReferenceCode
from pipelines.kernel.spec import Spec
from pipelines.kernel.spec import SpecKind


@dataclass(frozen=True)
class DropIn:
    liger_class: str  # liger_kernel.transformers.fused_add_rms_norm.LigerFusedAddRMSNorm
    params: list[tuple[str, str]]  # the constructor's parameters after self: (name, default as source, "" if none)
    fixed: list[tuple[str, str]]  # the parameters the kernel computes only at their default: (name, default)
    forward_inputs: list[str]  # the forward's tensor arguments (hidden_states, residual)

    def signature(self) -> str:
        return ", ".join(name if not default else f"{name}={default}" for name, default in self.params)


def find(spec: Spec, ref: ReferenceCode) -> DropIn | None:
    """The Liger module the reference's own test file tests, if its constructor maps onto the generated module's."""
    if spec.kind != SpecKind.REPO or ref.repo is None or "test" not in spec.path.relative_to(ref.repo).parts[:1]:
        return None
    tree = ast.parse(spec.path.read_text())
    for module, name in _liger_module_imports(tree):
        source = ref.repo / "src" / Path(*module.split(".")).with_suffix(".py")
        cls = _class(source, name)
        if cls is None:
            continue
        found = _mapped(f"{module}.{name}", cls, ref)
        if found is not None:
            return found
    return None


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


def _params(fn: ast.FunctionDef) -> list[tuple[str, str]]:
    args = fn.args.args[1:]  # after self
    defaults = [""] * (len(args) - len(fn.args.defaults)) + [ast.unparse(d) for d in fn.args.defaults]
    return list(zip([a.arg for a in args], defaults, strict=True))


def _mapped(path: str, cls: ast.ClassDef, ref: ReferenceCode) -> DropIn | None:
    init, forward = _method(cls, "__init__"), _method(cls, "forward")
    if init is None or forward is None:
        return None
    inputs = [name for name, default in _params(forward) if not default]
    if len(inputs) != len(ref.inputs) or init.args.vararg or init.args.kwonlyargs:
        return None
    params = _params(init)
    floats = {p.name for p in ref.float_params}
    names = {name for name, _ in params}
    if not floats <= names or ref.has_weights != ("hidden_size" in names):
        return None  # a runtime float of the reference that Liger's constructor does not take: no drop-in
    if any(not default and name != "hidden_size" for name, default in params):
        return None
    fixed = [(name, default) for name, default in params if name not in floats | {"in_place", "hidden_size"}]
    # in_place keeps the generated module's default: its rule (overwrite dY only where no one else reads it) is safe
    params = [(n, "True" if n == "in_place" else d) for n, d in params] + [("in_place", "True")] * (
        "in_place" not in names
    )
    return DropIn(path, params, fixed, inputs)
