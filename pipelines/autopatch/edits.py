"""Source edits at exact places, found with `ast` and spliced by source span: never by line number.

Every insertion follows one placement rule, the skill's "alphabetical among similar entries": the new entry goes
before the first existing entry whose key sorts after it, else after the last one. In a sorted section that is the
alphabetical place; in a section that is not sorted (monkey_patch.py's functions, the README table) it is still a
deterministic place next to its alphabetical neighbours. `ruff format` runs afterwards, so blank lines between
top-level blocks need only be roughly right here.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass


class EditError(ValueError):
    """The anchor an edit needs is missing or the entry exists already: the target changed shape."""


@dataclass(frozen=True)
class Entry:
    key: str
    first: int  # 0-based index of the entry's first line (decorators and attached comments included)
    last: int  # 0-based index of its last line
    indent: str = ""


def placement(entries: list[Entry], key: str) -> tuple[Entry, bool]:
    """The entry to insert next to, and whether the new one goes before it (True) or after it (False)."""
    if not entries:
        raise EditError(f"no entries to place {key!r} among")
    if any(e.key == key for e in entries):
        raise EditError(f"{key!r} is already present")
    for entry in entries:
        if entry.key > key:
            return entry, True
    return entries[-1], False


def _lines(source: str) -> list[str]:
    return source.splitlines(keepends=True)


def _attached_comment_start(lines: list[str], first: int) -> int:
    """Comment lines directly above a statement belong to it."""
    while first > 0 and lines[first - 1].lstrip().startswith("#"):
        first -= 1
    return first


def _statement_entry(lines: list[str], node: ast.stmt, key: str) -> Entry:
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
    first = _attached_comment_start(lines, first)
    return Entry(key, first, node.end_lineno - 1, " " * node.col_offset)


def insert_statement(source: str, body: list[ast.stmt], key_of: Callable[[ast.stmt], str | None], key: str, block: str):
    """Insert `block` (a statement, or several) among the statements of `body` that `key_of` names."""
    lines = _lines(source)
    entries = [_statement_entry(lines, node, k) for node in body if (k := key_of(node)) is not None]
    anchor, before = placement(entries, key)
    text = _indent(block, anchor.indent)
    if before:
        lines.insert(anchor.first, text + "\n\n")
    else:
        lines.insert(anchor.last + 1, "\n\n" + text)
    return "".join(lines)


def insert_top_level(source: str, key_of: Callable[[ast.stmt], str | None], key: str, block: str) -> str:
    return insert_statement(source, ast.parse(source).body, key_of, key, block)


def ensure_top_level(source: str, key_of: Callable[[ast.stmt], str | None], key: str, block: str) -> str:
    """`insert_top_level` for declarations another entry may already make (an import, an availability check):
    when one keyed `key` exists, the source is left as it is."""
    if any(key_of(node) == key for node in ast.parse(source).body):
        return source
    return insert_top_level(source, key_of, key, block)


def insert_element(
    source: str, elements: list[ast.expr], key_of: Callable[[ast.expr], str | None], key: str, text: str
) -> str:
    """Insert `text` as one more element of a multi-line list/set/dict display (one element per line)."""
    lines = _lines(source)
    entries = [Entry(k, e.lineno - 1, e.end_lineno - 1, " " * e.col_offset) for e in elements if (k := key_of(e))]
    anchor, before = placement(entries, key)
    if any(e.first == anchor.first for e in entries if e is not anchor):
        raise EditError(f"elements share a line near {anchor.key!r}; cannot insert {key!r} by line")
    new_line = _indent(text, anchor.indent).rstrip("\n") + ",\n"
    if before:
        lines.insert(anchor.first, new_line)
        return "".join(lines)
    last = lines[anchor.last]
    if not last.rstrip().endswith(","):
        lines[anchor.last] = last.rstrip("\n").rstrip() + ",\n"
    lines.insert(anchor.last + 1, new_line)
    return "".join(lines)


def _indent(block: str, indent: str) -> str:
    text = block.strip("\n") + "\n"
    if not indent:
        return text
    return "".join(indent + line if line.strip() else line for line in text.splitlines(keepends=True))


# --- finders: the anchors the target's files are edited at ------------------------------------------------------


def string_value(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def defined_name(node: ast.stmt, prefix: str) -> str | None:
    """The name of a top-level function or class whose name starts with `prefix`."""
    if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name.startswith(prefix):
        return node.name
    return None


def imported_name(node: ast.stmt, module_prefix: str) -> str | None:
    """For `from <module> import name [as alias]` under `module_prefix`: the module and name, as the sort key."""
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(module_prefix):
        return f"{node.module}.{node.names[0].name}"
    return None


def assigned_flag(node: ast.stmt, suffix: str) -> str | None:
    """For `try: ... FLAG = True except ImportError: FLAG = False`: FLAG when it ends with `suffix`."""
    if not isinstance(node, ast.Try):
        return None
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
            if name.endswith(suffix):
                return name
    return None


def guarded_setup(node: ast.stmt) -> str | None:
    """For `if FLAG: MINI_MODEL_SETUPS["mini_x"] = ...`: "mini_x"."""
    if not isinstance(node, ast.If) or not node.body:
        return None
    stmt = node.body[0]
    if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Subscript):
        target = stmt.targets[0]
        if isinstance(target.value, ast.Name) and target.value.id == "MINI_MODEL_SETUPS":
            return string_value(target.slice)
    return None


@dataclass(frozen=True)
class MiniSetup:
    """One `MINI_MODEL_SETUPS` entry of a convergence file: the patch function it applies, its config's fields and
    those of them given as plain integers (the widths its tolerances were set at)."""

    patch_fn: str | None
    config_fields: frozenset[str]
    int_fields: tuple[tuple[str, int], ...] = ()


def mini_model_setups(tree: ast.AST) -> dict[str, MiniSetup]:
    """Every setup, by case name: `"mini_x": MiniModelConfig(...)` in the dict and `MINI_MODEL_SETUPS["mini_x"] = ...`."""
    pairs: list[tuple[ast.AST, ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            pairs += [(key, value) for key, value in zip(node.keys, node.values, strict=True) if key is not None]
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
            target = node.targets[0]
            if isinstance(target.value, ast.Name) and target.value.id == "MINI_MODEL_SETUPS":
                pairs.append((target.slice, node.value))
    return {
        name: _mini_setup(value)
        for key, value in pairs
        if (name := string_value(key)) and isinstance(value, ast.Call) and _called_name(value) == "MiniModelConfig"
    }


def _mini_setup(call: ast.Call) -> MiniSetup:
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    patch = keywords.get("liger_kernel_patch_func")
    if isinstance(patch, ast.Call) and patch.args:  # functools.partial(apply_liger_kernel_to_x, ...)
        patch = patch.args[0]
    config = keywords.get("mini_model_config")
    keywords = [k for k in config.keywords if k.arg] if isinstance(config, ast.Call) else []
    ints = tuple((k.arg, k.value.value) for k in keywords if _is_int(k.value))
    # a composite config's sub-configs (a multimodal file's `text_config=Qwen3VLMoeTextConfig(num_experts=...)`)
    # name fields too: a routed text model is routed wherever its config sits
    nested = [k.arg for sub in keywords if _is_config_call(sub.value) for k in sub.value.keywords if k.arg]
    fields = frozenset(k.arg for k in keywords) | frozenset(nested)
    return MiniSetup(patch.id if isinstance(patch, ast.Name) else None, fields, ints)


def _is_config_call(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and (_called_name(node) or "").endswith("Config")


def _is_int(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def find_assignment(tree: ast.AST, name: str) -> ast.Assign:
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node
    raise EditError(f"no assignment to {name}")


def find_function(tree: ast.AST, name: str) -> ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise EditError(f"no function {name}")


def find_if_type_checking(tree: ast.Module) -> ast.If:
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return node
    raise EditError("no `if TYPE_CHECKING:` block")


def find_extend_list(tree: ast.AST, name: str) -> ast.List:
    """The list literal of `<name>.extend([...])`."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "extend"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == name
            and node.args
            and isinstance(node.args[0], ast.List)
        ):
            return node.args[0]
    raise EditError(f"no {name}.extend([...])")


def find_parametrize_list(function: ast.FunctionDef) -> ast.List:
    """The list of cases of `@pytest.mark.parametrize(names, [...])` on `function`."""
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == "pytest.mark.parametrize":
            cases = decorator.args[1]
            if isinstance(cases, ast.List):
                return cases
    raise EditError(f"{function.name} has no parametrize list")


def case_name(node: ast.expr) -> str | None:
    """The first argument of a pytest.param(...) or a plain tuple case."""
    if isinstance(node, ast.Call) and node.args:
        return string_value(node.args[0])
    if isinstance(node, ast.Tuple) and node.elts:
        return string_value(node.elts[0])
    return None


def insert_markdown_row(source: str, heading: str, key_of: Callable[[str], str | None], key: str, row: str) -> str:
    """Insert a row into the first table after `heading`."""
    lines = _lines(source)
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == heading)
    except StopIteration:
        raise EditError(f"no {heading!r} heading") from None
    entries: list[Entry] = []
    for i in range(start + 1, len(lines)):
        if lines[i].startswith("|"):
            k = key_of(lines[i])
            if k is not None:
                entries.append(Entry(k, i, i))
        elif entries:
            break
    anchor, before = placement(entries, key)
    lines.insert(anchor.first if before else anchor.last + 1, row.rstrip("\n") + "\n")
    return "".join(lines)
