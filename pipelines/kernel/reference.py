"""The standalone PyTorch reference: one `Torch{Pascal}` nn.Module, written as source, that the trace runs and the
generated test and benchmark paste verbatim, so the kernel is checked against exactly what was traced.

Its constructor is the Liger module's: `(hidden_size, <float params>)` when the op has learnable weights, else
`(<float params>)`. Float parameters with defaults (eps, ...) become runtime kernel arguments. Its forward takes the
op's tensor inputs under the reference's own names (`forward(self, a, b)` for `silu(a) * b`): every argument without
a default is an input unless the code declares it an `nn.Parameter`.
"""

from __future__ import annotations

import ast
import contextlib
import sys
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

import torch

from pipelines.kernel.spec import Spec
from pipelines.kernel.spec import SpecKind
from pipelines.kernel.spec import pascal
from pipelines.outcome import PipelineError

SIZE_PARAMS = ("hidden_size", "dim", "normalized_shape", "d_model", "num_features", "features", "size", "n_embd")
ZERO_INIT_NAMES = ("bias", "b", "beta", "shift")


@dataclass(frozen=True)
class FloatParam:
    name: str
    default: float


@dataclass
class ReferenceCode:
    class_name: str  # Torch{Pascal}
    imports: list[str]  # import lines the code needs besides `import torch`
    code: str  # the class (and, for a copied file, the file's own definitions before it)
    float_params: list[FloatParam] = field(default_factory=list)
    has_weights: bool = False  # constructor takes hidden_size
    weights: list[tuple[str, str]] = field(default_factory=list)  # (parameter name, "ones" | "zeros"), if known
    source_note: str = ""  # where the op came from, for the profile
    repo: Path | None = None  # the target checkout, for imports of REPO specs
    inputs: list[str] = field(default_factory=lambda: ["x"])  # the forward's tensor arguments, in call order
    flags: list[str] = field(default_factory=list)  # boolean constructor switches defaulting to True (beta=True)
    forward_inherited: bool = False  # the class defines no forward: its inputs are read from the loaded class
    optional_inputs: list[str] = field(default_factory=list)  # forward arguments defaulting to None (a shift)

    def signature(self) -> str:
        params = (["hidden_size"] if self.has_weights else []) + [f"{p.name}={p.default!r}" for p in self.float_params]
        return ", ".join(params)


def build(spec: Spec, repo: Path) -> ReferenceCode:
    cls = f"Torch{pascal(spec.name)}"
    if spec.kind == SpecKind.ACTIVATION:
        code = (
            f"class {cls}(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            f'        self.act = ACT2FN["{spec.qualname}"]\n\n    def forward(self, x):\n        return self.act(x)\n'
        )
        return ReferenceCode(
            cls,
            ["from transformers.activations import ACT2FN"],
            code,
            source_note=f"transformers.activations.ACT2FN[{spec.qualname!r}]",
        )
    tree = ast.parse(spec.path.read_text())
    node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == spec.qualname)
    if spec.kind == SpecKind.REPO:
        imports, prelude = [f"from {spec.module_path} import {spec.qualname}"], ""
    else:
        imports, prelude = _copied_file(tree, spec.path)
    note = f"{spec.path.name}:{node.lineno}-{node.end_lineno} ({spec.qualname})"
    if isinstance(node, ast.ClassDef):
        ref = _class_wrapper(cls, node, imports, prelude)
    else:
        ref = _function_wrapper(cls, node, imports, prelude)
    ref.source_note = note
    # a file outside the target that imports from it (the Liger module it stands for) is loaded against it too
    imports_target = any(line.startswith("from liger_kernel") for line in imports)
    ref.repo = repo if spec.kind == SpecKind.REPO or imports_target else None
    return ref


def _copied_file(tree: ast.Module, path: Path) -> tuple[list[str], str]:
    """A FILE spec travels inside the test: its imports and top-level definitions (no `if __name__` block)."""
    source = path.read_text()
    imports, kept = [], []
    for stmt in tree.body:
        segment = ast.get_source_segment(source, stmt)
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            imports.extend(_single_imports(stmt))
        elif isinstance(stmt, (ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)):
            kept.append(segment)
    return [i for i in imports if i not in ("import torch",)], "\n\n\n".join(kept) + "\n\n\n"


def _single_imports(stmt: ast.stmt) -> list[str]:
    """The target's isort style: one name per import line."""
    if isinstance(stmt, ast.Import):
        return [f"import {a.name}" + (f" as {a.asname}" if a.asname else "") for a in stmt.names]
    module = "." * stmt.level + (stmt.module or "")
    return [f"from {module} import {a.name}" + (f" as {a.asname}" if a.asname else "") for a in stmt.names]


def _defaults(args: ast.arguments) -> list[tuple[str, object]]:
    positional = args.posonlyargs + args.args
    padded = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, padded, strict=True))
    pairs += list(zip(args.kwonlyargs, args.kw_defaults, strict=True))
    out = []
    for arg, default in pairs:
        value = ast.literal_eval(default) if default is not None and _is_literal(default) else _NO_DEFAULT
        out.append((arg.arg, value))
    return [p for p in out if p[0] not in ("self", "cls")]


class _NoDefault:
    def __repr__(self) -> str:
        return "<required>"


_NO_DEFAULT = _NoDefault()


def _is_literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True


def _float_params(params: list[tuple[str, object]]) -> list[FloatParam]:
    return [FloatParam(n, v) for n, v in params if isinstance(v, float)]


def _class_wrapper(cls: str, node: ast.ClassDef, imports: list[str], prelude: str) -> ReferenceCode:
    init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    params = _defaults(init.args) if init else []
    size = next((n for n, _ in params if n in SIZE_PARAMS), None)
    required = [n for n, v in params if v is _NO_DEFAULT and n != size]
    if required:
        raise PipelineError(
            f"{node.name}.__init__ needs {', '.join(required)}, which the kernel engine cannot choose",
            hint="give those parameters defaults, or wrap the op in a function with defaults",
        )
    floats = _float_params(params)
    # a boolean switch defaulting to True may leave a parameter out (DyT's beta, RMSNorm's elementwise_affine):
    # the wrapper passes it through, and understand decides what it does
    flags = [n for n, v in params if v is True]
    args = ([f"{size}=hidden_size"] if size else []) + [f"{n}={n}" for n in [*flags, *(p.name for p in floats)]]
    ctor = ", ".join(
        (["hidden_size"] if size else []) + [f"{n}=True" for n in flags] + [f"{p.name}={p.default!r}" for p in floats]
    )
    code = (
        f"{prelude}class {cls}({node.name}):\n"
        f"    def __init__(self{', ' if ctor else ''}{ctor}):\n"
        f"        super().__init__({', '.join(args)})\n"
    )
    inputs = _forward_inputs(node)
    return ReferenceCode(
        cls,
        imports,
        code,
        floats,
        has_weights=size is not None,
        inputs=inputs or ["x"],
        flags=flags,
        forward_inherited=inputs is None,
        optional_inputs=_forward_optional(node),
    )


def _forward_inputs(node: ast.ClassDef) -> list[str] | None:
    """The tensors a module's forward takes: its arguments without defaults (`hidden_states, residual`); None when
    the class inherits its forward (read from the loaded class: `inherited_inputs`)."""
    forward = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None:
        return None
    return [n for n, v in _defaults(forward.args) if v is _NO_DEFAULT] or ["x"]


def _forward_optional(node: ast.ClassDef) -> list[str]:
    """A module's forward arguments defaulting to None (ModulatedRMSNorm's `shift=None`): tensors it may be given,
    which the generated kernel leaves out; understand probes them for broadcasting."""
    forward = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    return [n for n, v in _defaults(forward.args) if v is None] if forward else []


def _function_wrapper(cls: str, node: ast.FunctionDef, imports: list[str], prelude: str) -> ReferenceCode:
    params = _defaults(node.args)
    if not params:
        raise PipelineError(f"{node.name} takes no arguments", hint="the op's first argument is the input tensor")
    keyword_only = [a.arg for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True) if d is None]
    if keyword_only:  # `mhc_sinkhorn_ref(logits, *, tmax: int, eps: float)`: settings, not tensors
        raise PipelineError(
            f"{node.name} needs {', '.join(keyword_only)} (keyword-only, no default), which the kernel engine "
            "cannot choose",
            hint="give those parameters defaults, or wrap the op in a function with defaults",
        )
    tensors = [n for n, v in params if v is _NO_DEFAULT]
    # an argument is a learnable weight only where the code says so: guessing made `silu(a) * b` a different op
    weight_names = [n for n in tensors[1:] if _declared_parameter(node.args, n)]
    inputs = [n for n in tensors if n not in weight_names]
    floats = _float_params(params[1:])
    weights = [(n, "zeros" if n in ZERO_INIT_NAMES else "ones") for n in weight_names]
    lines = [f"{prelude}class {cls}(torch.nn.Module):"]
    ctor = ", ".join((["hidden_size"] if weights else []) + [f"{p.name}={p.default!r}" for p in floats])
    lines.append(f"    def __init__(self{', ' if ctor else ''}{ctor}):")
    lines.append("        super().__init__()")
    for name, init in weights:
        lines.append(f"        self.{name} = torch.nn.Parameter(torch.{init}(hidden_size))")
    for p in floats:
        lines.append(f"        self.{p.name} = {p.name}")
    forward_args = ["x"] if len(inputs) == 1 else inputs  # one input keeps the name the engine always gave it
    passed = dict(zip(inputs, forward_args, strict=True)) | {n: f"self.{n}" for n in weight_names}
    call = ", ".join([passed[n] for n in tensors] + [f"{p.name}=self.{p.name}" for p in floats])
    lines += ["", f"    def forward(self, {', '.join(forward_args)}):", f"        return {node.name}({call})", ""]
    return ReferenceCode(
        cls, imports, "\n".join(lines), floats, has_weights=bool(weights), weights=weights, inputs=forward_args
    )


def inherited_inputs(cls: type) -> list[str]:
    """An inherited forward's tensor arguments (`torch.nn.KLDivLoss.forward(input, target)`), from its signature."""
    import inspect

    try:
        params = list(inspect.signature(cls.forward).parameters.values())[1:]
    except (TypeError, ValueError):
        return ["x"]
    required = [
        p.name for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return required or ["x"]


PARAMETER_ANNOTATIONS = ("torch.nn.Parameter", "nn.Parameter", "Parameter")


def _declared_parameter(args: ast.arguments, name: str) -> bool:
    """The user's code says an argument is a learnable weight (`weight: torch.nn.Parameter`); a name never does."""
    arg = next(a for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg == name)
    return arg.annotation is not None and ast.unparse(arg.annotation) in PARAMETER_ANNOTATIONS


@contextlib.contextmanager
def determinism_kept():
    """Undo what importing the target's test modules does to the process: Liger's test_rms_norm.py switches
    deterministic algorithms on, and in that mode every torch.empty fills its memory (a write any later
    measurement would pay for)."""
    state = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(state[0], warn_only=state[1])


@contextlib.contextmanager
def _target_on_path(repo: Path | None):
    """Imports from the target (its `test.*`, its `liger_kernel`) for the duration of the trace only."""
    if repo is None:
        yield
        return
    before = set(sys.modules)
    added = [str(repo), str(repo / "src")]
    sys.path[:0] = added
    try:
        with determinism_kept():
            yield
    finally:
        for entry in added:
            sys.path.remove(entry)
        for name in set(sys.modules) - before:
            if name.split(".")[0] in ("test", "liger_kernel"):
                del sys.modules[name]


def load_class(ref: ReferenceCode) -> type[torch.nn.Module]:
    """Execute the reference source as the generated test will: its imports, then its code."""
    namespace: dict = {"torch": torch, "__name__": f"liger_bot_reference_{ref.class_name}"}
    with _target_on_path(ref.repo):
        try:
            exec(compile("\n".join(ref.imports) + "\n" + ref.code, f"<reference {ref.class_name}>", "exec"), namespace)
        except Exception as exc:
            raise PipelineError(
                f"the reference for {ref.class_name} does not load: {type(exc).__name__}: {exc}",
                hint="the op's file must import cleanly with torch (and transformers) installed",
            ) from exc
    return namespace[ref.class_name]
