"""Leave-one-out: take a supported text model's support out of a checkout, so autopatch can regenerate it.

Removed: the apply function, its registry entries, the three exports, the lce_forward module and its import, the
instance-patching test and availability check, the revert function, the convergence entries (imports, guard,
MINI_MODEL_SETUPS entry, cases) and the README row. Liger's *original* instance-patching test is kept aside
(`original_instance_test`) so it can be run against the regenerated patch. The target's ruff then removes the
imports the removal left unused, so the stripped checkout passes its own checkstyle.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from pipelines import changeset
from pipelines.autopatch import act
from pipelines.autopatch import edits
from pipelines.commands import run_command
from pipelines.target import Checkout


@dataclass(frozen=True)
class Removal:
    model_type: str
    files: list[str]
    original_test: str  # a standalone pytest module: the original test with the imports and helpers it needs


def _drop_spans(source: str, spans: list[tuple[int, int]]) -> str:
    """Remove 0-based inclusive line spans."""
    lines = source.splitlines(keepends=True)
    for first, last in sorted(spans, reverse=True):
        del lines[first : last + 1]
    return "".join(lines)


def _statement_span(lines: list[str], node: ast.AST) -> tuple[int, int]:
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
    return edits._attached_comment_start(lines, first), node.end_lineno - 1


def _drop_lines_naming(source: str, name: str) -> str:
    pattern = re.compile(rf"\b{re.escape(name)}\b")
    return "".join(line for line in source.splitlines(keepends=True) if not pattern.search(line))


def _drop_top_level(source: str, predicate) -> str:
    lines = source.splitlines(keepends=True)
    spans = [_statement_span(lines, node) for node in ast.parse(source).body if predicate(node)]
    return _drop_spans(source, spans)


def _imports_model(node: ast.AST, model_type: str) -> bool:
    package = f"transformers.models.{model_type}"
    return any(
        isinstance(n, ast.ImportFrom) and n.module and (n.module == package or n.module.startswith(package + "."))
        for n in ast.walk(node)
    )


def strip_monkey_patch(source: str, model_type: str) -> str:
    fn = f"apply_liger_kernel_to_{model_type}"
    registry = edits.find_assignment(ast.parse(source), "MODEL_TYPE_TO_APPLY_LIGER_FN").value
    spans = [
        (k.lineno - 1, v.end_lineno - 1)
        for k, v in zip(registry.keys, registry.values, strict=True)
        if isinstance(v, ast.Name) and v.id == fn
    ]
    source = _drop_spans(source, spans)
    source = _drop_top_level(source, lambda n: isinstance(n, ast.FunctionDef) and n.name == fn)
    module = f"liger_kernel.transformers.model.{model_type}"
    return _drop_top_level(source, lambda n: isinstance(n, ast.ImportFrom) and n.module == module)


def strip_instance_test(source: str, model_type: str) -> str:
    test = f"test_apply_liger_kernel_to_instance_for_{model_type}"
    names = {test, f"is_{model_type}_available"}
    source = _drop_top_level(source, lambda n: isinstance(n, ast.FunctionDef) and n.name in names)
    source = _drop_lines_naming(source, f"apply_liger_kernel_to_{model_type}")
    module = f"liger_kernel.transformers.model.{model_type}"
    return _drop_top_level(source, lambda n: isinstance(n, ast.ImportFrom) and n.module == module)


def original_instance_test(source: str, model_type: str) -> str:
    """Liger's test for `model_type`, standalone: the file's imports, constants, helpers, and the test itself."""
    tree, lines = ast.parse(source), source.splitlines(keepends=True)
    test = f"test_apply_liger_kernel_to_instance_for_{model_type}"
    keep = []
    for node in tree.body:
        is_helper = isinstance(node, ast.FunctionDef) and (node.name.startswith(("is_", "_")) or node.name == test)
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Assign)) or is_helper:
            first, last = _statement_span(lines, node)
            keep.append("".join(lines[first : last + 1]))
    if not any(f"def {test}(" in block for block in keep):
        raise ValueError(f"the target has no {test}")
    return "\n\n".join(keep) + "\n"


def strip_convergence(source: str, model_type: str) -> str:
    mini = f"mini_{model_type}"
    source = _drop_lines_naming(source, f"apply_liger_kernel_to_{model_type}")
    source = _drop_lines_naming(source, f"revert_liger_kernel_to_{model_type}")
    source = _drop_top_level(source, lambda n: edits.guarded_setup(n) == mini)
    source = _drop_top_level(source, lambda n: isinstance(n, ast.Try) and _imports_model(n, model_type))
    setups = edits.find_assignment(ast.parse(source), "MINI_MODEL_SETUPS").value
    spans = [
        (k.lineno - 1, v.end_lineno - 1)
        for k, v in zip(setups.keys, setups.values, strict=True)
        if edits.string_value(k) == mini
    ]
    source = _drop_spans(source, spans)
    cases = edits.find_parametrize_list(edits.find_function(ast.parse(source), "test_mini_model"))
    spans = [(c.lineno - 1, c.end_lineno - 1) for c in cases.elts if edits.case_name(c) == mini]
    return _drop_spans(source, spans)


def strip_test_utils(source: str, model_type: str) -> str:
    name = f"revert_liger_kernel_to_{model_type}"
    return _drop_top_level(source, lambda n: isinstance(n, ast.FunctionDef) and n.name == name)


def strip_readme(source: str, model_type: str) -> str:
    return _drop_lines_naming(source, f"apply_liger_kernel_to_{model_type}")


STRIPPERS = (
    (act.MONKEY_PATCH, strip_monkey_patch),
    (act.ROOT_EXPORTS, lambda s, x: _drop_lines_naming(s, f"apply_liger_kernel_to_{x}")),
    (act.INSTANCE_TEST, strip_instance_test),
    (act.TEST_UTILS, strip_test_utils),
    (act.README, strip_readme),
    *((path, strip_convergence) for path in act.CONVERGENCE_FILES),
)


def remove_support(checkout: Checkout, model_type: str) -> Removal:
    """Strip `model_type` from the working tree (not committed). Unused imports left behind go with ruff."""
    act.validate_model_type(model_type)
    original = original_instance_test(checkout.path(act.INSTANCE_TEST).read_text(), model_type)
    changes = [
        changeset.edit_file(checkout.root, path, lambda text, strip=strip: strip(text, model_type))
        for path, strip in STRIPPERS
    ]
    changeset.Changeset(tuple(changes)).write(checkout.root)
    checkout.path(act.model_file(model_type)).unlink()
    python = [c.path for c in changes if c.path.endswith(".py")]
    run_command(changeset.ruff_argv("check", "--fix", "--quiet", *python), cwd=checkout.root, timeout=120)
    run_command(changeset.ruff_argv("format", "--quiet", *python), cwd=checkout.root, timeout=120)
    return Removal(model_type, checkout.git.dirty_paths(), original)


def write_original_test(checkout: Checkout, removal: Removal) -> Path:
    """The kept original test, placed where pytest finds `test.utils` (run it after the pipeline)."""
    path = checkout.path(Path("test/transformers") / f"test_original_instance_{removal.model_type}.py")
    path.write_text(removal.original_test)
    return path
