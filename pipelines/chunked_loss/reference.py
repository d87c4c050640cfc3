"""Every SPEC form normalised to one plain reference function, with evidence for each piece.

The normal form is what TRL writes inside its trainers: a function of per-sequence log-probs returning the
per-sequence losses (and any metrics):

    def reference(chosen_logps, rejected_logps[, ref_chosen_logps, ref_rejected_logps][, extra tensors], beta=0.1, ...):
        ...
        return losses[, metric, ...]

A reference class of Liger's tests (`HFAlignmentLoss.alignment_loss`) becomes it by turning `self.x` into keyword
parameters (their defaults read from `__init__` and `test/utils.py`); a string hyper-parameter (`self.loss_type`)
is fixed at generation time (`--set loss_type=simpo`) and its branches folded away. A TRL loss type becomes it by
cutting that loss type's branch, and the log-ratio preamble before it, out of the trainer's source text.
"""

from __future__ import annotations

import ast
import copy
import difflib
import importlib.util
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from pathlib import Path

from pipelines.chunked_loss.spec import Spec
from pipelines.chunked_loss.spec import SpecKind
from pipelines.outcome import PipelineError

PAIRED = "paired preference"
UNPAIRED = "unpaired preference"
PPO = "PPO/GRPO-style"
DISTILLATION = "distillation"
FULL_LOGITS = "full logits"

# the names Liger's preference bases hand the per-chunk loss; TRL and HF's tests spell them with a policy_ prefix
LOGP_NAMES = {
    "policy_chosen_logps": "chosen_logps",
    "policy_rejected_logps": "rejected_logps",
    "chosen_logps": "chosen_logps",
    "rejected_logps": "rejected_logps",
}
REF_NAMES = {"ref_chosen_logps", "ref_rejected_logps", "reference_chosen_logps", "reference_rejected_logps"}
PPO_WORDS = {"advantages", "old_per_token_logps", "old_logps", "ref_per_token_logps", "per_token_logps"}
DISTILL_WORDS = {"student_logits", "teacher_logits", "student_input", "teacher_input"}
LOGIT_WORDS = {"logits", "all_logits", "policy_logits"}
# HFAlignmentLoss's own defaults, used when the target's test/utils.py cannot be read
ALIGNMENT_DEFAULTS = {
    "alpha": 1.0,
    "beta": 0.1,
    "ignore_index": -100,
    "use_ref_model": False,
    "unpaired": False,
    "compute_nll_loss": True,
}
TRL_TRAINERS = {"dpo": ("trl/trainer/dpo_trainer.py", "DPOTrainer", "trl/trainer/dpo_config.py", "DPOConfig")}
# a TRL branch may use these only as the length normalisation Liger's `average_log_prob=True` already is
TRL_MASKS = {"completion_mask", "shift_completion_mask"}
TRL_PER_TOKEN = {"per_token_logps", "outputs", "ref_per_token_logps", "inputs", "model"}


@dataclass(frozen=True)
class Evidence:
    what: str
    file: str
    lines: tuple[int, int]
    snippet: str = ""

    def to_json(self) -> dict:
        return {"what": self.what, "file": self.file, "lines": list(self.lines), "snippet": self.snippet}


@dataclass(frozen=True)
class Hyper:
    name: str
    default: object  # a Python literal
    evidence: Evidence | None = None


@dataclass
class Reference:
    kind: str
    function_name: str
    source: str  # the normal form, a complete `def`
    uses_ref: bool
    extra_tensors: list[str]  # tensor inputs besides the log-probs (KTO's kl), in signature order
    hypers: list[Hyper]  # float/int hyper-parameters, beta among them
    average_log_prob: bool  # per-token mean (True) or sum (False) of the log-probs the loss sees
    compute_nll_loss: bool  # the reference adds alpha * NLL of the chosen sequences
    specialised: dict[str, str] = field(default_factory=dict)  # string hyper-parameters fixed at generation
    evidence: list[Evidence] = field(default_factory=list)
    origin: str = ""  # where the loss came from, for docstrings and the PR
    # what the reference's own test harness passes both sides (Liger's TorchLMHeadDPO: True); the generated test's
    # heads use it, the module keeps average_log_prob as its default
    harness_average_log_prob: bool | None = None

    @property
    def hyper_names(self) -> list[str]:
        return [h.name for h in self.hypers]


def _lines(node: ast.AST) -> tuple[int, int]:
    return (node.lineno, getattr(node, "end_lineno", node.lineno))


def _snippet(text: str, node: ast.AST, limit: int = 160) -> str:
    first, last = _lines(node)
    lines = text.splitlines()[first - 1 : last]
    shown = " ".join(line.strip() for line in lines)
    return shown if len(shown) <= limit else shown[:limit] + " ..."


def _literal(node: ast.AST | None):
    try:
        return ast.literal_eval(node) if node is not None else None
    except ValueError:
        return _NOT_LITERAL


_NOT_LITERAL = object()


RENAME = "rename."  # --set rename.simpo_gamma=gamma: the generated API's name for a hyper-parameter


def build(spec: Spec, repo: Path, settings: dict[str, str]) -> Reference:
    renames = {k.removeprefix(RENAME): v for k, v in settings.items() if k.startswith(RENAME)}
    settings = {k: v for k, v in settings.items() if not k.startswith(RENAME)}
    return renamed(_build(spec, repo, settings), renames)


def renamed(ref: Reference, renames: dict[str, str]) -> Reference:
    """The hyper-parameters under the names the generated class should use (Liger's SimPO calls TRL's
    `simpo_gamma` `gamma`); the loss's code is renamed with them."""
    if not renames:
        return ref
    known = set(ref.hyper_names)
    for old, new in renames.items():
        if old not in known:
            raise PipelineError(
                f"--set rename.{old}={new}: {old} is not a hyper-parameter of the loss",
                hint=f"it has: {', '.join(sorted(known))}",
            )
        if not new.isidentifier() or new in known:
            raise PipelineError(f"--set rename.{old}={new}: {new!r} is not a free Python name here")
    fn = ast.parse(ref.source).body[0]
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and node.id in renames:
            node.id = renames[node.id]
        elif isinstance(node, ast.arg) and node.arg in renames:
            node.arg = renames[node.arg]
    hypers = [Hyper(renames.get(h.name, h.name), h.default, h.evidence) for h in ref.hypers]
    note = [
        Evidence(f"hyper-parameter {o} named {n} (--set rename.{o}={n})", ref.origin, (0, 0))
        for o, n in renames.items()
    ]
    return replace(ref, source=ast.unparse(fn), hypers=hypers, evidence=ref.evidence + note)


def _build(spec: Spec, repo: Path, settings: dict[str, str]) -> Reference:
    if spec.kind == SpecKind.TRL:
        return from_trl(spec, settings)
    text = spec.path.read_text()
    tree = ast.parse(text)
    node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == spec.qualname)
    shown = _shown_path(spec, repo)
    if isinstance(node, ast.ClassDef):
        return from_class(node, tree, text, shown, repo, settings)
    return from_function(node, text, shown, settings)


def _shown_path(spec: Spec, repo: Path) -> str:
    try:
        return str(spec.path.relative_to(repo.resolve()))
    except ValueError:
        return str(spec.path)


# --- classification of a signature ------------------------------------------------------------------------------


def classify_params(names: list[str]) -> str:
    """Which of Liger's four bases a loss of these arguments belongs to."""
    words = set(names)
    if words & DISTILL_WORDS:
        return DISTILLATION
    if words & {"advantages", "old_per_token_logps", "old_logps"}:
        return PPO
    if {"chosen_logps", "rejected_logps"} <= {LOGP_NAMES.get(n, n) for n in names}:
        return PAIRED
    if words & LOGIT_WORDS:
        return FULL_LOGITS
    return ""


def refuse_kind(kind: str, where: str) -> PipelineError:
    reasons = {
        DISTILLATION: "a distillation loss (student and teacher logits): LigerFusedLinearDistillationBase takes a "
        "per-chunk loss of both models' logits; the default engine writes preference losses only",
        PPO: "a PPO/GRPO-style loss (per-token log-probs, advantages): LigerFusedLinearPPOBase's per-chunk loss is "
        "per token, with clipping against old log-probs; the default engine writes preference losses only",
        FULL_LOGITS: "a loss of the full logits: write it as TRL does, in terms of the chosen and rejected "
        "per-sequence log-probs (chosen_logps, rejected_logps[, ref_chosen_logps, ref_rejected_logps])",
        "": "no argument names chosen_logps / rejected_logps (or policy_chosen_logps / policy_rejected_logps)",
    }
    return PipelineError(
        f"{where}: classified as {kind or 'unknown'}: {reasons[kind]}",
        hint="a preference loss takes (chosen_logps, rejected_logps[, ref_chosen_logps, ref_rejected_logps], "
        "hyper-parameters...) and returns the per-sequence losses",
    )


# --- plain functions --------------------------------------------------------------------------------------------


def from_function(node: ast.FunctionDef, text: str, path: str, settings: dict[str, str]) -> Reference:
    args = node.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    kind = classify_params(names)
    where = f"{path}:{node.name} (lines {node.lineno}-{node.end_lineno})"
    if kind != PAIRED:
        raise refuse_kind(kind, where)
    if settings.get("pairing") == "unpaired":
        kind = UNPAIRED
    defaults = _defaults(args)
    evidence = [Evidence("the loss function", path, _lines(node), _snippet(text, node, 120))]
    hypers, extra, specialised = [], [], {}
    for arg in args.posonlyargs + args.args + args.kwonlyargs:
        name = arg.arg
        if name in LOGP_NAMES or name in REF_NAMES:
            continue
        default = defaults.get(name, _NOT_LITERAL)
        ev = Evidence(f"argument {name}", path, _lines(arg), f"{name}={ast.unparse(defaults_node(args, name))}")
        if isinstance(default, bool) or default is _NOT_LITERAL or default is None:
            extra.append(name)
        elif isinstance(default, str):
            specialised[name] = settings.get(name, default)
        else:
            hypers.append(Hyper(name, default, ev))
    _refuse_unknown(settings, specialised, node.name)
    fn = _normalised(node, rename=LOGP_NAMES, attributes={}, specialised=specialised)
    _check_names(fn, [*hypers], path)
    return Reference(
        kind=kind,
        function_name=node.name,
        source=ast.unparse(ast.fix_missing_locations(fn)),
        uses_ref=bool(set(names) & REF_NAMES),
        extra_tensors=extra,
        hypers=_beta_first(hypers),
        average_log_prob=_setting_bool(settings, "average_log_prob", False),
        compute_nll_loss=_setting_bool(settings, "compute_nll_loss", False),
        specialised=specialised,
        evidence=evidence,
        origin=f"{path}:{node.name}",
    )


def defaults_node(args: ast.arguments, name: str) -> ast.AST:
    positional = args.posonlyargs + args.args
    offset = len(positional) - len(args.defaults)
    for i, arg in enumerate(positional):
        if arg.arg == name and i >= offset:
            return args.defaults[i - offset]
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        if arg.arg == name and default is not None:
            return default
    return ast.Constant(value=None)


def _defaults(args: ast.arguments) -> dict[str, object]:
    found = {}
    positional = args.posonlyargs + args.args
    offset = len(positional) - len(args.defaults)
    for i, arg in enumerate(positional):
        if i >= offset:
            found[arg.arg] = _literal(args.defaults[i - offset])
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        if default is not None:
            found[arg.arg] = _literal(default)
    return found


GENERIC_SETTINGS = {"average_log_prob", "compute_nll_loss", "pairing"}


def _refuse_unknown(settings: dict[str, str], specialised: dict[str, str], where: str) -> None:
    unknown = sorted(set(settings) - set(specialised) - GENERIC_SETTINGS)
    if unknown:
        raise PipelineError(
            f"--set {', '.join(unknown)}: not a setting of {where}",
            hint=f"it takes: {', '.join(sorted(set(specialised) | GENERIC_SETTINGS))}",
        )
    if settings.get("pairing", "paired") not in ("paired", "unpaired"):
        raise PipelineError(f"--set pairing={settings['pairing']}: paired or unpaired")


def _setting_bool(settings: dict[str, str], key: str, default: bool) -> bool:
    if key not in settings:
        return default
    value = settings[key].lower()
    if value not in ("true", "false"):
        raise PipelineError(f"--set {key}={settings[key]}: true or false")
    return value == "true"


def _beta_first(hypers: list[Hyper]) -> list[Hyper]:
    return sorted(hypers, key=lambda h: h.name != "beta")


# --- reference classes of Liger's tests -------------------------------------------------------------------------


def from_class(
    node: ast.ClassDef, tree: ast.Module, text: str, path: str, repo: Path, settings: dict[str, str]
) -> Reference:
    methods = {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}
    where = f"{path}:{node.name} (lines {node.lineno}-{node.end_lineno})"
    bases = [ast.unparse(b) for b in node.bases]
    if "alignment_loss" not in methods:
        if "distillation_loss" in methods or any("Distillation" in b for b in bases):
            raise refuse_kind(DISTILLATION, where)
        names = [a.arg for m in methods.values() for a in m.args.args]
        raise refuse_kind(classify_params(names) or PPO if set(names) & PPO_WORDS else "", where)
    loss = methods["alignment_loss"]
    names = [a.arg for a in loss.args.args[1:]]
    kind = classify_params(names)
    if kind != PAIRED:
        raise refuse_kind(kind, where)
    base_defaults, base_evidence = _alignment_defaults(repo)
    init = methods.get("__init__")
    init_defaults = _defaults(init.args) if init else {}
    super_kwargs = _super_kwargs(init) if init else {}
    # the attribute values a fresh instance has: the class's __init__ over HFAlignmentLoss's
    values = dict(base_defaults)
    evidence = [Evidence("the reference class", path, _lines(node), f"class {node.name}({', '.join(bases)})")]
    evidence.append(Evidence("the per-sequence loss", path, _lines(loss), _snippet(text, loss, 100)))
    evidence += base_evidence
    values.update({k: v for k, v in init_defaults.items() if v is not _NOT_LITERAL})
    for key, value in super_kwargs.items():  # super().__init__(unpaired=True, beta=beta): the instance's values
        resolved = init_defaults.get(value.id, _NOT_LITERAL) if isinstance(value, ast.Name) else _literal(value)
        if resolved is not _NOT_LITERAL:
            values[key] = resolved
            evidence.append(Evidence(f"{key} = {resolved!r}", path, _lines(value), f"super().__init__({key}=...)"))
    kind = UNPAIRED if values.get("unpaired") else PAIRED
    used = sorted({n.attr for n in ast.walk(loss) if _is_self_attr(n)})
    hypers, specialised = [], {}
    for attr in used:
        if attr not in values or values[attr] is _NOT_LITERAL:
            raise PipelineError(
                f"{where}: alignment_loss reads self.{attr}, whose value no __init__ default gives",
                hint="give it a literal default in __init__ (a float hyper-parameter) or pass it as an argument",
            )
        value = values[attr]
        line = _init_line(init, attr) if init else (node.lineno, node.lineno)
        if isinstance(value, str):
            specialised[attr] = settings.get(attr, value)
            evidence.append(Evidence(f"{attr} fixed to {specialised[attr]!r}", path, line, f"self.{attr}"))
        elif isinstance(value, bool):
            raise PipelineError(f"{where}: alignment_loss branches on the flag self.{attr}", hint="fold it by hand")
        else:
            hypers.append(Hyper(attr, value, Evidence(f"hyper-parameter {attr}={value!r}", path, line)))
    _refuse_unknown(settings, specialised, node.name)
    fn = _normalised(loss, rename=LOGP_NAMES, attributes=values, specialised=specialised, drop_self=True)
    _refuse_folded_raise(fn, specialised, where)
    average, average_evidence, harness = _average_log_prob(tree, node.name, path, specialised)
    evidence += average_evidence
    _add_keywords(fn, hypers)
    read = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    hypers = [h for h in hypers if h.name in read]  # a folded-away branch's hyper-parameters are not the loss's
    extra = [a.arg for a in fn.args.args if a.arg not in LOGP_NAMES.values() and a.arg not in REF_NAMES]
    extra = [e for e in extra if e not in {h.name for h in hypers}]
    _check_names(fn, hypers, path)
    return Reference(
        kind=kind,
        function_name=f"{node.name}.alignment_loss",
        source=ast.unparse(ast.fix_missing_locations(fn)),
        uses_ref=bool(set(names) & REF_NAMES),
        extra_tensors=extra,
        hypers=_beta_first(hypers),
        average_log_prob=_setting_bool(settings, "average_log_prob", average),
        harness_average_log_prob=harness,
        compute_nll_loss=_setting_bool(settings, "compute_nll_loss", bool(values.get("compute_nll_loss", True))),
        specialised=specialised,
        evidence=evidence,
        origin=f"{path}:{node.name}",
    )


def _average_log_prob(
    tree: ast.Module, cls: str, path: str, specialised: dict[str, str]
) -> tuple[bool, list, bool | None]:
    """The module's default for per-token means (True) or sums (False) of the log-probs, from the file's unfused
    head that uses the class: a rule over the loss's own string hyper-parameter is the default
    (`self.average_log_prob = loss_type == "simpo"` in Liger's TorchLMHeadCPO); a literal the head passes to both
    sides (`average_log_prob=True` in TorchLMHeadDPO) leaves TRL's sum as the default; a head that passes nothing
    relies on HFAlignmentLoss.get_batch_loss_metrics's default (True)."""
    for head in tree.body:
        if not isinstance(head, ast.ClassDef) or head.name == cls:
            continue
        if not any(isinstance(n, ast.Name) and n.id == cls for n in ast.walk(head)):
            continue
        for node in ast.walk(head):
            value = None
            if isinstance(node, ast.keyword) and node.arg == "average_log_prob":
                value = node.value
            elif isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "self.average_log_prob":
                value = node.value
            if value is None or (isinstance(value, ast.Attribute) and value.attr == "average_log_prob"):
                continue
            if isinstance(_literal(value), bool):
                # a head that tells both sides explicitly says nothing of the default: TRL's, a sum (Liger's DPO, KTO)
                what = "average_log_prob=False by default (the file's unfused head passes it to both sides explicitly)"
                evidence = Evidence(what, path, _lines(value), f"average_log_prob={ast.unparse(value)}")
                return False, [evidence], _literal(value)
            decided = _evaluate(value, specialised)
            if decided is not None:
                ev = Evidence(
                    f"average_log_prob={decided} (the file's unfused head)", path, _lines(value), ast.unparse(value)
                )
                return decided, [ev], None
    return True, [], None  # the head relies on get_batch_loss_metrics's default (Liger's ORPO: the base's True)


def _evaluate(node: ast.AST, specialised: dict[str, str]) -> bool | None:
    """A literal, or `name == "text"` / `name in (...)` over the fixed string hyper-parameters (loss_type)."""
    literal = _literal(node)
    if isinstance(literal, bool):
        return literal
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.left, ast.Name):
        value = specialised.get(node.left.id)
        right = _literal(node.comparators[0])
        if value is None or right is _NOT_LITERAL:
            return None
        if isinstance(node.ops[0], ast.Eq):
            return value == right
        if isinstance(node.ops[0], ast.In):
            return value in right
    return None


def _refuse_folded_raise(fn: ast.FunctionDef, specialised: dict[str, str], where: str) -> None:
    """A fixed string whose branch is the reference's own `raise` (an unknown loss_type): its message says why."""
    raised = next((s for s in fn.body if isinstance(s, ast.Raise)), None)
    if raised is None:
        return
    fixed = ", ".join(f"{k}={v!r}" for k, v in specialised.items())
    raise PipelineError(
        f"{where}: with {fixed} the reference raises: {_literal_text(raised)}",
        hint="--set one of the values the reference's branches compare with",
    )


def _literal_text(raised: ast.Raise) -> str:
    text = ast.unparse(raised.exc) if raised.exc is not None else "raise"
    return text if len(text) < 200 else text[:200] + " ..."


def _add_keywords(fn: ast.FunctionDef, hypers: list[Hyper]) -> None:
    """`self.beta` became `beta`: the normal form takes it as a keyword argument with the instance's default."""
    read = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for hyper in hypers:
        if hyper.name in read:
            fn.args.kwonlyargs.append(ast.arg(arg=hyper.name))
            fn.args.kw_defaults.append(ast.Constant(value=hyper.default))


def _is_self_attr(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


def _init_line(init: ast.FunctionDef, attr: str) -> tuple[int, int]:
    for arg in init.args.args:
        if arg.arg == attr:
            return _lines(arg)
    return _lines(init)


def _super_kwargs(init: ast.FunctionDef) -> dict[str, ast.AST]:
    for node in ast.walk(init):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__":
            return {k.arg: k.value for k in node.keywords if k.arg}
    return {}


def _alignment_defaults(repo: Path) -> tuple[dict, list[Evidence]]:
    utils = repo / "test" / "utils.py"
    if not utils.is_file():
        return dict(ALIGNMENT_DEFAULTS), []
    tree = ast.parse(utils.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "HFAlignmentLoss":
            init = next(m for m in node.body if isinstance(m, ast.FunctionDef) and m.name == "__init__")
            found = {k: v for k, v in _defaults(init.args).items() if v is not _NOT_LITERAL}
            ev = Evidence(
                "HFAlignmentLoss defaults",
                "test/utils.py",
                _lines(init),
                ", ".join(f"{k}={v!r}" for k, v in found.items()),
            )
            return {**ALIGNMENT_DEFAULTS, **found}, [ev]
    return dict(ALIGNMENT_DEFAULTS), []


# --- the normal form --------------------------------------------------------------------------------------------


class _Rewrite(ast.NodeTransformer):
    """`self.x` -> `x`; log-prob names -> Liger's; `if <fixed string> == "..."` folded to its branch."""

    def __init__(self, rename: dict[str, str], specialised: dict[str, str], attr_map: dict[str, str] | None = None):
        self.rename = rename
        self.specialised = specialised
        self.attr_map = attr_map or {}

    def visit_Attribute(self, node):
        if _is_self_attr(node):
            return ast.copy_location(ast.Name(id=self.attr_map.get(node.attr, node.attr), ctx=node.ctx), node)
        if isinstance(node.value, ast.Attribute) and _is_self_attr(node.value) and node.value.attr == "args":
            return ast.copy_location(ast.Name(id=node.attr, ctx=node.ctx), node)  # TRL's self.args.discopop_tau
        return self.generic_visit(node)

    def visit_Name(self, node):
        if node.id in self.rename:
            return ast.copy_location(ast.Name(id=self.rename[node.id], ctx=node.ctx), node)
        return node

    def visit_If(self, node):
        decided = self._decide(node.test)
        if decided is None:
            return self.generic_visit(node)
        chosen = node.body if decided else node.orelse
        out = []
        for stmt in chosen:
            visited = self.visit(stmt)
            out.extend(visited if isinstance(visited, list) else [visited] if visited is not None else [])
        return out or None

    def _decide(self, test: ast.AST) -> bool | None:
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and len(test.comparators) == 1):
            return None
        left, right = test.left, test.comparators[0]
        name = None
        if _is_self_attr(left):
            name = left.attr
        elif isinstance(left, ast.Name):
            name = left.id
        if name not in self.specialised or not isinstance(right, ast.Constant):
            return None
        value = self.specialised[name]
        if isinstance(test.ops[0], ast.Eq):
            return value == right.value
        if isinstance(test.ops[0], ast.NotEq):
            return value != right.value
        return None


def _normalised(
    fn: ast.FunctionDef,
    rename: dict[str, str],
    attributes: dict,
    specialised: dict[str, str],
    drop_self: bool = False,
) -> ast.FunctionDef:
    fn = copy.deepcopy(fn)
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]  # the docstring: the generated one is written from the profile
    fn.body = body or [ast.Pass()]
    fn = _Rewrite(rename, specialised).visit(fn)
    args = [a for a in fn.args.args if not (drop_self and a.arg == "self")]
    for a in args:
        a.annotation = None
        a.arg = rename.get(a.arg, a.arg)
    fn.args.args = args
    fn.returns = None
    fn.decorator_list = []
    if not fn.body:
        fn.body = [ast.Pass()]
    return prune_dead(fn)


def prune_dead(fn: ast.FunctionDef) -> ast.FunctionDef:
    """Drop assignments to plain names nothing reads afterwards (TRL's shared preamble computes what other loss
    types need), until none is left."""
    while True:
        read = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        dead = [
            s
            for s in fn.body
            if isinstance(s, ast.Assign) and all(isinstance(t, ast.Name) and t.id not in read for t in s.targets)
        ]
        if not dead:
            return fn
        fn.body = [s for s in fn.body if s not in dead]


def _check_names(fn: ast.FunctionDef, hypers: list[Hyper], path: str) -> None:
    """Every name the function reads is an argument, a hyper-parameter, a local, or torch / F / math."""
    bound = {a.arg for a in fn.args.args + fn.args.kwonlyargs} | {h.name for h in hypers}
    bound |= {"torch", "F", "math", "nn", "range", "len", "float", "int", "min", "max", "abs", "ValueError"}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    free = sorted({n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound)
    if free:
        raise PipelineError(
            f"{path}: the loss reads {', '.join(free)}, which is neither an argument nor a hyper-parameter",
            hint="the per-chunk loss sees only the log-probs, the reference log-probs and literal hyper-parameters",
        )


# --- TRL --------------------------------------------------------------------------------------------------------


def trl_file(relative: str) -> Path:
    found = importlib.util.find_spec("trl")
    if found is None or not found.origin:
        raise PipelineError("TRL is not installed", hint="pip install trl")
    return Path(found.origin).parent.parent / relative


def trl_version() -> str:
    from importlib.metadata import version

    return version("trl")


def _trl_loop(fn: ast.FunctionDef) -> ast.For:
    for node in ast.walk(fn):
        if isinstance(node, ast.For) and isinstance(node.target, ast.Tuple):
            names = [e.id for e in node.target.elts if isinstance(e, ast.Name)]
            if "loss_type" in names:
                return node
    raise PipelineError("TRL's DPOTrainer._compute_loss has no `for loss_type, ...` loop: an unknown TRL version")


def _branches(chain: ast.If) -> dict[str, ast.If]:
    found = {}
    node = chain
    while isinstance(node, ast.If):
        test = node.test
        if isinstance(test, ast.Compare) and isinstance(test.comparators[0], ast.Constant):
            found[test.comparators[0].value] = node
        node = node.orelse[0] if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If) else None
    return found


def trl_loss_types(trainer: str = "dpo") -> list[str]:
    relative, cls, _, _ = TRL_TRAINERS[trainer]
    tree = ast.parse(trl_file(relative).read_text())
    loop = _trl_loop(_trl_method(tree, cls, relative))
    chain = next(s for s in loop.body if isinstance(s, ast.If))
    return list(_branches(chain))


def _trl_method(tree: ast.Module, cls: str, relative: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "_compute_loss":
                    return item
    raise PipelineError(f"{relative} has no {cls}._compute_loss: an unknown TRL version")


def _config_defaults(relative: str, cls: str) -> dict[str, tuple[object, tuple[int, int]]]:
    tree = ast.parse(trl_file(relative).read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    call = item.value
                    if isinstance(call, ast.Call):
                        default = next((k.value for k in call.keywords if k.arg == "default"), None)
                        value = _literal(default)
                        if value is not _NOT_LITERAL:
                            found[item.target.id] = (value, _lines(item))
    return found


def from_trl(spec: Spec, settings: dict[str, str]) -> Reference:
    if spec.trainer not in TRL_TRAINERS:
        raise PipelineError(
            f"{spec.text}: the default engine reads TRL's {', '.join(TRL_TRAINERS)} trainer(s), not {spec.trainer!r}",
            hint="trl:dpo:<loss_type>",
        )
    relative, cls, config_relative, config_cls = TRL_TRAINERS[spec.trainer]
    text = trl_file(relative).read_text()
    tree = ast.parse(text)
    method = _trl_method(tree, cls, relative)
    loop = _trl_loop(method)
    chain = next(s for s in loop.body if isinstance(s, ast.If))
    branches = _branches(chain)
    if spec.qualname not in branches:
        close = difflib.get_close_matches(spec.qualname, list(branches), n=3)
        raise PipelineError(
            f"{spec.text}: TRL {trl_version()} has no DPO loss_type {spec.qualname!r}"
            + (f" (did you mean {', '.join(close)}?)" if close else ""),
            hint=f"known loss types: {', '.join(branches)}",
        )
    branch = branches[spec.qualname]
    shown = f"trl {trl_version()}: {relative}"
    preamble = _trl_preamble(method, loop)
    defaults = _config_defaults(config_relative, config_cls)
    specialised = {"f_divergence_type": settings.get("f_divergence_type", defaults["f_divergence_type"][0])}
    _refuse_unknown(settings, specialised, f"TRL's {cls}")
    evidence = [
        Evidence(f"loss_type {spec.qualname!r}", shown, _lines(branch), _snippet(text, branch.body[-1], 140)),
        Evidence("log-ratio preamble", shown, (preamble[0].lineno, preamble[-1].end_lineno)),
        Evidence(
            f"f_divergence_type = {specialised['f_divergence_type']!r}",
            f"trl {trl_version()}: {config_relative}",
            defaults["f_divergence_type"][1],
        ),
    ]
    body = copy.deepcopy(preamble) + copy.deepcopy(branch.body)
    body, average, notes = _length_normalisation(body, shown, text)
    evidence += notes
    fn = ast.FunctionDef(
        name=f"trl_dpo_{spec.qualname}",
        args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=body + [ast.Return(value=ast.Name(id="per_sequence_loss", ctx=ast.Load()))],
        decorator_list=[],
        returns=None,
        type_params=[],
    )
    fn = prune_dead(_Rewrite({}, specialised).visit(fn))
    _refuse_per_token(fn, spec)
    hypers = []
    read = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for name in sorted(read & set(defaults)):
        value, line = defaults[name]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            hypers.append(
                Hyper(
                    name,
                    value,
                    Evidence(f"hyper-parameter {name}={value!r}", f"trl {trl_version()}: {config_relative}", line),
                )
            )
    args = ["chosen_logps", "rejected_logps", "ref_chosen_logps", "ref_rejected_logps"]
    fn.args.args = [ast.arg(arg=a) for a in args + [h.name for h in _beta_first(hypers)]]
    fn.args.defaults = [ast.Constant(value=h.default) for h in _beta_first(hypers)]
    if "device" in read:  # TRL's trainer device: here, the log-probs' own
        fn.body.insert(0, ast.parse("device = chosen_logps.device").body[0])
    _check_names(fn, hypers, shown)
    return Reference(
        kind=PAIRED,
        function_name=fn.name,
        source=ast.unparse(ast.fix_missing_locations(fn)),
        uses_ref=True,
        extra_tensors=[],
        hypers=_beta_first(hypers),
        average_log_prob=_setting_bool(settings, "average_log_prob", average),
        compute_nll_loss=False,
        specialised=specialised,
        evidence=evidence,
        origin=f"TRL {trl_version()} DPOTrainer loss_type={spec.qualname!r} ({relative}:{branch.lineno})",
    )


def _trl_preamble(method: ast.FunctionDef, loop: ast.For) -> list[ast.stmt]:
    """From `chosen_logratios = ...` to the statement before `loss = 0.0` (the per-type loop's accumulator)."""
    body = method.body
    start = next(
        i for i, s in enumerate(body) if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "chosen_logratios"
    )
    end = body.index(loop)
    stmts = body[start:end]
    return [s for s in stmts if not (isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "loss")]


def _length_normalisation(body: list[ast.stmt], shown: str, text: str):
    """TRL's `score / mask.sum(dim=1).clamp(min=1.0)` is a per-token mean: Liger's `average_log_prob=True`.

    The mask-splitting statement is dropped and the divisions removed; anything else that reads a mask is left
    for `_refuse_per_token` to refuse."""
    masks: set[str] = set()
    kept, notes = [], []
    for stmt in body:
        if isinstance(stmt, ast.Assign) and _reads(stmt.value, TRL_MASKS) and isinstance(stmt.targets[0], ast.Tuple):
            masks |= {e.id for e in stmt.targets[0].elts if isinstance(e, ast.Name)}
            notes.append(
                Evidence("length normalisation: completion-token counts", shown, _lines(stmt), _snippet(text, stmt))
            )
            continue
        kept.append(stmt)
    if not masks:
        return body, False, notes

    class Strip(ast.NodeTransformer):
        def visit_BinOp(self, node):
            self.generic_visit(node)
            if isinstance(node.op, ast.Div) and _reads(node.right, masks):
                return node.left
            return node

    return [Strip().visit(s) for s in kept], True, notes


def _reads(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _refuse_per_token(fn: ast.FunctionDef, spec: Spec) -> None:
    read = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
    per_token = sorted(read & (TRL_PER_TOKEN | TRL_MASKS))
    if per_token:
        raise PipelineError(
            f"{spec.text}: the loss reads {', '.join(per_token)} (per-token values inside the loss); Liger's "
            "preference base hands the per-chunk loss per-sequence log-probs only",
            hint="an SFT term is the base's compute_nll_loss; a per-token loss is the PPO base's, not written here",
        )
