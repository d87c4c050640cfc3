"""act for a model_type with no modeling file of its own: transformers builds it with another model's CausalLM class
(exaone, internlm3: LlamaForCausalLM), so Liger's patch of that model already fits it; what is missing is the
registry entry `_apply_liger_kernel` dispatches on `config.model_type` by. The changeset: that entry, pointing to
the owner's apply function, and the owner's own tests copied for this config class (its instance-patching test,
which reaches the new entry through `_apply_liger_kernel_to_instance`, and its convergence entries).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pipelines import render
from pipelines.autopatch import act
from pipelines.autopatch import edits
from pipelines.autopatch import supported
from pipelines.autopatch.profile import Profile
from pipelines.autopatch.resolve import mappings
from pipelines.autopatch.source import dotted_name
from pipelines.changeset import Changeset
from pipelines.changeset import edit_file
from pipelines.outcome import PipelineError
from pipelines.target import Checkout

INSTANCE_PREFIX = "test_apply_liger_kernel_to_instance_for_"


def owner_apply_function(profile: Profile, registry: dict[str, str]) -> str:
    """The target's apply function for the model whose class this model_type runs, or a refusal naming it."""
    ident = profile.identity
    found = registry.get(ident.alias_of)
    if found is None:
        raise PipelineError(
            f"{profile.model_type} has no modeling file of its own: transformers builds it with {ident.causal_lm_class}"
            f" ({ident.modeling_module}), {ident.alias_of}'s class, and the target does not patch {ident.alias_of}"
            f" ({supported.REGISTRY_NAME} has no {ident.alias_of!r})",
            hint=f"autopatch {ident.alias_of} first; {profile.model_type} is then one registry entry to its function",
        )
    return found


def _owner_config_class(profile: Profile) -> str:
    return mappings().configs[profile.identity.alias_of]


def config_classes(profile: Profile) -> tuple[type, type]:
    """(this model's config class, the owner's), imported from transformers."""
    import importlib

    ident = profile.identity
    mine = getattr(importlib.import_module(act.config_module_of(profile)), ident.config_class)
    owner_package = ident.modeling_module.rsplit(".", 1)[0]
    owner_config = _owner_config_class(profile)
    module = importlib.import_module(f"{owner_package}.configuration_{owner_package.rsplit('.', 1)[1]}")
    return mine, getattr(module, owner_config)


def removed_fields(profile: Profile) -> set[str]:
    """Fields the owner's config has and this model's removes (ExaoneConfig: `pretraining_tp = AttributeError()`)."""
    mine, owner = config_classes(profile)
    defaults = owner()
    return {name for name in vars(defaults) if not name.startswith("_") and not hasattr(mine(), name)}


def forward_modules(monkey_patch: str, apply_fn: str) -> list[str]:
    """The `liger_kernel.transformers.model.*` modules whose lce_forward the apply function binds (top-level or
    function-level imports of names its body uses)."""
    tree = ast.parse(monkey_patch)
    func = edits.find_function(tree, apply_fn)
    used = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)}
    found = []
    for node in [*tree.body, *ast.walk(func)]:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("liger_kernel.transformers.model."):
            if any((a.asname or a.name) in used for a in node.names) and node.module not in found:
                found.append(node.module)
    return found


def tolerate_removed_fields(source: str, removed: set[str], defaults) -> str:
    """`self.config.<field>` read as `getattr(self.config, "<field>", <the owner's default>)` for each field this
    model's config removes: HF's own forward does not read it, so the owner's default is what the model means."""
    reads = [
        n
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Attribute) and n.attr in removed and dotted_name(n.value) == "self.config"
    ]
    for node in sorted(reads, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        default = getattr(defaults, node.attr)
        if not isinstance(default, int | float | str | bool | type(None)):
            raise PipelineError(
                f"the owner's forward reads config.{node.attr}, whose default {default!r} is no literal"
            )
        lines = source.splitlines(keepends=True)
        line = lines[node.lineno - 1]
        if node.end_lineno != node.lineno:
            raise PipelineError(f"config.{node.attr} spans lines in the owner's forward")
        new = f'getattr(self.config, "{node.attr}", {default!r})'
        lines[node.lineno - 1] = line[: node.col_offset] + new + line[node.end_col_offset :]
        source = "".join(lines)
    return source


def without_keywords(text: str, first_line: int, config: ast.Call, removed: set[str]) -> str:
    """A copied text (starting at source line `first_line`) without the lines of `config`'s keywords that set a field
    this model's config removes."""
    drop = [k for k in config.keywords if k.arg in removed]
    if not drop:
        return text
    lines = text.splitlines(keepends=True)
    for keyword in sorted(drop, key=lambda k: k.lineno, reverse=True):
        index = keyword.lineno - first_line
        if keyword.end_lineno != keyword.lineno or not lines[index].strip().startswith(f"{keyword.arg}="):
            raise edits.EditError(f"{keyword.arg}= does not stand on a line of its own")
        del lines[index]
    return "".join(lines)


def owner_sizes(profile: Profile, set_here: set[str]) -> list[tuple[str, int]]:
    """The owner config's int defaults (sizes, counts, token ids) that this model's config defaults otherwise and a
    copied test leaves unset: with them the copy builds the owner test's model (IQuestCoderConfig's 40 heads do not
    divide the 32 wide hidden size Llama's test sets beside LlamaConfig's 32)."""
    mine, owner = (cls() for cls in config_classes(profile))
    return [
        (name, value)
        for name, value in sorted(vars(owner).items())
        if type(value) is int and name not in set_here and hasattr(mine, name) and getattr(mine, name) != value
    ]


def with_keywords(text: str, added: list[tuple[str, int]]) -> str:
    """A copied multi-line call's text with `name=value,` lines before its closing parenthesis."""
    if not added:
        return text
    head, _, close = text.rpartition("\n")
    indent = re.match(r"\s*", head.rsplit("\n", 1)[-1]).group(0)
    return head + "".join(f"\n{indent}{name}={value!r}," for name, value in added) + "\n" + close


def edit_registry(source: str, profile: Profile, apply_fn: str) -> str:
    for key in profile.registry_keys:
        registry = supported.registry_dict(source)
        source = edits.insert_element(source, registry.keys, edits.string_value, key, f'"{key}": {apply_fn}')
    return source


def _config_calls(node: ast.AST, config_class: str) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call) and dotted_name(n.func).endswith(config_class)]


def _swap_callee(source: str, node: ast.AST, calls: list[ast.Call], callee: str) -> str:
    """`node`'s source text with each of `calls` calling `callee` instead (the arguments kept as written)."""
    text = ast.get_source_segment(source, node)
    for old in {ast.get_source_segment(source, c.func) for c in calls}:
        text = re.sub(rf"(?<![\w.]){re.escape(old)}\(", f"{callee}(", text)
    return text


def copied_instance_test(source: str, profile: Profile, owner_test: str) -> str:
    """The owner's instance-patching test, renamed, building this model's config class where it built its own."""
    func = edits.find_function(ast.parse(source), owner_test)
    owner_config = _owner_config_class(profile)
    calls = _config_calls(func, owner_config)
    if not calls:
        raise PipelineError(f"{owner_test} builds no {owner_config}: no config to build as this model's instead")
    path = f"{act.config_module_of(profile)}.{profile.identity.config_class}"
    body = _swap_callee(source, func, calls, path)
    removed = removed_fields(profile)
    for call in calls:  # the same lines, offset from the function's first line
        original = ast.get_source_segment(source, call).replace(ast.get_source_segment(source, call.func), path, 1)
        copied = without_keywords(original, call.lineno, call, removed)
        copied = with_keywords(copied, owner_sizes(profile, {k.arg for k in call.keywords}))
        body = body.replace(original, copied, 1)
    body = body.replace(f"def {owner_test}(", f"def {INSTANCE_PREFIX}{profile.model_type}(", 1)
    decorators = [f"@{ast.get_source_segment(source, d)}" for d in func.decorator_list]
    x = profile.model_type
    guard = f'@pytest.mark.skipif(not is_{x}_available(), reason="{x} module not available")'
    return "\n".join([*decorators, guard, body]) + "\n"


def edit_instance_test(source: str, profile: Profile, owner_test: str) -> str:
    x = profile.model_type
    available = render.render(
        "autopatch/is_available.py.j2", model_type=x, modeling_package=act.config_module_of(profile).rsplit(".", 1)[0]
    )
    source = edits.ensure_top_level(source, act._available_checker, f"is_{x}_available", available)
    test = copied_instance_test(source, profile, owner_test)
    return edits.insert_top_level(
        source, lambda n: edits.defined_name(n, INSTANCE_PREFIX), f"{INSTANCE_PREFIX}{x}", test
    )


def _setup_calls(tree: ast.AST) -> list[tuple[str, ast.Call]]:
    """(case name, its MiniModelConfig call) for every setup: in the dict and as `MINI_MODEL_SETUPS["mini_x"] = ...`."""
    pairs: list[tuple[ast.AST, ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            pairs += [(key, value) for key, value in zip(node.keys, node.values, strict=True) if key is not None]
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
            if dotted_name(node.targets[0].value) == "MINI_MODEL_SETUPS":
                pairs.append((node.targets[0].slice, node.value))
    return [
        (name, value)
        for key, value in pairs
        if (name := edits.string_value(key))
        and isinstance(value, ast.Call)
        and dotted_name(value.func) == "MiniModelConfig"
    ]


def _owner_setup(tree: ast.AST, apply_fn: str, causal_lm_class: str) -> tuple[str, ast.Call] | None:
    """The first `mini_*` setup applying the owner's function to the owner's class (mini_llama3)."""
    for name, call in _setup_calls(tree):
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        patch = keywords.get("liger_kernel_patch_func")
        model_class = keywords.get("model_class")
        if getattr(patch, "id", None) == apply_fn and getattr(model_class, "id", None) == causal_lm_class:
            return name, call
    return None


def edit_convergence(source: str, profile: Profile, apply_fn: str, dtype: str) -> str:
    """A `mini_<model_type>` copy of the owner's setup and test case, the config built with this model's class."""
    ident, x = profile.identity, profile.model_type
    tree = ast.parse(source)
    owner = _owner_setup(tree, apply_fn, ident.causal_lm_class)
    if owner is None:
        return source  # the owner has no entry in this file: neither does its alias
    owner_name, call = owner
    cases = edits.find_parametrize_list(edits.find_function(tree, "test_mini_model")).elts
    case = next((c for c in cases if edits.case_name(c) == owner_name), None)
    if case is None:
        return source
    flag = f"{x.upper()}_AVAILABLE"
    guard = (
        f"try:\n    from {act.config_module_of(profile)} import {ident.config_class}\n\n    {flag} = True\n"
        f"except ImportError:\n    {flag} = False\n"
    )
    source = edits.insert_top_level(source, lambda n: edits.assigned_flag(n, "_AVAILABLE"), flag, guard)
    tree = ast.parse(source)
    owner_name, call = _owner_setup(tree, apply_fn, ident.causal_lm_class)
    config = next(k.value for k in call.keywords if k.arg == "mini_model_config")
    setup_text = _swap_callee(source, call, [config], ident.config_class)
    setup_text = without_keywords(setup_text, call.lineno, config, removed_fields(profile))
    setup = f'if {flag}:\n    MINI_MODEL_SETUPS["mini_{x}"] = {setup_text}\n'
    source = edits.insert_top_level(source, edits.guarded_setup, f"mini_{x}", setup)
    tree = ast.parse(source)
    cases = edits.find_parametrize_list(edits.find_function(tree, "test_mini_model"))
    case = next(c for c in cases.elts if edits.case_name(c) == owner_name)
    values = case.args if isinstance(case, ast.Call) else case.elts
    segment = [ast.get_source_segment(source, v) for v in values]
    param = render.render(
        "autopatch/convergence_param.py.j2",
        model_type=x,
        lr=segment[2],
        dtype=dtype,
        tolerances=segment[4:10],
        available_flag=flag,
        display_name=ident.display_name,
    )
    return edits.insert_element(source, cases.elts, edits.case_name, f"mini_{x}", param.strip().rstrip(","))


def build_changeset(checkout: Checkout, profile: Profile) -> Changeset:
    apply_fn = owner_apply_function(profile, supported.supported_models(checkout.monkey_patch))
    owner_test = INSTANCE_PREFIX + re.sub(r"^apply_liger_kernel_to_", "", apply_fn)
    try:
        changes = [
            edit_file(checkout.root, act.MONKEY_PATCH, lambda text: edit_registry(text, profile, apply_fn)),
            edit_file(checkout.root, act.INSTANCE_TEST, lambda text: edit_instance_test(text, profile, owner_test)),
        ]
        for path in act.CONVERGENCE_FILES:
            dtype = "bfloat16" if path.parts[2] == "bf16" else "float32"
            changes.append(
                edit_file(checkout.root, path, lambda text, d=dtype: edit_convergence(text, profile, apply_fn, d))
            )
        removed, owner_defaults = removed_fields(profile), config_classes(profile)[1]()
        for module in forward_modules(checkout.monkey_patch.read_text(), apply_fn):
            path = Path("src", *module.split(".")).with_suffix(".py")
            change = edit_file(checkout.root, path, lambda text: tolerate_removed_fields(text, removed, owner_defaults))
            if change.text != checkout.path(path).read_text():
                changes.append(change)
    except (edits.EditError, FileNotFoundError) as exc:
        raise PipelineError(
            f"cannot place the {profile.model_type} registry entry in {checkout.root}: {exc}",
            hint="the target's files differ from what autopatch expects (is this a liger-kernel 0.8.x checkout?)",
        ) from exc
    for change in changes:
        act._must_parse(change)
    note = (
        f"{profile.model_type} has no modeling file of its own: transformers builds it with "
        f"{profile.identity.causal_lm_class}, so the entry reuses `{apply_fn}` and its tests are "
        f"{profile.identity.alias_of}'s, built with {profile.identity.config_class}."
    )
    return Changeset(tuple(changes), (note,))
