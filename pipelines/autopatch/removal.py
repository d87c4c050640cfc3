"""Leave-one-out: take a supported text model's support out of a checkout, so autopatch can regenerate it.

What belongs to a model is read from the target, not assumed from its name: the apply function is the registry's
value for the model_type (`llama4_text` -> `apply_liger_kernel_to_llama4`), its convergence setups are the
MINI_MODEL_SETUPS entries that patch with that function (`mini_llama3`, `mini_gemma1.1`), its revert functions
the ones those entries name, its original instance test the one named after the model_type or the function.

Removed: the registry entry; the apply function, its three exports and README row when no other model_type is
registered to it (`apply_liger_kernel_to_qwen3_5` also serves the Qwen3.5 VL model and stays); the lce_forward
module when nothing else imports it; the original instance test; the convergence setups and cases. Then every
import, availability check, guard try-block and revert function that the removal left unused goes too, and
nothing else: a try-block shared with another model (qwen3 + qwen3_moe) loses only this model's imports.

A forward module named like the model_type that other modules still import (model/llama.py: nemotron.py imports
`lce_maybe_trainable_lm_head`) is moved to `<name>_helpers.py` without the forward, and its importers follow, so
the regenerated model/llama.py takes its place and the shared helpers stay as they were.

Liger's *original* instance-patching test is kept aside (`Removal.original_test`) to run against the
regenerated patch.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from pipelines import changeset
from pipelines.autopatch import act
from pipelines.autopatch import edits
from pipelines.autopatch import supported
from pipelines.outcome import PipelineError
from pipelines.subprocesses import run_command
from pipelines.target import Checkout

MODEL_PACKAGE = "liger_kernel.transformers.model"
MODEL_DIR = Path("src/liger_kernel/transformers/model")


@dataclass(frozen=True)
class Support:
    """What the target holds for one model_type, read from its sources."""

    model_type: str
    apply_fn: str
    exclusive: bool  # no other model_type is registered to apply_fn
    forward_modules: tuple[str, ...]  # liger_kernel.transformers.model.* modules apply_fn takes its forward from
    forward_names: tuple[tuple[str, str], ...]  # (module, name) of each forward apply_fn installs
    mini_models: tuple[str, ...]  # convergence setups patched with apply_fn
    revert_fns: tuple[str, ...]
    original_tests: tuple[str, ...]


@dataclass(frozen=True)
class Removal:
    model_type: str
    support: Support
    files: list[str]
    original_test: str | None  # a standalone pytest module, or None when the target has no such test
    relocated: dict[str, str]  # forward module moved aside -> where its shared helpers went


# --- source helpers --------------------------------------------------------------------------------------------


def _drop_spans(source: str, spans: list[tuple[int, int]]) -> str:
    """Remove 0-based inclusive line spans."""
    lines = source.splitlines(keepends=True)
    for first, last in sorted(set(spans), reverse=True):
        del lines[first : last + 1]
    return "".join(lines)


def _statement_span(lines: list[str], node: ast.AST) -> tuple[int, int]:
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
    return edits._attached_comment_start(lines, first), node.end_lineno - 1


def _drop_top_level(source: str, predicate) -> str:
    lines = source.splitlines(keepends=True)
    spans = [_statement_span(lines, node) for node in ast.parse(source).body if predicate(node)]
    return _drop_spans(source, spans)


def _drop_lines_naming(source: str, name: str) -> str:
    pattern = re.compile(rf"\b{re.escape(name)}\b")
    return "".join(line for line in source.splitlines(keepends=True) if not pattern.search(line))


def _names_used(tree: ast.AST) -> set[str]:
    """Every name read anywhere in the module (imports and definitions do not count as uses)."""
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store)}
    # names inside string annotations and __all__ entries are uses too
    used |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return used


def _bound_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    return [alias.asname or alias.name.split(".")[0] for alias in node.names]


def _import_sites(tree: ast.Module):
    """Module-level imports, including those inside top-level try / if blocks (Liger's availability guards)."""
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.Try, ast.If)):
            yield from (s for s in node.body if isinstance(s, (ast.Import, ast.ImportFrom)))


def _unused_imports(tree: ast.Module) -> set[str]:
    used = _names_used(tree)
    return {ast.unparse(n) for n in _import_sites(tree) if not set(_bound_names(n)) & used}


def _assigned(stmts: list[ast.stmt]) -> set[str]:
    return {t.id for s in stmts if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}


def prune_newly_unused(original: str, edited: str) -> str:
    """Drop the imports, guard try-blocks and availability checks the edit left unused (not those unused before)."""
    before_imports = _unused_imports(ast.parse(original))
    before_used = _names_used(ast.parse(original))
    while True:
        tree, lines = ast.parse(edited), edited.splitlines(keepends=True)
        used = _names_used(tree)
        dropped = [
            n for n in _import_sites(tree) if not set(_bound_names(n)) & used and ast.unparse(n) not in before_imports
        ]
        spans = []
        for node in tree.body:
            inner = [s for s in dropped if s in getattr(node, "body", ())]
            if isinstance(node, ast.If) and inner and len(inner) == len(node.body) and not node.orelse:
                spans.append(_statement_span(lines, node))  # `if TYPE_CHECKING:` left with nothing inside
            elif isinstance(node, ast.Try) and _guard_emptied(node, inner, used):
                spans.append(_statement_span(lines, node))
            elif node in dropped or inner:
                spans += [_statement_span(lines, s) for s in ([node] if node in dropped else inner)]
            elif isinstance(node, ast.FunctionDef) and re.fullmatch(r"is_\w+_available", node.name):
                if node.name not in used and node.name in before_used:
                    spans.append(_statement_span(lines, node))
        if not spans:
            return edited
        edited = _drop_spans(edited, spans)


def _guard_emptied(node: ast.Try, dropped: list[ast.stmt], used: set[str]) -> bool:
    """A `try: import ...; FLAG = True except ImportError: FLAG = False` with no import left and FLAG unused."""
    left = [s for s in node.body if s not in dropped and isinstance(s, (ast.Import, ast.ImportFrom))]
    flags = _assigned(node.body) | _assigned([s for h in node.handlers for s in h.body])
    return not left and not flags & used


# --- reading what the target holds for a model --------------------------------------------------------------------


def _function(source: str, name: str) -> ast.FunctionDef:
    return edits.find_function(ast.parse(source), name)


def forward_modules(monkey_patch: str, apply_fn: str) -> tuple[str, ...]:
    """The model modules the function takes its forward from: its own imports, or module-level aliases it uses."""
    tree, func = ast.parse(monkey_patch), _function(monkey_patch, apply_fn)
    used = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)}
    found = [n.module for n in ast.walk(func) if isinstance(n, ast.ImportFrom) and _is_model_module(n.module)]
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and _is_model_module(node.module) and set(_bound_names(node)) & used:
            found.append(node.module)
    return tuple(dict.fromkeys(found))


def _is_model_module(module: str | None) -> bool:
    if not module or not module.startswith(MODEL_PACKAGE + "."):
        return False
    return module.rsplit(".", 1)[1] not in ("loss_utils", "output_classes")


def _mini_entries(source: str) -> list[tuple[str, ast.AST, ast.AST, ast.If | None]]:
    """(mini model name, first node, last node, the guarding `if`) of every MINI_MODEL_SETUPS entry: the items of
    its dict literal and of `.update({...})` calls, and the `if FLAG: MINI_MODEL_SETUPS["mini_x"] = ...` assignments (one guard may hold two)."""
    tree, found = ast.parse(source), []
    dicts = [edits.find_assignment(tree, "MINI_MODEL_SETUPS").value]
    dicts += [  # MINI_MODEL_SETUPS.update({...})
        n.args[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "MINI_MODEL_SETUPS.update" and n.args
    ]
    for setups in (d for d in dicts if isinstance(d, ast.Dict)):
        found += [(edits.string_value(k), k, v, None) for k, v in zip(setups.keys, setups.values, strict=True)]
    for node in tree.body:
        if not isinstance(node, ast.If):
            continue
        for stmt in node.body:
            target = stmt.targets[0] if isinstance(stmt, ast.Assign) else None
            if isinstance(target, ast.Subscript) and getattr(target.value, "id", None) == "MINI_MODEL_SETUPS":
                found.append((edits.string_value(target.slice), stmt, stmt, node))
    return found


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def mini_models(source: str, apply_fn: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The convergence setups that patch with `apply_fn`, and the revert functions they name."""
    minis, reverts = [], []
    for name, _, value, _ in _mini_entries(source):
        names = _names_in(value)
        if apply_fn in names:
            minis.append(name)
            reverts += sorted(n for n in names if n.startswith("revert_liger_kernel_to_"))
    return tuple(dict.fromkeys(minis)), tuple(dict.fromkeys(reverts))


def original_test_names(test_source: str, model_type: str, apply_fn: str) -> tuple[str, ...]:
    """Liger's instance test for the model: named after the model_type, else after its apply function."""
    defined = {n.name for n in ast.parse(test_source).body if isinstance(n, ast.FunctionDef)}
    for suffix in dict.fromkeys((model_type, apply_fn.removeprefix("apply_liger_kernel_to_"))):
        for name in (
            f"test_apply_liger_kernel_to_instance_for_{suffix}",
            f"test_apply_liger_kernel_to_instance_for_{suffix}_for_causal_lm",
            f"test_apply_liger_kernel_to_{suffix}_for_causal_lm",
        ):
            if name in defined:
                return (name,)
    return ()


def read_support(checkout: Checkout, model_type: str) -> Support:
    act.validate_model_type(model_type)
    monkey_patch = checkout.path(act.MONKEY_PATCH).read_text()
    reg = supported.apply_functions(monkey_patch, act.MONKEY_PATCH)
    if model_type not in reg:
        raise PipelineError(f"{model_type} is not in the target's {supported.REGISTRY_NAME}")
    apply_fn = reg[model_type]
    minis, reverts = (), ()
    for path in act.CONVERGENCE_FILES:
        more, more_reverts = mini_models(checkout.path(path).read_text(), apply_fn)
        minis, reverts = tuple(dict.fromkeys(minis + more)), tuple(dict.fromkeys(reverts + more_reverts))
    modules = forward_modules(monkey_patch, apply_fn)
    return Support(
        model_type=model_type,
        apply_fn=apply_fn,
        exclusive=list(reg.values()).count(apply_fn) == 1,
        forward_modules=modules,
        forward_names=tuple((m, name) for m in modules for name in _imported_from(m, monkey_patch, apply_fn)),
        mini_models=minis,
        revert_fns=reverts,
        original_tests=original_test_names(checkout.path(act.INSTANCE_TEST).read_text(), model_type, apply_fn),
    )


# --- the strippers: text -> text, one per target file --------------------------------------------------------------


def strip_monkey_patch(source: str, support: Support) -> str:
    node = supported.registry_dict(source)
    spans = [
        (k.lineno - 1, v.end_lineno - 1)
        for k, v in zip(node.keys, node.values, strict=True)
        if edits.string_value(k) == support.model_type
    ]
    edited = _drop_spans(source, spans)
    if support.exclusive:
        edited = _drop_top_level(edited, lambda n: isinstance(n, ast.FunctionDef) and n.name == support.apply_fn)
    return prune_newly_unused(source, edited)


def strip_root_exports(source: str, support: Support) -> str:
    return _drop_lines_naming(source, support.apply_fn) if support.exclusive else source


def strip_instance_test(source: str, support: Support) -> str:
    tests = set(support.original_tests)
    edited = _drop_top_level(source, lambda n: isinstance(n, ast.FunctionDef) and n.name in tests)
    return prune_newly_unused(source, edited)


def original_instance_test(source: str, support: Support) -> str | None:
    """Liger's test for the model, standalone: the file's imports, constants, helpers, and the test itself."""
    if not support.original_tests:
        return None
    tree, lines = ast.parse(source), source.splitlines(keepends=True)
    keep = []
    for node in tree.body:
        is_function = isinstance(node, ast.FunctionDef)
        is_helper = is_function and (node.name.startswith(("is_", "_")) or node.name in support.original_tests)
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Assign)) or is_helper:
            first, last = _statement_span(lines, node)
            keep.append("".join(lines[first : last + 1]))
    return adapt_forward_imports("\n\n".join(keep) + "\n", support)


def adapt_forward_imports(test: str, support: Support) -> str:
    """Point the test's reference forward at the regenerated module where Liger's lives under another name.

    Liger's test compares the patched forward with the one it installs, by source. When that forward lives in a
    module other than model/<model_type>.py (gemma3_text's `causal_forward` in model/gemma3.py, kept for the VL
    model), the regenerated forward is `lce_forward` in model/<model_type>.py: the test imports that instead,
    under the name it already uses. Nothing else in the test changes.
    """
    ours = f"{MODEL_PACKAGE}.{support.model_type}"
    for module, name in support.forward_names:
        if module == ours:
            continue
        pattern = re.compile(rf"from {re.escape(module)} import {re.escape(name)}(?: as (\w+))?\b")
        test = pattern.sub(lambda m, name=name: f"from {ours} import lce_forward as {m.group(1) or name}", test)
    return test


def strip_convergence(source: str, support: Support) -> str:
    minis = set(support.mini_models)
    tree, lines = ast.parse(source), source.splitlines(keepends=True)
    spans, guards = [], {}
    for name, first, last, guard in _mini_entries(source):
        if guard is None and name in minis:
            spans.append((first.lineno - 1, last.end_lineno - 1))
        elif guard is not None:
            guards.setdefault(guard, []).append((name in minis, first))
    for guard, entries in guards.items():
        if all(mine for mine, _ in entries) and len(entries) == len(guard.body):
            spans.append(_statement_span(lines, guard))
        else:
            spans += [_statement_span(lines, stmt) for mine, stmt in entries if mine]
    cases = edits.find_parametrize_list(edits.find_function(tree, "test_mini_model"))
    spans += [(c.lineno - 1, c.end_lineno - 1) for c in cases.elts if edits.case_name(c) in minis]
    return hand_over_guard(prune_newly_unused(source, _drop_spans(source, spans)), support.model_type)


def hand_over_guard(source: str, model_type: str) -> str:
    """A guard named after the removed model that still guards another model's imports (QWEN3_AVAILABLE also
    imports qwen3_moe) is renamed after that model, so the regenerated model can add its own guard by its name."""
    flag = f"{model_type.upper()}_AVAILABLE"
    for node in ast.parse(source).body:
        if isinstance(node, ast.Try) and flag in _assigned(node.body):
            modules = [n.module for n in node.body if isinstance(n, ast.ImportFrom) and n.module]
            packages = [m.split(".")[2] for m in modules if m.startswith("transformers.models.")]
            heir = f"{packages[0].upper()}_AVAILABLE" if packages else None
            if heir and heir != flag and not re.search(rf"\b{heir}\b", source):
                return re.sub(rf"\b{flag}\b", heir, source)
    return source


def strip_test_utils(source: str, support: Support, still_used: set[str]) -> str:
    drop = set(support.revert_fns) - still_used
    edited = _drop_top_level(source, lambda n: isinstance(n, ast.FunctionDef) and n.name in drop)
    return prune_newly_unused(source, edited)


def strip_readme(source: str, support: Support) -> str:
    """The model's row of the "Patching" table (usage examples in prose stay: act writes only the row)."""
    if not support.exclusive:
        return source
    pattern = re.compile(rf"\b{re.escape(support.apply_fn)}\b")
    return "".join(
        line for line in source.splitlines(keepends=True) if not (line.startswith("|") and pattern.search(line))
    )


def helpers_module(source: str, removed: set[str]) -> str:
    """A forward module without the forwards the removed apply function used: the helpers others import."""
    edited = _drop_top_level(source, lambda n: isinstance(n, ast.FunctionDef) and n.name in removed)
    return prune_newly_unused(source, edited)


# --- the removal ---------------------------------------------------------------------------------------------------


def _python_files(root: Path, *folders: str) -> list[Path]:
    return [p for folder in folders for p in sorted((root / folder).rglob("*.py"))]


def _imported_from(module: str, monkey_patch: str, apply_fn: str) -> set[str]:
    func = _function(monkey_patch, apply_fn)
    names = {a.name for n in ast.walk(func) if isinstance(n, ast.ImportFrom) and n.module == module for a in n.names}
    used = _names_in(func)
    for node in ast.parse(monkey_patch).body:
        if isinstance(node, ast.ImportFrom) and node.module == module:
            names |= {a.name for a in node.names if (a.asname or a.name) in used}
    return names


def _place_forward_modules(checkout: Checkout, support: Support, texts: dict) -> dict[str, str]:
    """Delete each forward module nothing else needs; keep one another model still uses; move aside the helpers
    of one act must recreate (`model/llama.py`), so its importers keep them and the regenerated forward its name."""
    relocated: dict[str, str] = {}
    for module in support.forward_modules:
        stem = module.rsplit(".", 1)[1]
        path = str(MODEL_DIR / f"{stem}.py")
        removed = {name for m, name in support.forward_names if m == module}
        imports = re.compile(rf"^(\s*from ){re.escape(module)}( import (\w+).*)$", re.M)
        needs = {p: {m.group(3) for m in imports.finditer(t)} for p, t in texts.items() if t and p != path}
        needs = {p: names for p, names in needs.items() if names}
        helpers_needed = {p for p, names in needs.items() if names - removed}
        if stem != support.model_type:
            if not needs:
                texts[path] = None  # no other model uses it; the regenerated module has the model_type's name
            continue
        texts[path] = None  # the regenerated module takes this path; what it defines again (lce_forward) is kept
        if helpers_needed:
            helpers = f"{module}_helpers"
            texts[str(MODEL_DIR / f"{stem}_helpers.py")] = helpers_module(checkout.path(path).read_text(), removed)
            for importer in helpers_needed:
                texts[importer] = imports.sub(
                    lambda m, removed=removed, helpers=helpers: (
                        m.group(0) if m.group(3) in removed else f"{m.group(1)}{helpers}{m.group(2)}"
                    ),
                    texts[importer],
                )
            relocated[module] = helpers
    return relocated


def remove_support(checkout: Checkout, model_type: str) -> Removal:
    """Strip `model_type` from the working tree (not committed)."""
    support = read_support(checkout, model_type)
    root = checkout.root
    texts: dict[str, str | None] = {
        str(p.relative_to(root)): p.read_text() for p in _python_files(root, "src/liger_kernel", "test")
    }
    before = dict(texts)
    monkey_patch = texts[str(act.MONKEY_PATCH)]
    original = original_instance_test(texts[str(act.INSTANCE_TEST)], support)
    texts[str(act.MONKEY_PATCH)] = strip_monkey_patch(monkey_patch, support)
    texts[str(act.ROOT_EXPORTS)] = strip_root_exports(texts[str(act.ROOT_EXPORTS)], support)
    texts[str(act.INSTANCE_TEST)] = strip_instance_test(texts[str(act.INSTANCE_TEST)], support)
    for path in act.CONVERGENCE_FILES:
        texts[str(path)] = strip_convergence(texts[str(path)], support)
    others = " ".join(t for p, t in texts.items() if t and p != str(act.TEST_UTILS))
    still_used = {name for name in support.revert_fns if re.search(rf"\b{name}\b", others)}
    texts[str(act.TEST_UTILS)] = strip_test_utils(texts[str(act.TEST_UTILS)], support, still_used)
    relocated = _place_forward_modules(checkout, support, texts)
    changed = _write(checkout, texts, before)
    readme = changeset.edit_file(root, act.README, lambda text: strip_readme(text, support))
    changeset.Changeset((readme,)).write(root)
    python = [p for p in changed if (root / p).exists()]
    run_command(changeset.ruff_argv("check", "--fix", "--quiet", *python), cwd=root, timeout=120)
    run_command(changeset.ruff_argv("format", "--quiet", *python), cwd=root, timeout=120)
    return Removal(model_type, support, checkout.git.dirty_paths(), original, relocated)


def _write(checkout: Checkout, texts: dict[str, str | None], before: dict[str, str | None]) -> list[str]:
    """Write what differs from `before` (the files as read); None deletes."""
    changed = [relative for relative, text in texts.items() if text != before.get(relative)]
    for relative in changed:
        if texts[relative] is None:
            checkout.path(relative).unlink()
        else:
            checkout.path(relative).write_text(texts[relative])
    return changed


def write_original_test(checkout: Checkout, removal: Removal) -> Path | None:
    """The kept original test, placed where pytest finds `test.utils` (run it after the pipeline)."""
    if removal.original_test is None:
        return None
    path = checkout.path(Path("test/transformers") / f"test_original_instance_{removal.model_type}.py")
    path.write_text(removal.original_test)
    return path
