"""`understand`: a model name -> a Profile whose 12 decisions each cite the source or the probe that settled them.

Two kinds of proof. The **ast** decisions read the generated `modeling_*.py` (transformers 5 ships modular
models as generated files, so those are what runs): class names, norm attribute names, the output class,
hidden-state access, softcapping, which norm outputs meet a residual add. The **probe** decisions instantiate the
model tiny on the CPU and run its own norm / MLP / experts / rotary function beside candidate Liger semantics, and
its backward with Liger's in-place RMSNorm write emulated (`probes.py`). A module no Liger kernel reproduces is a
proven "none" (the residuals are the evidence). A decision no probe or rule can settle is marked `needs review` with the reason, never guessed.
"""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from pathlib import Path

from pipelines.autopatch import probes
from pipelines.autopatch.profile import Decision
from pipelines.autopatch.profile import Evidence
from pipelines.autopatch.profile import Identity
from pipelines.autopatch.profile import Method
from pipelines.autopatch.profile import Profile
from pipelines.autopatch.profile import Status
from pipelines.autopatch.resolve import ModelRef
from pipelines.autopatch.resolve import liger_name
from pipelines.autopatch.resolve import mappings
from pipelines.autopatch.resolve import module_name
from pipelines.autopatch.resolve import resolve
from pipelines.autopatch.source import SourceFile
from pipelines.autopatch.source import called_names
from pipelines.autopatch.source import class_home
from pipelines.autopatch.source import configuration_path
from pipelines.autopatch.source import dotted_name
from pipelines.autopatch.source import load
from pipelines.autopatch.source import modeling_path
from pipelines.autopatch.source import modular_parents
from pipelines.autopatch.source import parameters
from pipelines.autopatch.source import statements
from pipelines.outcome import PipelineError

_MLP_NAME = re.compile(r"(MLP|Mlp|MoE|Moe|MoeBlock|Experts|FeedForward|FFN|Ffn)$")
_NORM_EXTERNAL = {
    "nn.LayerNorm": "layer",
    "torch.nn.LayerNorm": "layer",
    "nn.RMSNorm": "rms",
    "torch.nn.RMSNorm": "rms",
    "LayerNorm": "layer",  # `from torch.nn import LayerNorm` (BLOOM); a class of that name in the file is read first
    "RMSNorm": "rms",
}
MOE_OUTPUT_FIELDS = {"aux_loss", "router_logits"}
MOE_LOSS_FIELD = "aux_loss"


@dataclass
class Facts:
    """What the AST says about one model: the class skeleton `act` and the probes need."""

    ref: ModelRef
    src: SourceFile
    base_attr: str = "model"
    base_class: str = ""
    head_attr: str = "lm_head"  # what get_output_embeddings returns: the vocabulary projection the loss follows
    layers_attr: str = "layers"
    decoder_class: str = ""
    decoder_alternatives: tuple[str, ...] = ()  # other classes a layer may be (hybrid stacks), patched if present
    attn_attr: str | None = None
    attn_class: str | None = None
    attn_alternatives: tuple[str, ...] = ()  # other classes the same attribute may hold (hybrid linear attention)
    mlp_attr: str | None = None
    mlp_classes: tuple[str, ...] = ()
    moe_classes: tuple[str, ...] = ()
    experts_class: str | None = None
    experts_attr: str | None = None
    shared_attr: str | None = None
    shared_class: str | None = None
    optional_norms: tuple[str, ...] = ()
    decoder_norms: dict[str, str] = field(default_factory=dict)  # attr -> class
    final_norms: dict[str, str] = field(default_factory=dict)
    attn_norms: dict[str, str] = field(default_factory=dict)
    rotary_fn: str | None = None
    evidence: dict[str, list[Evidence]] = field(default_factory=dict)

    def cite(self, key: str, node: ast.AST, max_lines: int = 12) -> None:
        self.evidence.setdefault(key, []).append(self.src.evidence(node, max_lines=max_lines))


# -- reading the skeleton --------------------------------------------------------------------------------------


def norm_family(src: SourceFile, class_name: str) -> str | None:
    """ "rms" / "layer" for a norm class (by name or an nn base), None for anything that is not a norm."""
    if class_name in _NORM_EXTERNAL and class_name not in src.classes:
        return _NORM_EXTERNAL[class_name]
    if class_name not in src.classes:
        return None
    for base in src.external_bases(class_name):
        if base in _NORM_EXTERNAL:
            return _NORM_EXTERNAL[base]
    for name in src.lineage(class_name):
        if "RMSNorm" in name or "RmsNorm" in name:
            return "rms"
        if "LayerNorm" in name:
            return "layer"
    return None


def _local(src: SourceFile, names) -> list[str]:
    return [n for n in names if n in src.classes]


def has_weight(src: SourceFile, class_name: str) -> bool:
    """Whether a norm class can carry a weight: Liger's instance patch binds a forward that reads `self.weight`,
    so a norm class that never creates one (DeepSeek-V4's `UnweightedRMSNorm`) is not a patch target."""
    if class_name not in src.classes or any(b in _NORM_EXTERNAL for b in src.external_bases(class_name)):
        return True  # nn.LayerNorm / nn.RMSNorm (or a subclass): affine by default
    return any(a.attr == "weight" for name in src.lineage(class_name) for a in src.self_assignments(name))


_NO_WEIGHT_FLAGS = ("with_scale", "elementwise_affine", "use_weight")


def built_without_weight(node: ast.stmt) -> bool:
    """`Gemma4RMSNorm(d, with_scale=False)`, `nn.LayerNorm(d, elementwise_affine=False)`: this instance has no
    weight, whatever its class can do, so Liger's weight-reading forward must not be bound to it."""
    calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    return any(
        kw.arg in _NO_WEIGHT_FLAGS and isinstance(kw.value, ast.Constant) and kw.value.value is False
        for call in calls
        for kw in call.keywords
    )


def _norm_assignments(src: SourceFile, class_name: str | None) -> dict[str, tuple[str, ast.stmt]]:
    found: dict[str, tuple[str, ast.stmt]] = {}
    for assign in src.self_assignments(class_name) if class_name else []:
        if built_without_weight(assign.node):
            continue
        if any(norm_family(src, cls) and not has_weight(src, cls) for cls in assign.classes):
            continue  # AXK2: `GatedRMSNorm(config) if ... else RMSNorm(...)`: the instance may have no weight
        for cls in assign.classes:
            if norm_family(src, cls) and has_weight(src, cls) and assign.attr not in found:
                found[assign.attr] = (cls, assign.node)
    return found


def read_facts(ref: ModelRef) -> Facts:
    """The facts of the CausalLM's source; a model_type with no modeling file of its own is read from the folder that
    defines its class (exaone: llama/), and `facts.ref.module_name` says which."""
    home = class_home(ref.module_name, ref.causal_lm_class)
    ref = replace(ref, module_name=home) if home else ref
    src = load(modeling_path(ref.module_name, ref.causal_lm_class))
    facts = Facts(ref, src)
    _read_head(facts)
    _read_base(facts)
    _read_decoder(facts)
    _read_mlp(facts)
    _read_norms(facts)
    _read_rotary(facts)
    return facts


def _read_head(facts: Facts) -> None:
    """The CausalLM's vocabulary projection: `return self.X` in its own get_output_embeddings (BioGPT's
    output_projection, GPT-NeoX-Japanese's embed_out, RWKV's head), else PreTrainedModel's default, lm_head."""
    method = facts.src.method(facts.ref.causal_lm_class, "get_output_embeddings")
    returned = [n.value for n in ast.walk(method) if isinstance(n, ast.Return)] if method else []
    if len(returned) == 1 and dotted_name(returned[0]).startswith("self.") and dotted_name(returned[0]).count(".") == 1:
        facts.head_attr = dotted_name(returned[0]).removeprefix("self.")
        facts.cite("identity", method)


def _read_base(facts: Facts) -> None:
    """The module holding the decoder layers: the CausalLM's own `self.model` (Llama), or one level deeper when the
    forward calls that (OPT: `self.model.decoder(...)`, base_attr "model.decoder")."""
    src, causal = facts.src, facts.ref.causal_lm_class
    called = {
        dotted_name(n.func) for n in ast.walk(src.method(causal, "forward") or ast.Module()) if isinstance(n, ast.Call)
    }
    for assign, inner in _submodules(src, causal, facts.head_attr):
        path = f"{assign.attr}.{inner.attr}" if inner else assign.attr
        holder = _local(src, (inner or assign).classes)[0]
        if inner and f"self.{path}" not in called:
            continue  # a stack one level deeper counts only where the forward runs it directly
        if any(a.attr in _STACK_ATTRS for a in src.self_assignments(holder)):
            facts.base_attr, facts.base_class = path, holder
            facts.cite("identity", assign.node)
            if inner:
                facts.cite("identity", inner.node)
            return
    raise PipelineError(
        f"{causal} in {src.relative} builds no base model whose attribute `layers`, `h` or `blocks` holds the "
        "decoder layers, and its forward calls no submodule of one that does (as OPT's `self.model.decoder(...)`)"
        f": {_why_no_layout(facts)}; the generated forward and instance patch read base_model.<layers>",
        hint="not a decoder-only stack autopatch can lay out",
    )


_STACK_ATTRS = ("layers", "h", "blocks")
_IMAGE_INPUTS = ("pixel_values", "image_patches", "pixel_values_images")


def _stacks(src: SourceFile, owner: str, prefix: str, depth: int) -> list[str]:
    """Paths below `owner` (a class of this file) to attributes holding a layer stack, `depth` levels down at most."""
    found: list[str] = []
    for assign in src.self_assignments(owner):
        if assign.attr in _STACK_ATTRS and assign.classes:
            found.append(f"{prefix}{assign.attr}")
        for cls in _local(src, assign.classes) if depth > 0 else []:
            found += _stacks(src, cls, f"{prefix}{assign.attr}.", depth - 1)
    return found


def _why_no_layout(facts: Facts) -> str:
    """What the CausalLM builds instead of one stack autopatch can lay out, read from its source."""
    src, causal = facts.src, facts.ref.causal_lm_class
    images = [p for p in parameters(src.method(causal, "forward")) if p in _IMAGE_INPUTS]
    if images:
        return f"its forward takes {', '.join(images)}: an image-text model (autopatch generates text models only)"
    assigns = src.self_assignments(causal)
    head = next((a for a in assigns if a.attr == facts.head_attr), None)
    if head is not None and any(c.rsplit(".", 1)[-1] == "ModuleList" for c in head.classes):
        return (
            f"its vocabulary projection self.{facts.head_attr} is a ModuleList of heads (`{ast.unparse(head.node)[:90]}`)"
            ": Liger's fused linear cross entropy projects through one weight"
        )
    auto = [a for a in assigns if any(c.startswith("AutoModel") for c in a.classes)]
    if auto:
        return (
            f"its decoder is `{ast.unparse(auto[0].node)}`: another model_type's base model, chosen at run time (that "
            "model's Liger patch covers its layers); this CausalLM's own forward needs a hand-written lce_forward"
        )
    stacks = [s for a in assigns for c in _local(src, a.classes) for s in _stacks(src, c, f"{a.attr}.", 2)]
    if len(stacks) > 1:
        return f"it runs {len(stacks)} layer stacks ({', '.join(stacks)}): the patch lays out one"
    if stacks:
        return (
            f"its one layer stack is {stacks[0]}, deeper than the forward calls (the patch reads base_model.<layers>)"
        )
    return "no attribute of its modules holds a layer stack"


def _submodules(src: SourceFile, causal: str, head: str):
    """(assignment, None) for each module class the CausalLM builds, then (assignment, inner) one level down."""
    outer = [
        a
        for a in src.self_assignments(causal)
        if a.attr != head and _local(src, a.classes) and src.method(_local(src, a.classes)[0], "forward")
    ]
    yield from ((a, None) for a in outer)
    for a in outer:
        for inner in src.self_assignments(_local(src, a.classes)[0]):
            if _local(src, inner.classes) and src.method(_local(src, inner.classes)[0], "forward"):
                yield a, inner


def _read_decoder(facts: Facts) -> None:
    src = facts.src
    init = src.method(facts.base_class, "__init__")
    built = [n for n in _local(src, called_names(init)) if "Layer" in n or "Block" in n] if init else []
    built = built or _layer_table_classes(src, init)
    for assign in src.self_assignments(facts.base_class):
        layer_classes = [c for c in _local(src, assign.classes) if src.method(c, "forward")]
        layer_classes = layer_classes or _built_by_method(src, facts.base_class, assign)
        if assign.attr in _STACK_ATTRS and (layer_classes or built):
            # the list may be filled in a loop before the assignment (Falcon-H1), from a table (Jamba), or hold
            # one of several classes per layer type (OLMo-hybrid): the one with full attention leads
            classes = _attention_first(src, layer_classes or built)
            facts.layers_attr, facts.decoder_class = assign.attr, classes[0]
            facts.decoder_alternatives = tuple(classes[1:])
            facts.cite("identity", assign.node)
            break
    if not facts.decoder_class:
        raise PipelineError(
            f"{facts.base_class} has no decoder layer list of one class defined at the top of {src.relative}: its "
            "layers are picked from a table per layer type or defined under an `if`, so no single decoder layer "
            "class carries the norms and MLP the patch would swap",
            hint="a hybrid of several layer classes needs a hand-written patch",
        )
    for assign in src.self_assignments(facts.decoder_class):
        local = _local(src, assign.classes)
        if facts.attn_attr is None and any("Attention" in c for c in local):
            facts.attn_attr, facts.attn_class = assign.attr, next(c for c in local if "Attention" in c)
            facts.attn_alternatives = tuple(c for c in local if "Attention" in c)[1:]


def _layer_table_classes(src: SourceFile, init: ast.FunctionDef | None) -> list[str]:
    """Layer classes a base model picks from a module-level table per layer type
    (`ALL_DECODER_LAYER_TYPES = {"attention": ..., "mamba": ...}` read in __init__)."""
    if init is None:
        return []
    read = {n.id for n in ast.walk(init) if isinstance(n, ast.Name)}
    found: list[str] = []
    for node in src.tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            names = {getattr(t, "id", None) for t in node.targets}
            if names & read:
                found += [v.id for v in node.value.values if isinstance(v, ast.Name) and v.id in src.classes]
    return [c for c in found if src.method(c, "forward")]


def _built_by_method(src: SourceFile, owner: str, assign) -> list[str]:
    """`self.layers = self.get_layers()` (Zamba2): the layer classes that method builds."""
    value = getattr(assign.node, "value", None)
    if not (isinstance(value, ast.Call) and dotted_name(value.func).startswith("self.")):
        return []
    method = src.method(owner, dotted_name(value.func).removeprefix("self."))
    found = _local(src, called_names(method)) if method else []
    return [c for c in found if ("Layer" in c or "Block" in c) and src.method(c, "forward")]


def _attention_first(src: SourceFile, classes: list[str]) -> list[str]:
    """The layer classes with a (non-linear) attention first: its norms and rotary are what the probes read."""

    def full_attention(cls: str) -> bool:
        attns = [c for a in src.self_assignments(cls) for c in _local(src, a.classes) if "Attention" in c]
        return any("Linear" not in c and "Delta" not in c for c in attns)

    return sorted(dict.fromkeys(classes), key=lambda c: not full_attention(c))


def _is_moe_block(src: SourceFile, class_name: str) -> bool:
    return any(a.attr == "experts" for a in src.self_assignments(class_name))


def _read_mlp(facts: Facts) -> None:
    src = facts.src
    for assign in src.self_assignments(facts.decoder_class):
        local = _local(src, assign.classes)
        mlps = [c for c in local if _MLP_NAME.search(c) or _is_moe_block(src, c)]
        if mlps:
            # the first MLP-like attribute is the layer's MLP (Gemma 4 adds an optional `experts` after `mlp`)
            facts.mlp_attr = facts.mlp_attr or assign.attr
            facts.cite("structure", assign.node)
            for cls in mlps:
                if _is_moe_block(src, cls):
                    facts.moe_classes += (cls,)
                elif cls not in facts.mlp_classes:
                    facts.mlp_classes += (cls,)
    for moe in facts.moe_classes:
        for assign in src.self_assignments(moe):
            local = _local(src, assign.classes)
            if assign.attr == "experts" and local:
                facts.experts_attr, facts.experts_class = "experts", local[0]
                facts.cite("structure", assign.node)
            elif _MLP_NAME.search(" ".join(local)):
                mlps = tuple(c for c in local if "Expert" not in c and "Router" not in c)
                if mlps and facts.shared_attr is None:  # DeepSeek's shared_experts, Qwen2-MoE's shared_expert
                    facts.shared_attr, facts.shared_class = assign.attr, mlps[0]
                if not facts.mlp_classes:
                    facts.mlp_classes += mlps


def conditional_attrs(src: SourceFile, class_name: str | None) -> set[str]:
    """`self.x` attributes __init__ assigns only inside an `if` (Gemma 4's MoE-block norms, DeepSeek's
    q_a_layernorm): an instance may not have them, so patching them must check first."""
    init = src.method(class_name, "__init__") if class_name else None
    if init is None:
        return set()

    def assigned(nodes) -> set[str]:
        return {
            t.attr
            for n in nodes
            if isinstance(n, ast.Assign)
            for t in n.targets
            if isinstance(t, ast.Attribute) and getattr(t.value, "id", None) == "self"
        }

    inside = {id(n) for branch in ast.walk(init) if isinstance(branch, ast.If) for n in ast.walk(branch)}
    guarded = assigned(n for n in ast.walk(init) if id(n) in inside)
    return guarded - assigned(n for n in ast.walk(init) if id(n) not in inside)


def _norm_or_other(src: SourceFile, class_name: str | None) -> set[str]:
    """Attributes assigned a norm or another module by one expression (ModernBERT-decoder's `nn.LayerNorm(...) if
    layer_id != 0 else nn.Identity()`): a norm in some instances only."""
    found = set()
    for assign in src.self_assignments(class_name) if class_name else []:
        modules = [c for c in assign.classes if c.rsplit(".", 1)[-1][:1].isupper()]  # constructors, not calls
        kinds = {bool(norm_family(src, c)) for c in modules}
        if kinds == {True, False}:
            found.add(assign.attr)
    return found


def _read_norms(facts: Facts) -> None:
    src = facts.src
    facts.optional_norms = tuple(
        sorted(conditional_attrs(src, facts.decoder_class) | _norm_or_other(src, facts.decoder_class))
        + sorted(
            f"{facts.attn_attr}.{a}"
            for a in conditional_attrs(src, facts.attn_class) | _norm_or_other(src, facts.attn_class)
        )
    )
    for attr, (cls, node) in _norm_assignments(src, facts.decoder_class).items():
        facts.decoder_norms[attr] = cls
        facts.cite("norm_attrs", node)
    if facts.decoder_alternatives:  # a norm every layer class has is patched as is, the others where present
        per_class = [_norm_assignments(src, c) for c in facts.decoder_alternatives]
        for norms in per_class:
            for attr, (cls, _) in norms.items():
                facts.decoder_norms.setdefault(attr, cls)
        everywhere = {a for a in facts.decoder_norms if all(a in norms for norms in per_class)}
        primary = set(_norm_assignments(src, facts.decoder_class))
        uneven = {a for a in facts.decoder_norms if a not in everywhere or a not in primary}
        uneven |= {facts.attn_attr} if facts.attn_attr else set()
        uneven |= {f"{facts.attn_attr}.{a}" for a in _norm_assignments(src, facts.attn_class)}
        facts.optional_norms = tuple(sorted(set(facts.optional_norms) | uneven))
    for attr, (cls, node) in _norm_assignments(src, facts.base_class).items():
        facts.final_norms[attr] = cls
        facts.cite("norm_attrs", node)
    for attr, (cls, node) in _norm_assignments(src, facts.attn_class).items():
        facts.attn_norms[attr] = cls
        facts.cite("norm_attrs", node)
    if facts.attn_alternatives:  # Bailing-hybrid: `Attention(...) if full else DeltaAttention(...)`
        optional = {f"{facts.attn_attr}.{a}" for a in facts.attn_norms}
        facts.optional_norms = tuple(sorted(set(facts.optional_norms) | optional))


def _read_rotary(facts: Facts) -> None:
    src = facts.src
    forward = src.method(facts.attn_class, "forward") if facts.attn_class else None
    used = called_names(forward) if forward else []
    for name in used:
        if name in src.functions and ("rotary" in name or "rope" in name):
            facts.rotary_fn = name
            facts.cite("rope", src.functions[name], max_lines=3)
            return


# -- AST decisions ---------------------------------------------------------------------------------------------


def _decision(value, facts: Facts, key: str, reason: str = "", method: Method = Method.AST) -> Decision:
    status = Status.NEEDS_REVIEW if reason and value is None else Status.SETTLED
    return Decision(value, method, tuple(facts.evidence.get(key, ())), status, reason)


def decide_norm_type(facts: Facts) -> Decision:
    families = {norm_family(facts.src, cls) for cls in {**facts.decoder_norms, **facts.final_norms}.values()}
    families.discard(None)
    if not families:
        return _decision("none", facts, "norm_attrs", "no norm layers on the decoder layer or the base model")
    value = families.pop() if len(families) == 1 else "both"
    return Decision(value, Method.AST, tuple(facts.evidence.get("norm_attrs", ())))


def decide_norm_attrs(facts: Facts) -> Decision:
    final = next(iter(facts.final_norms), None)
    value = {"decoder": list(facts.decoder_norms), "final": final, "attn": list(facts.attn_norms)}
    return Decision(value, Method.AST, tuple(facts.evidence.get("norm_attrs", ())))


# Methods whose backward hands the incoming gradient on as is (or as a view of it): a norm output passed
# through them still shares its gradient's storage with whatever the result is added to.
_ALIASING_METHODS = frozenset(
    "view reshape view_as reshape_as to type_as contiguous transpose permute clone squeeze unsqueeze flatten".split()
)
_COMPOUND = (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class AddedNorm:
    """A norm whose output (`bound`: where it was produced) is an operand of an add (`add`)."""

    attr: str
    bound: ast.stmt
    add: ast.stmt


def _norm_output(expr: ast.AST, norms, held: dict[str, tuple[str, ast.stmt]], stmt: ast.stmt):
    """(attr, statement that produced it) when `expr` is a norm's output or an alias of one, else None."""
    if isinstance(expr, ast.Name):
        return held.get(expr.id)
    if not isinstance(expr, ast.Call) or not isinstance(expr.func, ast.Attribute):
        return None
    func = expr.func
    if getattr(func.value, "id", None) == "self" and func.attr in norms:
        return func.attr, stmt
    if func.attr in _ALIASING_METHODS:
        return _norm_output(func.value, norms, held, stmt)
    return None


def _add_operands(stmt: ast.stmt) -> list[ast.AST]:
    operands: list[ast.AST] = []
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add):
        operands += [stmt.target, stmt.value]
    for node in ast.walk(stmt):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            operands += [node.left, node.right]
        elif isinstance(node, ast.Call) and dotted_name(node.func) in ("torch.add", "add"):
            operands += node.args[:2]
    return operands


def norm_outputs_added(method: ast.FunctionDef, norms) -> list[AddedNorm]:
    """Norms in `norms` whose output reaches a `+` / `torch.add` before its variable is rebound.

    Autograd hands an add's incoming gradient to both operands as the same tensor, so such a norm's dY is
    also the other operand's gradient: Liger's in-place backward (dX written into dY) would corrupt it.
    """
    held: dict[str, tuple[str, ast.stmt]] = {}
    found: dict[str, AddedNorm] = {}
    for stmt in statements(method.body):
        if isinstance(stmt, _COMPOUND):
            continue
        for operand in _add_operands(stmt):
            hit = _norm_output(operand, norms, held, stmt)
            if hit and hit[0] not in found:
                found[hit[0]] = AddedNorm(hit[0], hit[1], stmt)
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
        value = getattr(stmt, "value", None)
        for target in filter(None, targets):
            names = (
                [target] if isinstance(target, ast.Name) else [n for n in ast.walk(target) if isinstance(n, ast.Name)]
            )
            for name in names:
                held.pop(name.id, None)
            if isinstance(target, ast.Name) and value is not None and not isinstance(stmt, ast.AugAssign):
                hit = _norm_output(value, norms, held, stmt)
                if hit:
                    held[target.id] = hit
    return list(found.values())


def _scopes(facts: Facts) -> list[tuple[str | None, dict[str, str], str]]:
    """(class, its norms, the label prefix the probe uses) for the decoder layer, the base model, the attention."""
    return [
        (facts.decoder_class, facts.decoder_norms, ""),
        (facts.base_class, facts.final_norms, "final."),
        (facts.attn_class, facts.attn_norms, f"{facts.attn_attr}."),
    ]


def added_norms(facts: Facts) -> dict[str, AddedNorm]:
    """Every norm (probe label -> where) whose output some method of its owner adds to another tensor."""
    found: dict[str, AddedNorm] = {}
    for owner, norms, prefix in _scopes(facts):
        if not owner or not norms or owner not in facts.src.classes:
            continue
        for method in facts.src.classes[owner].body:
            if isinstance(method, ast.FunctionDef):
                for added in norm_outputs_added(method, norms):
                    found.setdefault(prefix + added.attr, added)
    return found


def _added_evidence(facts: Facts, added: AddedNorm) -> Evidence:
    first, last = added.bound.lineno, added.add.end_lineno or added.add.lineno
    if first > last or last - first > 12:
        return facts.src.evidence(added.add)
    return facts.src.span(first, last)


def decide_in_place(facts: Facts, built: probes.TinyModel) -> Decision:
    """May Liger's RMSNorm backward write dX into dY's storage? Only if no norm output is added to another tensor.

    The source read (`norm_outputs_added`) says which norms' outputs meet an add; the probe runs the tiny model's
    backward with every norm emulating that in-place write and compares all gradients with a plain backward.
    """
    suspects = added_norms(facts)
    evidence = [_added_evidence(facts, a) for a in suspects.values()]
    forward = facts.src.method(facts.decoder_class, "forward")
    if not evidence and forward is not None:
        evidence = [facts.src.evidence(forward, max_lines=40)]
    ast_value = not suspects
    said = ", ".join(f"{k} (line {a.add.lineno})" for k, a in suspects.items())
    ast_reason = f"outputs added to another tensor: {said}" if suspects else "no norm output is an operand of an add"
    try:
        result = probes.probe_in_place(built.model, built.run_forward, built.norm_groups(facts), tuple(suspects))
    except Exception as exc:  # a model whose tiny backward cannot run: the source read stands alone
        reason = f"{ast_reason}; the in-place probe could not run ({type(exc).__name__}: {str(exc)[:120]})"
        return Decision(ast_value, Method.AST, tuple(evidence), Status.SETTLED, reason)
    probed = {
        "gradients": result.residuals,  # per run: parameters whose gradient moved, of all, and the largest move
        "matched": result.matched,  # the norms that cannot backprop in place (all of them when the value is True)
        "tolerance": {"gradient_relative": probes.IN_PLACE_TOLERANCE},
    }
    first = evidence[0] if evidence else Evidence(facts.src.relative, (1, 1), facts.src.lines[0])
    evidence = [Evidence(first.file, first.lines, first.snippet, probed), *evidence[1:]]
    if result.value:
        reason = "gradients unchanged with every norm backpropagating in place"
        if suspects:
            reason += f" (though the source adds {said})"
    else:
        reason = f"in place changes the gradients through {', '.join(result.matched)}; {ast_reason}"
    return Decision(result.value, Method.PROBE, tuple(evidence), Status.SETTLED, reason)


def _causal_forward(facts: Facts) -> ast.FunctionDef:
    forward = facts.src.method(facts.ref.causal_lm_class, "forward")
    if forward is None:
        raise PipelineError(f"{facts.ref.causal_lm_class} has no forward in {facts.src.relative}")
    return forward


def decide_hidden_state_access(facts: Facts) -> Decision:
    forward = _causal_forward(facts)
    outputs_name = None
    for stmt in statements(forward.body):
        value = getattr(stmt, "value", None)
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and isinstance(value, ast.Call):
            func = value.func
            if isinstance(func, ast.Attribute) and dotted_name(func) == f"self.{facts.base_attr}":
                target = stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target
                outputs_name = getattr(target, "id", None)
                continue
        if outputs_name is None:
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == outputs_name:
                if node.attr == "last_hidden_state":
                    return Decision("outputs.last_hidden_state", Method.AST, (facts.src.evidence(stmt),))
            if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == outputs_name:
                if isinstance(node.slice, ast.Constant) and node.slice.value == 0:
                    return Decision("outputs[0]", Method.AST, (facts.src.evidence(stmt),))
    reason = f"{facts.ref.causal_lm_class}.forward reads no hidden state from self.{facts.base_attr}(...)"
    return Decision(None, Method.AST, (facts.src.evidence(forward, max_lines=30),), Status.NEEDS_REVIEW, reason)


def decide_output_class(facts: Facts) -> Decision:
    forward = _causal_forward(facts)
    for node in ast.walk(forward):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Call):
            name = called_names(node.value)[0].rsplit(".", 1)[-1]
            # `aux_loss=None  # Not used in this model` (HY-V3) carries no load-balancing loss
            fields = {
                kw.arg
                for kw in node.value.keywords
                if not (isinstance(kw.value, ast.Constant) and kw.value.value is None)
            }
            # decision-matrix rule 9: "MoE (has aux_loss)"; router_logits alone are only returned on request
            moe = MOE_LOSS_FIELD in fields
            value = "LigerMoeCausalLMOutputWithPast" if moe else "LigerCausalLMOutputWithPast"
            extra = sorted(fields & MOE_OUTPUT_FIELDS)
            reason = f"returns {name}" + (f" with {', '.join(extra)}" if extra else "")
            if extra and not moe:
                reason += " but no aux_loss: no load-balancing loss to carry"
            return Decision(value, Method.AST, (facts.src.evidence(node),), Status.SETTLED, reason)
    reason = f"{facts.ref.causal_lm_class}.forward returns no output class call"
    return Decision(None, Method.AST, (facts.src.evidence(forward, max_lines=30),), Status.NEEDS_REVIEW, reason)


def decide_softcapping(facts: Facts, config_src: SourceFile | None) -> Decision:
    evidence: list[Evidence] = []
    for source in filter(None, (config_src, facts.src)):
        for i, line in enumerate(source.lines, start=1):
            if "final_logit_softcapping" in line:
                evidence.append(source.span(i, i))
                break
    if evidence:
        return Decision(True, Method.AST, tuple(evidence), Status.SETTLED, "config defines final_logit_softcapping")
    where = config_src or facts.src
    return Decision(
        False, Method.AST, (where.span(1, 1),), Status.SETTLED, f"final_logit_softcapping absent from {where.relative}"
    )


# What may happen to the logits between lm_head and the loss without changing the loss Liger's fused linear cross
# entropy computes: slicing and dtype / layout methods. Softcapping is a decision of its own (logit_softcapping).
_LOGITS_PASS_THROUGH = frozenset("float to type_as contiguous view reshape".split())


def _calls_lm_head(node: ast.AST, head: str) -> bool:
    return any(isinstance(n, ast.Call) and dotted_name(n.func) == f"self.{head}" for n in ast.walk(node))


def _slices_the_vocabulary(index: ast.AST) -> bool:
    """`logits[..., :n]` / `logits[:, :, :n]`: fewer classes for the softmax, not a view of the same logits."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    last = parts[-1]
    whole = isinstance(last, ast.Slice) and last.lower is None and last.upper is None and last.step is None
    reaches_last = any(isinstance(p, ast.Constant) and p.value is Ellipsis for p in parts) or len(parts) >= 3
    return reaches_last and not whole


def _vocabulary_cut(index: ast.AST) -> ast.AST | None:
    """n of `[..., :n]` / `[:, :, :n]`: the first n classes, every position kept; None for any other index."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    *leading, last = parts
    whole = all(
        (isinstance(p, ast.Constant) and p.value is Ellipsis)
        or (isinstance(p, ast.Slice) and p.lower is None and p.upper is None and p.step is None)
        for p in leading
    )
    if not (leading and whole and _slices_the_vocabulary(index) and isinstance(last, ast.Slice)):
        return None
    return last.upper if last.lower is None and last.step is None else None


def _passes_through(value: ast.AST, logits: set[str]) -> bool:
    if isinstance(value, ast.Name):
        return value.id in logits
    if isinstance(value, ast.Subscript):
        return not _slices_the_vocabulary(value.slice) and _passes_through(value.value, logits)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        return value.func.attr in _LOGITS_PASS_THROUGH and _passes_through(value.func.value, logits)
    return False


def _is_lm_head_output(value: ast.AST, head: str) -> bool:
    if isinstance(value, ast.Call) and dotted_name(value.func) == f"self.{head}":
        return True
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        return value.func.attr in _LOGITS_PASS_THROUGH and _is_lm_head_output(value.func.value, head)
    return False


def _softcaps(stmt: ast.stmt) -> bool:
    """Gemma 2's `logits / cap`, `torch.tanh(logits)`, `logits * cap` with cap = config.final_logit_softcapping."""
    text = ast.unparse(stmt)
    return "softcap" in text or dotted_name(getattr(stmt.value, "func", ast.Name(""))) in ("torch.tanh", "tanh")


def _scalar_expr(node: ast.AST, forward: ast.FunctionDef) -> str | None:
    """The source of a scalar the forward reads from the model (`self.logit_scale`, `self.config.logits_scaling`,
    a number, or a local bound once to one of those), else None: only such a factor may be folded."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return ast.unparse(node)
    if isinstance(node, ast.Attribute) and dotted_name(node).startswith("self."):
        return dotted_name(node)
    if isinstance(node, ast.Name):
        bound = [
            s.value
            for s in statements(forward.body)
            if isinstance(s, ast.Assign) and any(getattr(t, "id", None) == node.id for t in s.targets)
        ]
        return _scalar_expr(bound[0], forward) if len(bound) == 1 else None
    return None


def _is_logits(node: ast.AST, logits: set[str], head: str) -> bool:
    """The logits, lm_head's output, or the hidden state on its way there (`outputs.last_hidden_state`)."""
    if isinstance(node, ast.Attribute) and node.attr == "last_hidden_state":
        return True
    return (isinstance(node, ast.Name) and node.id in logits) or _is_lm_head_output(node, head)


def _is_tanh(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and dotted_name(node.func).rsplit(".", 1)[-1] == "tanh" and len(node.args) == 1


def softcap_functions(src: SourceFile) -> dict[str, tuple[int, int]]:
    """Functions of the modeling file (top level, or under a top-level `if`) that return `c * tanh(x / c)`: name ->
    (position of x, position of c). xLSTM's `soft_cap(values, cap_value)`, which returns values when c is None."""
    found: dict[str, tuple[int, int]] = {}
    nodes = [n for top in src.tree.body for n in ([top] if not isinstance(top, ast.If) else [*top.body, *top.orelse])]
    for fn in (n for n in nodes if isinstance(n, ast.FunctionDef)):
        params = [a.arg for a in fn.args.args]
        returned = [s.value for s in fn.body if isinstance(s, ast.Return) and s.value is not None]
        value = returned[-1] if returned else None
        if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult)):
            continue
        for tanh, cap in ((value.left, value.right), (value.right, value.left)):
            inner = tanh.args[0] if _is_tanh(tanh) else None
            if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Div) and isinstance(cap, ast.Name):
                x, c = getattr(inner.left, "id", None), getattr(inner.right, "id", None)
                if c == cap.id and x in params and c in params and x != c:
                    found[fn.name] = (params.index(x), params.index(c))
    return found


def logits_op(
    stmt: ast.stmt,
    logits: set[str],
    forward: ast.FunctionDef,
    head: str,
    softcap_fns: dict[str, tuple[int, int]] | None = None,
) -> dict | None:
    """One statement of the forms Liger's fused linear cross entropy can reproduce exactly, as data:
    `logits * s` / `logits / s` (lm_head is linear and bias-free, so the factor folds into the hidden states, as
    Liger's own falcon_h1 forward does with `lm_head_multiplier`) and `tanh(logits / c) * c` (FLCE's `softcap`),
    written out or as a call of one of `softcap_fns` (`soft_cap(logits, self.config.output_logit_soft_cap)`)."""
    value = stmt.value
    if isinstance(stmt, ast.Assign) and isinstance(value, ast.Subscript) and _is_logits(value.value, logits, head):
        # `logits[..., :n]` (Inkling: a padded vocabulary cut to config.unpadded_vocab_size): the loss of the first n
        # classes is FLCE's with the head's first n weight rows (`weight[:None]` is all of them, as the HF slice
        # is skipped where n is None)
        upper = _vocabulary_cut(value.slice)
        cut = _scalar_expr(upper, forward) if upper is not None else None
        return {"vocab_slice": cut} if cut else None
    if isinstance(value, ast.Call) and getattr(value.func, "id", None) in (softcap_fns or {}):
        x, c = (softcap_fns or {})[value.func.id]
        if len(value.args) == 2 and not value.keywords and _is_logits(value.args[x], logits, head):
            cap = _scalar_expr(value.args[c], forward)
            return {"softcap": cap} if cap else None
        return None
    if isinstance(stmt, ast.AugAssign):
        if not (isinstance(stmt.op, ast.Mult | ast.Div) and _is_logits(stmt.target, logits, head)):
            return None
        value = ast.BinOp(stmt.target, stmt.op, stmt.value)
    if not isinstance(value, ast.BinOp) or not isinstance(value.op, ast.Mult | ast.Div):
        return None
    left, right = value.left, value.right
    if isinstance(value.op, ast.Mult) and _is_tanh(left):
        inner = left.args[0]
        if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Div) and _is_logits(inner.left, logits, head):
            cap, outer = _scalar_expr(inner.right, forward), _scalar_expr(right, forward)
            return {"softcap": cap} if cap and cap == outer else None
        return None
    if isinstance(value.op, ast.Mult) and _is_logits(right, logits, head) and not _is_logits(left, logits, head):
        left, right = right, left
    factor = _scalar_expr(right, forward) if _is_logits(left, logits, head) else None
    if factor is None:
        return None
    return {"multiply" if isinstance(value.op, ast.Mult) else "divide": factor}


def _reads_hidden_state(value: ast.AST, outputs: set[str]) -> bool:
    """`outputs.last_hidden_state` / `outputs[0]` of what the base model returned."""
    for node in ast.walk(value):
        if isinstance(node, ast.Attribute) and node.attr == "last_hidden_state":
            return getattr(node.value, "id", None) in outputs
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) in outputs:
            return isinstance(node.slice, ast.Constant) and node.slice.value == 0
    return False


def _hidden_passes_through(value: ast.AST, hidden: set[str], read: bool = False) -> bool:
    """Slicing (`h[:, idx]`, `slice_logits_to_keep(h, k)`) and casts leave the hidden state's values as they are;
    `read`: `value` reads the hidden state from the base model's output itself (`outputs.last_hidden_state`)."""
    if read and isinstance(value, ast.Attribute | ast.Subscript) and not isinstance(value.ctx, ast.Store):
        if isinstance(value, ast.Attribute) or not _slices_the_vocabulary(value.slice):
            return True
    if _passes_through(value, hidden):
        return True
    if isinstance(value, ast.Call) and "slice" in dotted_name(value.func):
        return bool(value.args) and _hidden_passes_through(value.args[0], hidden, read)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        return value.func.attr in _LOGITS_PASS_THROUGH and _hidden_passes_through(value.func.value, hidden, read)
    return False


def _head_input_passes_through(stmt: ast.stmt, hidden: set[str], head: str) -> bool:
    """The head's argument is the hidden state as the base model returned it (TrOCR: `self.output_projection(
    outputs[0])`), sliced or cast at most: a scale inside the call (`lm_head(h * s)`) is a transform too."""
    calls = [n for n in ast.walk(stmt.value) if isinstance(n, ast.Call) and dotted_name(n.func) == f"self.{head}"]
    return all(len(c.args) == 1 and _hidden_passes_through(c.args[0], hidden, read=True) for c in calls)


def _pre_head(stmt: ast.stmt, hidden: set[str], facts: Facts) -> str | None:
    """`self.decoder(self.lm_head(h))` (ModernBERT-decoder: a prediction head, dense + activation + norm, before the
    vocabulary projection): `self.lm_head` when the head's one argument is a call of another module the CausalLM
    builds in its __init__, on the hidden state as the base model returned it. Not a transform of the logits: the
    loss is that of `head(module(h))`, and FLCE computes it from `module(h)` and the head's weight."""
    value = stmt.value
    if not (isinstance(value, ast.Call) and dotted_name(value.func) == f"self.{facts.head_attr}"):
        return None
    if len(value.args) != 1 or value.keywords or not isinstance(value.args[0], ast.Call):
        return None
    inner = value.args[0]
    name = dotted_name(inner.func)
    own = {a.attr for a in facts.src.self_assignments(facts.ref.causal_lm_class) if a.classes}
    attr = name.removeprefix("self.")
    if not name.startswith("self.") or attr not in own or attr in (facts.head_attr, facts.base_attr.split(".")[0]):
        return None
    if len(inner.args) != 1 or inner.keywords or not _hidden_passes_through(inner.args[0], hidden, read=True):
        return None
    return name


def head_scale(facts: Facts) -> tuple[str, ast.AST] | None:
    """The factor a head class of the modeling file multiplies its linear output by, as an expression on the head
    (`self.lm_head.logit_scale.float() * self.lm_head.logit_scale_factor`): Dory's `DoryLMHead(nn.Linear)` returns
    `super().forward(h).float() * (self.logit_scale.float() * self.logit_scale_factor)`. A per-class (or scalar)
    factor is a factor on the weight's rows, so FLCE gets `weight * factor[:, None]`. None for a plain head."""
    src, head = facts.src, facts.head_attr
    assign = next((a for a in src.self_assignments(facts.ref.causal_lm_class) if a.attr == head), None)
    local = _local(src, assign.classes) if assign else []
    forward = src.method(local[0], "forward") if local else None
    if forward is None or not any(b.rsplit(".", 1)[-1] == "Linear" for b in src.external_bases(local[0])):
        return None
    linear: set[str] = set()
    for stmt in forward.body:
        if isinstance(stmt, ast.Assign) and _is_linear_output(stmt.value):
            linear |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    returned = forward.body[-1].value if isinstance(forward.body[-1], ast.Return) else None
    if not (isinstance(returned, ast.BinOp) and isinstance(returned.op, ast.Mult)):
        return None
    for out, factor in ((returned.left, returned.right), (returned.right, returned.left)):
        is_out = (isinstance(out, ast.Name) and out.id in linear) or _is_linear_output(out)
        reads = [n for n in ast.walk(factor) if isinstance(n, ast.Name)]
        if is_out and reads and all(n.id == "self" for n in reads):  # only the head's own attributes
            return ast.unparse(factor).replace("self.", f"self.{head}."), forward.body[-1]
    return None


def _is_linear_output(node: ast.AST) -> bool:
    """`super().forward(x)`, optionally cast (`.float()`): nn.Linear's own output."""
    while (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _LOGITS_PASS_THROUGH
    ):
        node = node.func.value
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "forward"):
        return False
    inner = node.func.value
    return isinstance(inner, ast.Call) and getattr(inner.func, "id", None) == "super"


def lm_head_has_bias(src, causal_lm_class: str, head: str) -> bool | None:
    """Whether `self.lm_head = nn.Linear(...)` in the CausalLM keeps nn.Linear's default bias (Phi: bias=True);
    None when the class builds no lm_head this way."""
    for assign in src.self_assignments(causal_lm_class):
        if assign.attr == head and isinstance(getattr(assign.node, "value", None), ast.Call):
            return not any(
                kw.arg == "bias" and isinstance(kw.value, ast.Constant) and kw.value.value is False
                for kw in assign.node.value.keywords
            )
    return None


def lm_head_bias_free(facts: Facts) -> bool:
    """A scale on the logits folds into the hidden states only when there is no bias to scale with them."""
    return lm_head_has_bias(facts.src, facts.ref.causal_lm_class, facts.head_attr) is False


def lm_head_input_cast(src, causal_lm_class: str, head: str) -> str | None:
    """`self.lm_head(h.to(DTYPE))` in the CausalLM's forward (Mamba: the mixer's fp32 output is cast to the
    lm_head's dtype): the DTYPE expression, which FLCE's input needs as well."""
    forward = src.method(causal_lm_class, "forward")
    for node in ast.walk(forward) if forward else ():
        if isinstance(node, ast.Call) and dotted_name(node.func) == f"self.{head}" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "to":
                return ast.unparse(arg.args[0]) if len(arg.args) == 1 else None
    return None


# What the CausalLM's own loss call may pass as vocab_size and the generated forward can repeat: the config's
# field, or the logits' own width (Inkling 2: lm_head writes `unpadded_vocab_size`, fewer than `vocab_size`).
_VOCAB_SIZE_FORMS = re.compile(r"^(self\.config(\.[A-Za-z_][A-Za-z0-9_]*)+|logits\.shape\[-1\]|logits\.size\(-1\))$")


def loss_vocab_size(src, causal_lm_class: str) -> str:
    """The `vocab_size=` the CausalLM's forward hands `self.loss_function`, where it is one of _VOCAB_SIZE_FORMS;
    Liger's forwards' `self.config.vocab_size` otherwise."""
    forward = src.method(causal_lm_class, "forward")
    for node in ast.walk(forward) if forward else ():
        if isinstance(node, ast.Call) and dotted_name(node.func) == "self.loss_function":
            given = next((ast.unparse(k.value) for k in node.keywords if k.arg == "vocab_size"), None)
            if given and _VOCAB_SIZE_FORMS.match(given):
                return given
    return "self.config.vocab_size"


def _own_loss(forward: ast.FunctionDef) -> ast.stmt | None:
    """`loss = loss_fct(logits.view(-1, V), labels.view(-1))` (TrOCR, Whisper's decoder: unshifted labels) in a
    forward that never calls self.loss_function; None where it does (or computes no loss)."""
    calls = {dotted_name(n.func) for n in ast.walk(forward) if isinstance(n, ast.Call)}
    if "self.loss_function" in calls:
        return None
    return next(
        (
            s
            for s in statements(forward.body)
            if isinstance(s, ast.Assign)
            and any(getattr(t, "id", None) == "loss" for t in s.targets)
            and isinstance(s.value, ast.Call)
        ),
        None,
    )


def _unshifted_cross_entropy(own_loss: ast.stmt, forward: ast.FunctionDef, logits: set[str]) -> bool:
    """`loss_fct(logits.view(-1, V), labels.view(-1))` with `loss_fct = CrossEntropyLoss()` bound in the forward
    (TrOCR, Whisper's decoder): a plain mean over the tokens whose label is not -100, no shift."""
    call = own_loss.value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and len(call.args) == 2):
        return False
    bound = [
        s.value
        for s in statements(forward.body)
        if isinstance(s, ast.Assign) and any(getattr(t, "id", None) == call.func.id for t in s.targets)
    ]
    plain = (
        len(bound) == 1
        and isinstance(bound[0], ast.Call)
        and dotted_name(bound[0].func).rsplit(".", 1)[-1] == "CrossEntropyLoss"
        and not bound[0].args
        and not bound[0].keywords
    )

    def flattened(node: ast.AST, names: set[str], rank: int) -> bool:
        ok = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        ok = ok and node.func.attr in ("view", "reshape") and len(node.args) == rank and not node.keywords
        first = node.args[0] if ok else None
        is_minus_one = isinstance(first, ast.UnaryOp) and getattr(first.operand, "value", None) == 1
        return ok and is_minus_one and getattr(node.func.value, "id", None) in names

    return plain and flattened(call.args[0], logits, 2) and flattened(call.args[1], {"labels"}, 1)


def decide_logits_transform(facts: Facts) -> Decision:
    """Settled None when CausalLM.forward passes lm_head's output to the loss untouched (slicing, casts and
    config-driven softcapping aside); settled with the ops as data (`[{"multiply": "self.logit_scale"}]`,
    `[{"softcap": "cap"}]`) when every transform is one Liger's FLCE reproduces exactly; needs review, citing each
    statement, otherwise."""
    forward = _causal_forward(facts)
    logits: set[str] = set()
    outputs: set[str] = set()  # what self.<base>(...) returned
    hidden: set[str] = set()  # the base model's last hidden state, on its way to lm_head
    extra: list[ast.stmt] = []
    pre_heads: list[dict] = []  # the CausalLM's own modules between the hidden state and the head (as data)
    for stmt in statements(forward.body):
        if not isinstance(stmt, ast.Assign | ast.AugAssign | ast.AnnAssign) or stmt.value is None:
            continue
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        if isinstance(stmt.value, ast.Call) and dotted_name(stmt.value.func) == f"self.{facts.base_attr}":
            outputs |= names
            continue
        head_call = _calls_lm_head(stmt.value, facts.head_attr)
        if not logits and _reads_hidden_state(stmt.value, outputs) and not head_call:
            hidden |= names
            if not _hidden_passes_through(stmt.value, hidden, read=True):  # read and scaled at once (Inkling)
                extra.append(stmt)
            continue
        if not logits and names & hidden and not head_call:
            # MiniCPM3: `hidden_states = hidden_states / self.config.logits_scaling` before lm_head
            if isinstance(stmt, ast.AugAssign) or not _hidden_passes_through(stmt.value, hidden):
                extra.append(stmt)
            continue
        if head_call:
            logits |= names
            pre_head = _pre_head(stmt, hidden, facts)
            if pre_head:
                pre_heads.append({"pre_head": pre_head})
            # Falcon-H1: self.lm_head(h) * self.model.lm_head_multiplier; a scale inside the call: lm_head(h * s)
            elif not _is_lm_head_output(stmt.value, facts.head_attr) or not _head_input_passes_through(
                stmt, hidden, facts.head_attr
            ):
                extra.append(stmt)
            continue
        if not names & logits:
            continue
        if isinstance(stmt, ast.AugAssign) or not (_passes_through(stmt.value, logits) or _softcaps(stmt)):
            extra.append(stmt)
    if not logits:
        reason = f"{facts.ref.causal_lm_class}.forward calls no self.{facts.head_attr}"
        return Decision(None, Method.AST, (facts.src.evidence(forward, max_lines=30),), Status.NEEDS_REVIEW, reason)
    own_loss = _own_loss(forward)
    markers, said = list(pre_heads), []
    scale = head_scale(facts)
    if scale:
        markers.append({"head_scale": scale[0]})
        said.append(
            f"self.{facts.head_attr}'s own forward scales its linear output: `{ast.unparse(scale[1])}`; FLCE gets its "
            f"weight with each row scaled by `{scale[0]}`"
        )
    if pre_heads:
        modules = ", ".join(op["pre_head"] for op in pre_heads)
        said.append(
            f"the hidden states pass through {modules} (a module of the CausalLM's own) before the vocabulary "
            f"projection self.{facts.head_attr}: FLCE takes that module's output as its hidden states"
        )
    if own_loss is not None and _unshifted_cross_entropy(own_loss, forward, logits):
        markers.append({"unshifted_labels": True})
        said.append(
            f"the loss is `{ast.unparse(own_loss)}`: the mean cross entropy of logits[:, i] against labels[:, i], "
            "which FLCE and transformers' loss compute when handed the labels as `shift_labels`"
        )
    elif own_loss is not None:
        reason = (
            f"the loss is `{ast.unparse(own_loss)}`, not `self.loss_function` (transformers' causal-LM loss, which "
            "shifts the labels by one as Liger's fused linear cross entropy forward does)"
        )
        return Decision(None, Method.AST, (facts.src.evidence(own_loss),), Status.NEEDS_REVIEW, reason)
    if not extra and markers:
        evidence = (facts.src.evidence(forward, max_lines=40),) + ((facts.src.evidence(own_loss),) if own_loss else ())
        return Decision(markers, Method.AST, evidence, Status.SETTLED, "; ".join(said))
    if not extra:
        evidence = (facts.src.evidence(forward, max_lines=40),)
        return Decision(
            None, Method.AST, evidence, Status.SETTLED, f"{facts.head_attr}'s output reaches the loss unchanged"
        )
    found = "; ".join(ast.unparse(s) for s in extra)
    evidence = tuple(facts.src.evidence(s) for s in extra)
    fns = softcap_functions(facts.src)
    ops = [logits_op(s, logits | hidden, forward, facts.head_attr, fns) for s in extra]
    cuts = [op for op in ops if op and "vocab_slice" in op]  # a cut of the vocabulary commutes with the others
    ops_ = [op for op in ops if not (op and "vocab_slice" in op)]
    scales_only = all(ops_) and not any("softcap" in op for op in ops_) and (not ops_ or lm_head_bias_free(facts))
    if len(cuts) <= 1 and (scales_only or (len(ops_) == 1 and ops_[0] and "softcap" in ops_[0])):
        reason = f"the logits are transformed between lm_head and the loss: {found}; FLCE reproduces it exactly"
        return Decision(markers + ops, Method.AST, evidence, Status.SETTLED, "; ".join([*said, reason]))
    reason = f"the logits are transformed between lm_head and the loss: {found}"
    if all(ops) and not lm_head_bias_free(facts):
        reason += " (lm_head has a bias: the scale cannot be folded into the hidden states)"
    return Decision(found, Method.AST, evidence, Status.NEEDS_REVIEW, reason)


def decide_has_vision(facts: Facts, config_src: SourceFile | None) -> Decision:
    forward = _causal_forward(facts)
    params = parameters(forward)
    if "pixel_values" in params:
        return Decision(
            True, Method.AST, (facts.src.evidence(forward, max_lines=3),), reason="forward takes pixel_values"
        )
    config_class = facts.ref.config_class
    if config_src and config_class in config_src.classes:
        node = config_src.classes[config_class]
        for child in ast.walk(node):
            target = getattr(child, "target", None) or (getattr(child, "targets", None) or [None])[0]
            if getattr(target, "id", None) == "vision_config" or getattr(target, "attr", None) == "vision_config":
                return Decision(True, Method.AST, (config_src.evidence(child),), reason="config has a vision_config")
    evidence = (facts.src.evidence(forward, max_lines=3),)
    return Decision(False, Method.AST, evidence, Status.SETTLED, "no pixel_values in forward, no vision_config")


# -- probe decisions -------------------------------------------------------------------------------------------


def _probe_decision(result: probes.ProbeResult, value, evidence: Evidence, reason: str = "") -> Decision:
    probed = Evidence(evidence.file, evidence.lines, evidence.snippet, result.to_json())
    if not result.settled:
        return Decision(value, Method.PROBE, (probed,), Status.NEEDS_REVIEW, result.reason)
    return Decision(value, Method.PROBE, (probed,), Status.SETTLED, reason)


def decide_norm_semantics(facts: Facts, built: probes.TinyModel) -> dict[str, Decision]:
    """rms_casting_mode and rms_offset from the decoder's first norm; every other norm class must agree."""
    norms = built.norm_modules(facts)
    if not norms:
        none = Decision(None, Method.PROBE, (), Status.SETTLED, "the model has no norm layers")
        return {"rms_casting_mode": none, "rms_offset": none}
    results = {}
    for cls_name, module in norms.items():
        try:
            results[cls_name] = probes.probe_norm(module, built.hidden_size_of(module))
        except Exception as exc:  # LongCat's norm attribute is a ModuleList: no single norm to run
            results[cls_name] = probes.ProbeResult(None, [], {}, f"the probe cannot run {cls_name}: {_brief(exc)}")
    first_cls = next(iter(norms))
    first = results[first_cls]
    node = facts.src.method(first_cls, "forward") or facts.src.classes.get(first_cls)
    evidence = facts.src.evidence(node) if node is not None else Evidence(facts.src.relative, (1, 1), "")
    disagree = [c for c, r in results.items() if r.settled and first.settled and r.value != first.value]
    family, mode, offset = first.value if first.settled else (None, None, None)
    reason = ""
    if disagree:
        reason = f"{', '.join(disagree)} compute differently from {first_cls}: " + "; ".join(
            f"{c}={results[c].value}" for c in disagree
        )
    casting = _probe_decision(first, mode, evidence, reason or f"{first_cls}: {first.matched}")
    offset_d = _probe_decision(first, offset, evidence, reason)
    if disagree:
        casting = Decision(mode, Method.PROBE, casting.evidence, Status.NEEDS_REVIEW, reason)
        offset_d = Decision(offset, Method.PROBE, offset_d.evidence, Status.NEEDS_REVIEW, reason)
    if family == "layer":
        casting = Decision(None, Method.PROBE, casting.evidence, casting.status, "LayerNorm: no RMSNorm casting mode")
    return {"rms_casting_mode": casting, "rms_offset": offset_d, "_family": family}


def _brief(exc: Exception) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"


def _probe_or_why(probe, module, *args) -> probes.ProbeResult:
    """The probe's result, or an unsettled one saying why it could not run (JetMoE's experts refuse a call)."""
    try:
        return probe(module, *args)
    except Exception as exc:
        return probes.ProbeResult(None, [], {}, f"the probe cannot run {type(module).__name__}: {_brief(exc)}")


NO_MLP_REASON = (
    "the decoder layer has no MLP attribute (mixer-only layers, as in Mamba; or a feed-forward written inline): "
    "no Liger MLP module to swap in, the norms and the loss are patched (as Liger's falcon_h1 patches its mixers' "
    "neighbours)"
)


def decide_mlp_kind(facts: Facts, built: probes.TinyModel) -> Decision:
    if not facts.mlp_attr:
        evidence = (facts.src.evidence(facts.src.classes[facts.decoder_class], max_lines=20),)
        return Decision("none", Method.AST, evidence, Status.SETTLED, NO_MLP_REASON)
    found: list[tuple[str, probes.ProbeResult]] = []
    dense = built.dense_mlp(facts)
    if dense is not None:
        found.append((type(dense).__name__, _probe_or_why(probes.probe_mlp, dense, built.config.hidden_size)))
    experts = built.experts(facts)
    if experts is not None:
        args = (built.config.hidden_size, built.num_experts, built.top_k)
        found.append((type(experts).__name__, _probe_or_why(probes.probe_experts, experts, *args)))
    if not found:
        return Decision(None, Method.PROBE, (), Status.NEEDS_REVIEW, "no MLP or experts module found to probe")
    evidence = []
    for cls_name, result in found:
        node = facts.src.method(cls_name, "forward") or facts.src.classes.get(cls_name)
        base = facts.src.evidence(node) if node is not None else Evidence(facts.src.relative, (1, 1), cls_name)
        evidence.append(Evidence(base.file, base.lines, base.snippet, {"module": cls_name, **result.to_json()}))
    found = [(c, probes.ProbeResult("none", [], r.residuals) if _nothing_reproduces(r) else r) for c, r in found]
    values = {r.value for _, r in found if r.settled}
    unsettled = [f"{c}: {r.reason}" for c, r in found if not r.settled]
    if unsettled or len(values) != 1:
        reason = "; ".join(unsettled) or f"dense MLP and experts differ: {sorted(map(str, values))}"
        value = values.pop() if len(values) == 1 else None
        return Decision(value, Method.PROBE, tuple(evidence), Status.NEEDS_REVIEW, reason)
    value = values.pop()
    if value == "none":
        reason = "no Liger MLP kernel reproduces " + "; ".join(f"{c}: {_why_not(r)}" for c, r in found)
        return Decision(value, Method.PROBE, tuple(evidence), Status.SETTLED, reason)
    if value not in ("swiglu", "geglu", "phi3_swiglu", "relu_squared"):
        reason = f"{value}: Liger has no kernel for this MLP"
        return Decision(value, Method.PROBE, tuple(evidence), Status.NEEDS_REVIEW, reason)
    proven = " / ".join(f"{c}: {r.matched[0]}" for c, r in found)
    pre_routed = [c for c, r in found if r.convention == probes.PRE_ROUTED]
    if pre_routed:
        proven += f"; {', '.join(pre_routed)} take pre-routed rows: act leaves them to HF, as LigerExperts cannot"
    return Decision(value, Method.PROBE, tuple(evidence), Status.SETTLED, proven)


def decide_structure(facts: Facts, built: probes.TinyModel) -> Decision:
    kinds = built.layer_kinds(facts)  # per layer of the default config: "moe" | "dense"
    evidence = tuple(facts.evidence.get("structure", ()))
    if not facts.mlp_attr:
        evidence = (facts.src.evidence(facts.src.classes[facts.decoder_class], max_lines=20),)
        return Decision("dense", Method.AST, evidence, Status.SETTLED, f"no experts to route; {NO_MLP_REASON}")
    if not kinds:
        return Decision(None, Method.PROBE, evidence, Status.NEEDS_REVIEW, "no MLP attribute on the decoder layer")
    counts = {k: kinds.count(k) for k in sorted(set(kinds))}
    value = "hybrid" if len(counts) > 1 else kinds[0]
    probe = {"default_config_layers": counts}
    evidence = tuple(Evidence(e.file, e.lines, e.snippet, probe) for e in evidence)
    return Decision(value, Method.PROBE, evidence, Status.SETTLED, f"layers of the default config: {counts}")


def decide_rope(facts: Facts, built: probes.TinyModel) -> Decision:
    if facts.rotary_fn is None:
        forward = facts.src.method(facts.attn_class, "forward") if facts.attn_class else None
        evidence = (facts.src.evidence(forward, max_lines=30),) if forward else ()
        return Decision("none", Method.AST, evidence, Status.SETTLED, "the attention calls no rotary function")
    node = facts.src.functions[facts.rotary_fn]
    evidence = facts.src.evidence(node, max_lines=40)
    other_layout = _rotary_calls_in_another_layout(facts)
    if other_layout is not None:
        reason = (
            f"{facts.rotary_fn} is also called as `{ast.unparse(other_layout).strip()[:120]}` (line "
            f"{other_layout.lineno}): tensors laid out [batch, seq, heads, head_dim]; Liger's rope kernel takes "
            "[batch, heads, seq, head_dim] only, and the module-level swap would reach that call too"
        )
        return Decision("none", Method.AST, (facts.src.evidence(other_layout), evidence), Status.SETTLED, reason)
    call = built.capture_rotary(facts)
    if call is None:
        reason = f"{facts.rotary_fn} was not called by a forward pass of the tiny model"
        return Decision(None, Method.PROBE, (evidence,), Status.NEEDS_REVIEW, reason)
    fn, args, kwargs = call
    result = probes.probe_rope(fn, parameters(node), args, kwargs)
    reason = ""
    if result.settled and result.value == "none":
        reason = f"{result.matched[0]}: Liger's rotary kernels cannot run it"
    if result.settled and result.matched == ["partial_rotary"]:
        reason = "partial rotary: liger_rotary_pos_emb rotates the first cos.shape[-1] dims (ops/rope.py)"
    if not result.settled and _nothing_reproduces(result):
        result = probes.ProbeResult("none", [], result.residuals)
        reason = f"none of Liger's rotary kernels reproduces {facts.rotary_fn}: {_why_not(result)}"
    return _probe_decision(result, result.value, evidence, reason)


def _rotary_calls_in_another_layout(facts: Facts) -> ast.Call | None:
    """A call of the rotary function anywhere in the file with `unsqueeze_dim` other than 1 (HY-V4's indexer),
    which the probe's first captured call would not show."""
    for call in ast.walk(facts.src.tree):
        if not isinstance(call, ast.Call) or dotted_name(call.func) != facts.rotary_fn:
            continue
        dims = [kw.value for kw in call.keywords if kw.arg == "unsqueeze_dim"] + call.args[4:5]
        if any(not (isinstance(d, ast.Constant) and d.value == 1) for d in dims):
            return call
    return None


def _experts_convention(facts: Facts, built: probes.TinyModel) -> str | None:
    experts = built.experts(facts)
    if experts is None:
        return None
    convention = probes.experts_convention(experts)
    if convention == probes.ROUTED and probes.serves_weightless_experts(experts, built.config.hidden_size):
        return probes.WEIGHTLESS_EXPERTS
    return convention


def _nothing_reproduces(result: probes.ProbeResult) -> bool:
    """Every candidate ran or was ruled out on the HF call's own inputs, and none matched (a proven "none")."""
    return result.reason == probes.NO_MATCH and bool(result.residuals)


def _why_not(result: probes.ProbeResult) -> str:
    parts = []
    for name, score in result.residuals.items():
        parts.append(
            f"{name} n/a ({score['n/a'][:60]})" if "n/a" in score else f"{name} off by {score.get('fp32'):.2g}"
        )
    return "; ".join(parts)


def _not_rms(norm: dict[str, Decision], family: str | None) -> Decision:
    evidence = norm["rms_offset"].evidence
    reason = "LayerNorm: LigerLayerNorm has no in_place option" if family == "layer" else "no RMSNorm to run in place"
    return Decision(None, Method.PROBE, evidence, Status.SETTLED, reason)


# -- the stage -------------------------------------------------------------------------------------------------


def identity(facts: Facts, built: probes.TinyModel) -> Identity:
    src, ref = facts.src, facts.ref
    prefix_node = src.class_attribute(ref.causal_lm_class, "base_model_prefix")
    prefix = prefix_node.value.value if prefix_node and isinstance(prefix_node.value, ast.Constant) else facts.base_attr
    norm_class = next(iter({**facts.decoder_norms, **facts.final_norms}.values()), None)
    return Identity(
        model_type=ref.model_type,
        display_name=ref.display_name,
        causal_lm_class=ref.causal_lm_class,
        base_model_class=facts.base_class,
        config_class=ref.config_class,
        decoder_layer_class=facts.decoder_class,
        modeling_module=f"transformers.models.{ref.module_name}.{src.path.stem}",
        modeling_file=src.relative,
        base_model_prefix=prefix,
        base_model_attr=facts.base_attr,
        output_head_attr=facts.head_attr,
        layers_attr=facts.layers_attr,
        mlp_attr=facts.mlp_attr or "mlp",
        norm_class=norm_class,
        mlp_class=facts.mlp_classes[0] if facts.mlp_classes else None,
        experts_class=facts.experts_class,
        experts_attr=facts.experts_attr,
        experts_convention=_experts_convention(facts, built),
        shared_mlp_attr=facts.shared_attr,
        shared_mlp_class=facts.shared_class,
        attn_attr=facts.attn_attr or "self_attn",
        optional_attrs=facts.optional_norms,
        rotary_fn=facts.rotary_fn,
        forward_params=parameters(_causal_forward(facts)),
        derived_from=modular_parents(src.path, (facts.decoder_class, facts.base_class, ref.causal_lm_class)),
    )


def _where(error: Exception) -> str:
    """The innermost transformers frame of an exception (`transformers/models/x/modeling_x.py:560`)."""
    import traceback

    frames = [f for f in traceback.extract_tb(error.__traceback__) if "/transformers/" in f.filename]
    if not frames:
        return ""
    path = frames[-1].filename
    return f" at {path[path.rindex('/transformers/') + 1 :]}:{frames[-1].lineno}"


def build_tiny(ref: ModelRef, module, config_class, facts: Facts) -> probes.TinyModel:
    """The probes' tiny model, or a refusal that says why none can be built (a crash here would be our bug)."""
    try:
        return probes.TinyModel.build(module, config_class, facts)
    except probes.UnbuildableModel as exc:
        what = f"{type(exc.error).__name__}: {' '.join(str(exc.error).split())[:240]}{_where(exc.error)}"
        multimodal = ref.model_type in mappings().multimodal
        if not exc.default_builds:
            why = f"transformers' own default {config_class.__name__}() cannot build {facts.base_class} either"
        else:
            why = f"{facts.base_class} cannot be built and run at any CPU-sized config (its default config builds)"
        siblings = [m for m, c in mappings().causal.items() if c == ref.causal_lm_class and m != ref.model_type]
        if multimodal:
            why += (
                f"; it is an image-text model_type whose {ref.causal_lm_class} is also {', '.join(siblings)}'s"
                if siblings
                else "; it is an image-text model whose text part has no model_type of its own"
            )
        raise PipelineError(
            f"{ref.model_type}: the probes' tiny model fails ({what}); {why}",
            hint="nothing can be proven about this model on the CPU; patch it by hand or fix the modeling code",
        ) from None


def own_config_class(src: SourceFile, ref: ModelRef) -> str:
    """The config class the CausalLM is built with: its `config: X` annotation (Emu3ForCausalLM takes
    Emu3TextConfig, not the image-text Emu3Config that transformers maps emu3 to), else the mapped one."""
    for owner in src.lineage(ref.causal_lm_class):
        for node in src.classes[owner].body if owner in src.classes else []:
            target = getattr(node, "target", None)
            if isinstance(node, ast.AnnAssign) and getattr(target, "id", None) == "config":
                annotation = node.annotation
                is_text = isinstance(annotation, ast.Constant) and isinstance(annotation.value, str)
                name = annotation.value if is_text else dotted_name(annotation)
                if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*Config", name) and configuration_path(ref.module_name, name):
                    return name
    return ref.config_class


def registry_keys(ref: ModelRef, config_src: SourceFile | None) -> tuple[str, ...]:
    """Every `config.model_type` a model of this CausalLM class reports, so Liger's registry finds it: the model
    types transformers maps to the class (dots3_note and dots3_note_text), and its config class's own model_type
    (Emu3TextConfig: emu3_text_model), as Liger registers mllama_text_model beside mllama."""
    maps = mappings()
    keys = [ref.model_type]
    keys += [m for m, cls in maps.causal.items() if cls == ref.causal_lm_class and module_name(m) == ref.module_name]
    node = config_src.class_attribute(ref.config_class, "model_type") if config_src else None
    if node is not None and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        keys.append(node.value.value)
    return tuple(dict.fromkeys(k for k in keys if k))


def owner_model_type(home: str, causal_lm_class: str) -> str:
    """The model_type transformers maps to `causal_lm_class` from the folder that defines it (LlamaForCausalLM in
    llama/: "llama"), the key of that model's entry in Liger's registry."""
    maps = mappings()
    owners = [m for m, cls in maps.causal.items() if cls == causal_lm_class and module_name(m) == home]
    return owners[0] if owners else home


def understand(name: str) -> Profile:
    ref = resolve(name)
    facts = read_facts(ref)
    home = facts.ref.module_name if facts.ref.module_name != ref.module_name else None  # exaone: llama
    own = own_config_class(facts.src, ref)
    if own != ref.config_class:
        ref = replace(ref, config_class=own)
        facts.ref = replace(facts.ref, config_class=own)
    config_path = configuration_path(ref.module_name, ref.config_class)
    config_src = load(config_path) if config_path else None
    package = f"transformers.models.{ref.module_name}"
    module = importlib.import_module(f"transformers.models.{facts.ref.module_name}.{facts.src.path.stem}")
    config_module = importlib.import_module(f"{package}.{config_path.stem}") if config_path else module
    built = build_tiny(ref, module, getattr(config_module, ref.config_class), facts)

    norm = decide_norm_semantics(facts, built)
    norm_type = decide_norm_type(facts)
    family = norm.pop("_family", None)
    if family and norm_type.value not in (family, "both"):
        reason = f"class names say {norm_type.value}, the probe computes {family}"
        norm_type = Decision(family, Method.PROBE, norm_type.evidence, Status.NEEDS_REVIEW, reason)
    decisions = {
        "norm_type": norm_type,
        **norm,
        "rms_in_place": decide_in_place(facts, built) if family == "rms" else _not_rms(norm, family),
        "mlp_kind": decide_mlp_kind(facts, built),
        "structure": decide_structure(facts, built),
        "has_vision": decide_has_vision(facts, config_src),
        "rope": decide_rope(facts, built),
        "output_class": decide_output_class(facts),
        "hidden_state_access": decide_hidden_state_access(facts),
        "logit_softcapping": decide_softcapping(facts, config_src),
        "norm_attrs": decide_norm_attrs(facts),
    }
    keys = registry_keys(ref, config_src)
    named = liger_name(ref.model_type)
    ident = replace(identity(facts, built), model_type=named, registry_keys=() if keys == (named,) else keys)
    if home:  # the registry entry reuses the apply function of the model that owns the class (act.alias)
        owner = owner_model_type(home, ref.causal_lm_class)
        shipped = mappings().display.get(ref.model_type)  # else the class prefix would name the owner (Llama)
        display = shipped or ref.config_class.removesuffix("Config")
        ident = replace(ident, alias_of=owner, config_module=config_module.__name__, display_name=display)
    return Profile(ident, decisions, {"logits_transform": decide_logits_transform(facts)})


def modeling_file(profile: Profile) -> Path:
    from pipelines.autopatch.source import site_packages

    return site_packages() / profile.identity.modeling_file
