"""libcst edits of the target's existing files: one import line, one `__all__` entry, one function.

Placement is the skill's "alphabetical among similar entries": before the first existing entry whose key sorts
after the new one, else after the last. libcst keeps every comment and blank line of the file as it was.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst


class ExportError(ValueError):
    """The anchor is missing or the entry exists already."""


def _place(keys: list[str | None], key: str) -> tuple[int, bool]:
    """Index of the statement to insert next to, and whether before it."""
    # case-insensitive, as ruff's isort orders imports
    found = [(i, k.lower()) for i, k in enumerate(keys) if k is not None]
    key = key.lower()
    if not found:
        raise ExportError(f"no similar entries to place {key!r} among")
    if any(k == key for _, k in found):
        raise ExportError(f"{key!r} is already present")
    for index, existing in found:
        if existing > key:
            return index, True
    return found[-1][0], False


def import_key(prefix: str) -> Callable[[cst.CSTNode], str | None]:
    """`from liger_kernel.ops.x import Y` -> "liger_kernel.ops.x.Y" for modules under `prefix`."""

    def key(stmt: cst.CSTNode) -> str | None:
        if not isinstance(stmt, cst.SimpleStatementLine) or not isinstance(stmt.body[0], cst.ImportFrom):
            return None
        node = stmt.body[0]
        module = cst.Module([]).code_for_node(node.module) if node.module else ""
        if not module.startswith(prefix) or isinstance(node.names, cst.ImportStar):
            return None
        return f"{module}.{node.names[0].name.value}"

    return key


def function_key(prefix: str) -> Callable[[cst.CSTNode], str | None]:
    def key(stmt: cst.CSTNode) -> str | None:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value.startswith(prefix):
            return stmt.name.value
        return None

    return key


def insert_statement(source: str, key_of: Callable[[cst.CSTNode], str | None], key: str, code: str) -> str:
    module = cst.parse_module(source)
    body = list(module.body)
    index, before = _place([key_of(s) for s in body], key)
    new = cst.parse_module(code).body[0]
    if isinstance(new, cst.FunctionDef):
        new = new.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    body.insert(index if before else index + 1, new)
    return module.with_changes(body=body).code


def insert_all_entry(source: str, name: str) -> str:
    """Add "name" to the first `__all__ = [...]` list."""
    module = cst.parse_module(source)
    for i, stmt in enumerate(module.body):
        if not isinstance(stmt, cst.SimpleStatementLine) or not isinstance(stmt.body[0], cst.Assign):
            continue
        assign = stmt.body[0]
        target = assign.targets[0].target
        if isinstance(target, cst.Name) and target.value == "__all__" and isinstance(assign.value, cst.List):
            elements = list(assign.value.elements)
            keys = [e.value.evaluated_value if isinstance(e.value, cst.SimpleString) else None for e in elements]
            index, before = _place(keys, name)
            anchor = elements[index]
            new = anchor.with_changes(value=cst.SimpleString(f'"{name}"'))
            if not before and anchor.comma is cst.MaybeSentinel.DEFAULT:
                elements[index] = anchor.with_changes(comma=cst.Comma())
            elements.insert(index if before else index + 1, new)
            new_assign = assign.with_changes(value=assign.value.with_changes(elements=elements))
            body = list(module.body)
            body[i] = stmt.with_changes(body=[new_assign])
            return module.with_changes(body=body).code
    raise ExportError("no `__all__ = [...]` list")
