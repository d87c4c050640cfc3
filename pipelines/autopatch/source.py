"""AST readers of HuggingFace source: find classes, methods and `self.x = Y(...)` assignments, cite their lines.

Nothing here imports the modeling module: the file is read and parsed. Every fact handed out can be turned
into an `Evidence` (file relative to site-packages, 1-based inclusive lines, the exact source text).
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from functools import cache
from functools import cached_property
from pathlib import Path

from pipelines.autopatch.profile import Evidence
from pipelines.outcome import PipelineError

MAX_SNIPPET_LINES = 12


@cache
def site_packages() -> Path:
    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        raise PipelineError("transformers is not installed", hint="pip install transformers")
    return Path(spec.origin).resolve().parent.parent


@dataclass(frozen=True)
class Assignment:
    """`self.<attr> = <value>` inside a method; `classes` are the names it calls (both arms of an if)."""

    attr: str
    node: ast.stmt
    classes: tuple[str, ...]


class SourceFile:
    def __init__(self, path: Path):
        self.path = path
        self.text = path.read_text()
        self.lines = self.text.splitlines()
        self.tree = ast.parse(self.text, filename=str(path))

    @cached_property
    def relative(self) -> str:
        return self.path.relative_to(site_packages()).as_posix()

    @cached_property
    def classes(self) -> dict[str, ast.ClassDef]:
        """Top-level classes, and those defined under a top-level `if` (xLSTM defines its blocks in both arms of
        `if is_xlstm_available():`; the last arm, the file's own implementation, wins)."""
        nested: dict[str, ast.ClassDef] = {}
        for node in self.tree.body:
            if isinstance(node, ast.If):
                for inner in [*node.body, *node.orelse]:
                    if isinstance(inner, ast.ClassDef):
                        nested[inner.name] = inner
        return {**nested, **{n.name: n for n in self.tree.body if isinstance(n, ast.ClassDef)}}

    @cached_property
    def functions(self) -> dict[str, ast.FunctionDef]:
        return {n.name: n for n in self.tree.body if isinstance(n, ast.FunctionDef)}

    # -- evidence -----------------------------------------------------------------------------------------

    def evidence(self, node: ast.AST, probe: dict | None = None, max_lines: int = MAX_SNIPPET_LINES) -> Evidence:
        first = node.lineno
        last = min(node.end_lineno or first, first + max_lines - 1)
        return self.span(first, last, probe)

    def span(self, first: int, last: int, probe: dict | None = None) -> Evidence:
        snippet = "\n".join(self.lines[first - 1 : last])
        return Evidence(self.relative, (first, last), snippet, probe)

    # -- classes ------------------------------------------------------------------------------------------

    def bases(self, class_name: str) -> list[str]:
        node = self.classes.get(class_name)
        return [dotted_name(b) for b in node.bases] if node else []

    def lineage(self, class_name: str) -> list[str]:
        """The class and its bases, followed inside this file, nearest first."""
        seen: list[str] = []
        pending = [class_name]
        while pending:
            name = pending.pop(0)
            if name in seen:
                continue
            seen.append(name)
            pending += [b.rsplit(".", 1)[-1] for b in self.bases(name) if b.rsplit(".", 1)[-1] in self.classes]
        return seen

    def external_bases(self, class_name: str) -> list[str]:
        return [
            b for name in self.lineage(class_name) for b in self.bases(name) if b.split(".")[-1] not in self.classes
        ]

    def method(self, class_name: str, name: str) -> ast.FunctionDef | None:
        for owner in self.lineage(class_name):
            for node in self.classes[owner].body if owner in self.classes else []:
                if isinstance(node, ast.FunctionDef) and node.name == name:
                    return node
        return None

    def class_attribute(self, class_name: str, name: str) -> ast.Assign | None:
        for owner in self.lineage(class_name):
            for node in self.classes[owner].body if owner in self.classes else []:
                if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
                    return node
        return None

    def self_assignments(self, class_name: str, method: str = "__init__") -> list[Assignment]:
        func = self.method(class_name, method)
        if func is None:
            return []
        found: list[Assignment] = []
        for node in ast.walk(func):
            if not isinstance(node, ast.Assign | ast.AnnAssign):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and getattr(target.value, "id", None) == "self":
                    found.append(Assignment(target.attr, node, tuple(called_names(node.value))))
        return sorted(found, key=lambda a: a.node.lineno)

    def assignment(self, class_name: str, attr: str) -> list[Assignment]:
        return [a for a in self.self_assignments(class_name) if a.attr == attr]


def dotted_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted_name(node.value)}.{node.attr}"
    if isinstance(node, ast.Subscript):
        return dotted_name(node.value)
    return ""


def called_names(node: ast.AST | None) -> list[str]:
    """Names of everything called in an expression, outermost first (`nn.ModuleList([L(c) ...])` -> both)."""
    if node is None:
        return []
    names = [dotted_name(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)]
    return [n for n in names if n]


def parameters(func: ast.FunctionDef) -> tuple[str, ...]:
    args = func.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    if args.vararg:
        names.append("*" + args.vararg.arg)
    if args.kwarg:
        names.append("**" + args.kwarg.arg)
    return tuple(n for n in names if n != "self")


def statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of a block in source order, descending into if/with/for/try blocks (not nested defs)."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                out += statements(inner)
    return out


def modeling_path(module_name: str, class_name: str) -> Path:
    """transformers/models/<m>/modeling_<m>.py, or the sibling modeling file that defines `class_name`."""
    folder = site_packages() / "transformers" / "models" / module_name
    preferred = folder / f"modeling_{module_name}.py"
    candidates = [preferred] + sorted(p for p in folder.glob("modeling_*.py") if p != preferred)
    needle = f"class {class_name}("
    for path in candidates:
        if path.is_file() and needle in path.read_text():
            return path
    if folder.is_dir() and not any(folder.glob("modeling_*.py")):
        # exaone, internlm3: a config of its own, the causal LM class of another model (LlamaForCausalLM)
        raise PipelineError(
            f"{module_name} has no modeling file of its own: transformers runs it with {class_name}, another "
            f"model's class, so that model's Liger patch (if any) is what applies to it",
            hint=f"patch the model whose modeling file defines {class_name}",
        )
    raise PipelineError(f"no modeling file under {folder} defines {class_name}", hint="is transformers installed?")


def class_home(module_name: str, class_name: str) -> str | None:
    """The models/ folder whose modeling file defines `class_name`, where `module_name`'s own folder has no modeling
    file (exaone's config, built by transformers as LlamaForCausalLM: "llama"); None for a model with its own."""
    folder = site_packages() / "transformers" / "models" / module_name
    if not folder.is_dir() or any(folder.glob("modeling_*.py")):
        return None
    import transformers

    defined_in = getattr(transformers, class_name).__module__  # what transformers really builds, not a name match
    package, _, modeling = defined_in.removeprefix("transformers.models.").partition(".")
    return package if modeling.startswith("modeling_") and package != module_name else None


def configuration_path(module_name: str, config_class: str) -> Path | None:
    folder = site_packages() / "transformers" / "models" / module_name
    for path in sorted(folder.glob("configuration_*.py")):
        if f"class {config_class}(" in path.read_text():
            return path
    return None


@cache
def load(path: Path) -> SourceFile:
    return SourceFile(path)


def modular_parents(modeling: Path, classes: tuple[str, ...]) -> tuple[str, ...]:
    """The models whose classes `classes` (decoder layer, base model, causal LM: in that order) subclass in
    `modular_<m>.py`, the file transformers generates the modeling file from (GraniteSWADecoderLayer(
    GraniteDecoderLayer): granite). Only the classes' bases count: a modular file imports helpers from many models."""
    modular = modeling.with_name(modeling.name.replace("modeling_", "modular_", 1))
    if not modular.is_file():
        return ()
    tree = ast.parse(modular.read_text())
    home = {
        alias.asname or alias.name: node.module.split(".", 1)[0]
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.level == 2 and node.module and "." in node.module
        for alias in node.names
    }
    bases = {node.name: node.bases for node in tree.body if isinstance(node, ast.ClassDef)}
    parents: list[str] = []
    for name in classes:
        for base in bases.get(name, []):
            folder = home.get(base.id) if isinstance(base, ast.Name) else None
            if folder and folder not in parents:
                parents.append(folder)
    return tuple(parents)
