"""Understand: the reference in its normal form, the per-chunk function written from it, and the proof that the
loss decomposes over chunks the way Liger's preference bases assume.

The bases (`LigerFusedLinearPreferenceBase`, `LigerFusedLinearUnpairedPreferenceBase`) call the per-chunk loss on
each chunk of sequences and add up what it returns: the loss and scalar metrics are summed, per-sequence metrics
concatenated. The reference's `losses.mean()` over the batch becomes `losses.sum() / N` in each chunk, N read from
`full_target` (pairs for paired losses, sequences for unpaired ones), and so does a returned `torch.mean(x)`.
That holds only when each sequence's loss depends on its own log-probs alone; it is proven by running: the
reference on a whole random batch against the per-chunk function on uneven chunks of it, in float64. A loss that
needs a batch-wide statistic (a sort, a batch mean inside the loss, a normalisation over the batch) fails that
check and is refused, naming the operation.

Boolean selections in the per-chunk function (the unpaired base's `log_prob_chunk[preference_labels_chunk]`,
and the reductions and size branches after them) are then written as masks (`masked.py`), so no shape depends on
the labels under torch.compile; the masked form is used only where running both forms on random inputs (chunk
sizes 1 and more, all labels True, all False, mixed) gives the same outputs and gradients.
"""

from __future__ import annotations

import ast
import copy
import math
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace

import torch
import torch.nn.functional as F

from pipelines.chunked_loss import masked
from pipelines.chunked_loss import reference as reference_mod
from pipelines.chunked_loss.reference import PAIRED
from pipelines.chunked_loss.reference import Reference
from pipelines.chunked_loss.spec import Spec
from pipelines.chunked_loss.spec import SpecKind
from pipelines.outcome import PipelineError

PROBE_PAIRS = 7
PROBE_CHUNKS = (2, 1, 4)  # uneven, so a statistic of the chunk cannot pass for one of the batch
PROBE_TOLERANCE = 1e-9  # float64
# operations that read across the batch dimension; named in a refusal when the decomposition check fails
BATCH_WIDE = (
    "sort",
    "argsort",
    "topk",
    "median",
    "quantile",
    "std",
    "var",
    "mean",
    "max",
    "min",
    "cumsum",
    "cumprod",
    "logsumexp",
    "softmax",
    "log_softmax",
    "norm",
    "kthvalue",
    "sum",
)
N_NAME = "n_sequences"  # the generated normaliser; a reference using this name is refused
# the per-chunk function's per-sequence parameters (chunk_function names them), for the masked rewrite
PAIRED_VECTORS = {"chosen_logps", "rejected_logps", "ref_chosen_logps", "ref_rejected_logps"}
UNPAIRED_VECTORS = {"log_prob_chunk", "ref_log_prob_chunk"}
UNPAIRED_MASKS = {"preference_labels_chunk"}
MASKED_SIZES = (1, 2, 5)  # chunk sizes the masked form is checked on: Liger's default chunk_size is 1
MASKED_TOLERANCE = 1e-12  # float64; the masked sums add zeros in another order


@dataclass(frozen=True)
class Probe:
    """The decomposition check: the reference on the whole batch against the per-chunk function over chunks."""

    pairs: int
    chunks: tuple[int, ...]
    max_abs_diff: dict[str, float]  # per output: loss, metric_1, ...
    passed: bool

    def to_json(self) -> dict:
        return {
            "pairs": self.pairs,
            "chunks": list(self.chunks),
            "max_abs_diff": self.max_abs_diff,
            "passed": self.passed,
        }


@dataclass(frozen=True)
class MaskedCheck:
    """The boolean selections written as masks (`masked.py`), and the proof by running that both forms agree."""

    applied: bool
    reason: str
    selections: tuple[str, ...] = ()
    cases: int = 0  # inputs both forms ran on (chunk sizes x label patterns x with / without reference log-probs)
    max_abs_diff: float = 0.0  # over every output and every gradient

    def to_json(self) -> dict:
        return {
            "applied": self.applied,
            "reason": self.reason,
            "selections": list(self.selections),
            "cases": self.cases,
            "max_abs_diff": self.max_abs_diff,
        }


@dataclass
class Understanding:
    spec: Spec
    reference: Reference
    chunk_source: str  # the per-chunk loss as a module-level function `preference_loss_fn(...)`
    chunk_body: list[str]  # its body lines, for the template
    chunk_params: list[str]  # its signature, in order
    outputs: list[str]  # "loss", then each metric's kind: "per-sequence" | "scalar sum" | "scalar mean"
    probe: Probe
    notes: list[str] = field(default_factory=list)
    variants: list = field(default_factory=list)  # (loss_type, Reference) of a family; empty for one loss
    masking: MaskedCheck = MaskedCheck(False, "not tried")

    @property
    def family(self) -> bool:
        return bool(self.variants)

    @property
    def kind(self) -> str:
        return self.reference.kind


def understand(spec: Spec, repo, settings: dict[str, str]) -> Understanding:
    if spec.variants:
        return understand_family(spec, repo, settings)
    ref, chunk, outputs, probe = _variant(spec, repo, settings)
    chunk, masking = shape_static(ref, chunk)
    source = ast.unparse(ast.fix_missing_locations(chunk))
    if masking.applied:  # the decomposition, proven again on the code that is written
        probe = prove(ref, source, outputs)
    body = source.splitlines()[1:]
    u = Understanding(spec, ref, source, body, [a.arg for a in chunk.args.args], outputs, probe)
    u.masking = masking
    return u


def _variant(spec: Spec, repo, settings: dict[str, str], hypers: list | None = None):
    """One loss: its reference, its per-chunk function (with `hypers` as its signature's, for a family), the proof."""
    ref = reference_mod.build(spec, repo, settings)
    fn_node = ast.parse(ref.source).body[0]
    if any(isinstance(n, ast.Name) and n.id == N_NAME for n in ast.walk(fn_node)):
        raise PipelineError(f"{spec.text}: the loss uses the name {N_NAME}, which the generated code reserves")
    chunk, outputs = chunk_function(ref, fn_node)
    probe = prove(ref, ast.unparse(ast.fix_missing_locations(chunk)), outputs)
    if not probe.passed:
        raise PipelineError(
            f"{spec.text} does not decompose over chunks: {_culprit(fn_node)}; the per-chunk function over chunks "
            f"{list(probe.chunks)} differs from the reference on the whole batch of {probe.pairs} "
            f"(max abs diff {_worst(probe)})",
            hint="Liger's preference bases sum per-chunk losses; a loss needing a batch-wide statistic cannot be chunked",
        )
    if ref.kind != PAIRED and any(o == "per-sequence" for o in outputs[1:]):
        raise PipelineError(
            f"{spec.text}: an unpaired loss returning per-sequence metrics; LigerFusedLinearUnpairedPreferenceBase "
            "aggregates scalar metrics only",
            hint="return their .sum() instead",
        )
    if hypers is not None:
        chunk, outputs = chunk_function(ref, fn_node, hypers)
    return ref, chunk, outputs, probe


# what every loss type of a family must share: they are one Function with one signature
FAMILY_SHARED = ("kind", "uses_ref", "extra_tensors", "average_log_prob", "compute_nll_loss")


def understand_family(spec: Spec, repo, settings: dict[str, str]) -> Understanding:
    """Several losses as one class with a `loss_type` switch (Liger's DPO: sigmoid, hinge, ...), each loss type
    understood and proven on its own, then its per-chunk body one branch of `preference_loss_fn`."""
    refs = [_variant(replace(spec, qualname=qual, variants=()), repo, settings)[0] for _, qual in spec.variants]
    first = refs[0]
    for (loss_type, _), ref in zip(spec.variants, refs, strict=True):
        # a TRL loss type's averaging is its definition (IPO's length normalisation); a reference class's is only
        # its module's default, and the family's is the first loss type's
        shared = (
            FAMILY_SHARED if spec.kind == SpecKind.TRL else tuple(f for f in FAMILY_SHARED if f != "average_log_prob")
        )
        differs = [f for f in shared if getattr(ref, f) != getattr(first, f)]
        if differs:
            raise PipelineError(
                f"{spec.text}: loss type {loss_type!r} differs from {spec.variants[0][0]!r} in {', '.join(differs)}",
                hint="one chunked loss class takes one set of inputs; generate these loss types separately",
            )
    hypers: dict[str, reference_mod.Hyper] = {}
    for ref in refs:
        for hyper in ref.hypers:
            hypers.setdefault(hyper.name, hyper)  # the first loss type's default; each type's own goes in its test
    union = sorted(hypers.values(), key=lambda h: h.name != "beta")
    chunks, outputs, probes = [], None, {}
    for loss_type, qual in spec.variants:
        _, chunk, kinds, probe = _variant(replace(spec, qualname=qual, variants=()), repo, settings, union)
        if outputs is not None and kinds != outputs:
            raise PipelineError(
                f"{spec.text}: loss type {loss_type!r} returns {kinds}, {spec.variants[0][0]!r} returns {outputs}",
                hint="the loss types of one class return the same metrics",
            )
        outputs = kinds
        chunks.append((loss_type, chunk))
        probes[loss_type] = probe
    merged = replace(
        first,
        hypers=union,
        origin=f"{spec.text} ({len(refs)} loss types)",
        evidence=[e for r in refs for e in r.evidence],
    )
    chunk, masking = shape_static(merged, _dispatch(chunks, _prologue_length(first)), [t for t, _ in spec.variants])
    source = ast.unparse(ast.fix_missing_locations(chunk))
    probe = Probe(
        first_probe(probes).pairs,
        first_probe(probes).chunks,
        {f"{t}: {k}": v for t, p in probes.items() for k, v in p.max_abs_diff.items()},
        all(p.passed for p in probes.values()),
    )
    u = Understanding(spec, merged, source, source.splitlines()[1:], [a.arg for a in chunk.args.args], outputs, probe)
    u.variants = [(t, r) for (t, _), r in zip(spec.variants, refs, strict=True)]
    u.masking = masking
    return u


def first_probe(probes: dict) -> Probe:
    return next(iter(probes.values()))


def _prologue_length(ref: Reference) -> int:
    """How many statements chunk_function puts before the reference's own body."""
    fn, _ = chunk_function(ref, ast.parse("def f():\n    return x").body[0])
    return len(fn.body) - 1


def _dispatch(chunks: list[tuple[str, ast.FunctionDef]], prologue: int) -> ast.FunctionDef:
    """One `preference_loss_fn(..., loss_type=first)`: the shared prologue, then one branch per loss type."""
    first = copy.deepcopy(chunks[0][1])
    names = ", ".join(t for t, _ in chunks)
    branch: list[ast.stmt] = [
        _stmt(f'raise ValueError(f"Unsupported loss_type: {{loss_type}}. Supported types are: {names}")')
    ]
    for loss_type, chunk in reversed(chunks):
        test = ast.Compare(
            left=ast.Name(id="loss_type", ctx=ast.Load()), ops=[ast.Eq()], comparators=[ast.Constant(loss_type)]
        )
        branch = [ast.If(test=test, body=chunk.body[prologue:], orelse=branch)]
    first.body = first.body[:prologue] + branch
    first.args.args.append(ast.arg(arg="loss_type"))
    first.args.defaults.append(ast.Constant(value=chunks[0][0]))
    return first


def _worst(probe: Probe) -> str:
    return ", ".join(f"{k} {v:.3g}" for k, v in probe.max_abs_diff.items() if not v <= PROBE_TOLERANCE) or "nan"


def _culprit(fn: ast.FunctionDef) -> str:
    """The batch-wide operation the loss reads, as the reason a person can check."""
    # a returned metric's own `torch.mean(x)` is the batch mean the generated code rewrites; anything inside counts
    returned = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and node.value is not None:
            elements = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            returned |= {id(e) for e in elements if _mean_of(e) is not None or _is_sum(e)}
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call) or id(node) in returned:
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in BATCH_WIDE:
            return f"it needs a batch-wide statistic: `{ast.unparse(node)}` reads across the batch dimension"
    return "a sequence's loss depends on other sequences of the batch"


# --- the per-chunk function -------------------------------------------------------------------------------------


def _mean_of(node: ast.AST) -> ast.AST | None:
    """`torch.mean(x)` or `x.mean()` (no dim): the x it averages over the batch."""
    if not isinstance(node, ast.Call) or node.keywords:
        return None
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "mean":
        if isinstance(func.value, ast.Name) and func.value.id == "torch" and len(node.args) == 1:
            return node.args[0]
        if not node.args:
            return func.value
    return None


def _summed(node: ast.AST) -> ast.AST:
    """`(x).sum() / n_sequences`."""
    total = ast.Call(func=ast.Attribute(value=node, attr="sum", ctx=ast.Load()), args=[], keywords=[])
    return ast.BinOp(left=total, op=ast.Div(), right=ast.Name(id=N_NAME, ctx=ast.Load()))


def _is_sum(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "sum"
        and not node.args
        and not node.keywords
    )


class _Returns(ast.NodeTransformer):
    """Each `return losses, metrics...` -> `return losses.sum() / N, metrics...` with batch means made sums."""

    def __init__(self):
        self.outputs: list[str] | None = None

    def visit_FunctionDef(self, node):
        node.body = [self.visit(s) for s in node.body]
        return node

    def visit_Return(self, node):
        if node.value is None:
            raise PipelineError("the loss returns nothing")
        elements = list(node.value.elts) if isinstance(node.value, ast.Tuple) else [node.value]
        kinds = ["loss"]
        loss_mean = _mean_of(elements[0])  # a reference that returns the batch mean itself, not per-sequence losses
        new = [_summed(loss_mean if loss_mean is not None else elements[0])]
        for element in elements[1:]:
            averaged = _mean_of(element)
            if averaged is not None:
                new.append(_summed(averaged))
                kinds.append("scalar mean")
            elif _is_sum(element):
                new.append(element)
                kinds.append("scalar sum")
            else:
                new.append(element)
                kinds.append("per-sequence")
        if self.outputs is not None and len(self.outputs) != len(kinds):
            raise PipelineError("the loss's return statements return different numbers of values")
        self.outputs = kinds
        node.value = ast.Tuple(elts=new, ctx=ast.Load()) if len(new) > 1 else new[0]
        return node


def _stmt(text: str) -> ast.stmt:
    return ast.parse(text).body[0]


def chunk_function(
    ref: Reference, fn: ast.FunctionDef, hypers: list | None = None
) -> tuple[ast.FunctionDef, list[str]]:
    """The normal form -> `preference_loss_fn` in the signature the base calls it with."""
    fn = copy.deepcopy(fn)
    returns = _Returns()
    fn = returns.visit(fn)
    paired = ref.kind == PAIRED
    prologue: list[ast.stmt] = []
    if paired:
        params = ["chosen_logps", "rejected_logps", "full_target"]
        if ref.uses_ref:
            params += ["ref_chosen_logps", "ref_rejected_logps"]
            # use_ref_model=False: the base passes no reference log-probs; a zero reference is Liger's DPO's choice
            prologue += [
                _stmt(f"if {n} is None:\n    {n} = torch.zeros_like({n.removeprefix('ref_')})") for n in params[3:]
            ]
        prologue.append(_stmt(f"{N_NAME} = full_target.shape[0] // 2"))
    else:
        params = ["log_prob_chunk", "preference_labels_chunk", "full_target"]
        if ref.uses_ref:
            params.append("ref_log_prob_chunk")
            prologue.append(
                _stmt("if ref_log_prob_chunk is None:\n    ref_log_prob_chunk = torch.zeros_like(log_prob_chunk)")
            )
        # the unpaired base hands one chunk with a label per sequence; the reference takes the two groups
        prologue += [
            _stmt("chosen_logps = log_prob_chunk[preference_labels_chunk]"),
            _stmt("rejected_logps = log_prob_chunk[~preference_labels_chunk]"),
        ]
        if ref.uses_ref:
            prologue += [
                _stmt("ref_chosen_logps = ref_log_prob_chunk[preference_labels_chunk]"),
                _stmt("ref_rejected_logps = ref_log_prob_chunk[~preference_labels_chunk]"),
            ]
        prologue.append(_stmt(f"{N_NAME} = full_target.shape[0]"))
    params += ref.extra_tensors
    hypers = list(ref.hypers if hypers is None else hypers)
    if not any(h.name == "beta" for h in hypers):  # the bases always hand the per-chunk loss a beta
        hypers.insert(0, reference_mod.Hyper("beta", 0.1))
    all_params = params + [h.name for h in hypers]
    defaults = [ast.Constant(value=None)] * (len(params) - 3) + [ast.Constant(value=h.default) for h in hypers]
    chunk = ast.FunctionDef(
        name="preference_loss_fn",
        args=ast.arguments(
            posonlyargs=[],
            args=[ast.arg(arg=a) for a in all_params],
            kwonlyargs=[],
            kw_defaults=[],
            defaults=defaults,
        ),
        body=prologue + fn.body,
        decorator_list=[],
        returns=None,
        type_params=[],
    )
    return chunk, returns.outputs or ["loss"]


# --- the proof by running ---------------------------------------------------------------------------------------


def _namespace() -> dict:
    return {"torch": torch, "F": F, "math": math, "nn": torch.nn}


def load(source: str, name: str):
    namespace = _namespace()
    exec(compile(source, f"<{name}>", "exec"), namespace)  # our own normal form: no target code runs here
    return namespace[ast.parse(source).body[0].name]


def _as_list(value) -> list:
    return list(value) if isinstance(value, tuple) else [value]


def prove(ref: Reference, chunk_source: str, outputs: list[str]) -> Probe:
    torch.manual_seed(0)
    reference = load(ref.source, "reference")
    chunked = load(chunk_source, "per-chunk loss")
    if ref.kind == PAIRED:
        return _prove_paired(ref, reference, chunked, outputs)
    return _prove_unpaired(ref, reference, chunked, outputs)


def _logps(n: int) -> torch.Tensor:
    # per-token averages of log-probs: negative, away from 0 (ORPO's log1p(-exp(logp)) needs logp < 0)
    return -(torch.rand(n, dtype=torch.float64) * 6.0 + 0.05)


def _extras(ref: Reference) -> dict:
    return {name: torch.randn(1, dtype=torch.float64) for name in ref.extra_tensors}


def _hypers(ref: Reference) -> dict:
    # not the defaults: a default of 0 (label_smoothing) would hide a term
    return {h.name: (float(h.default) * 1.3 + 0.07 if h.name != "beta" else float(h.default) * 1.7) for h in ref.hypers}


def _run(fn, *args, **kwargs):
    try:
        with torch.no_grad():
            return _as_list(fn(*args, **kwargs))
    except Exception as exc:  # the reference's own error on random log-probs is the user's to see
        raise PipelineError(f"the loss fails on random log-probs: {type(exc).__name__}: {exc}") from exc


def _compare(whole: list, parts: list[list], outputs: list[str], size: int) -> dict[str, float]:
    diffs = {}
    for i, kind in enumerate(outputs):
        name = "loss" if i == 0 else f"metric_{i}"
        pieces = [p[i] for p in parts]
        if kind == "per-sequence":
            got = torch.cat([torch.as_tensor(p).reshape(-1) for p in pieces])
            want = torch.as_tensor(whole[i]).reshape(-1)
        else:
            got = sum(
                torch.as_tensor(p).reshape(()) if torch.as_tensor(p).numel() == 1 else torch.as_tensor(p).sum()
                for p in pieces
            )
            want = torch.as_tensor(whole[i])
            want = want.mean() if i == 0 else want.reshape(-1)[0] if want.numel() == 1 else want
        if got.shape != want.shape:
            diffs[name] = math.inf
            continue
        diffs[name] = float((got.double() - want.double()).abs().max()) if got.numel() else 0.0
    return diffs


def _prove_paired(ref: Reference, reference, chunked, outputs: list[str]) -> Probe:
    n = PROBE_PAIRS
    chosen, rejected = _logps(n), _logps(n)
    ref_chosen, ref_rejected = _logps(n), _logps(n)
    extras, hypers = _extras(ref), _hypers(ref)
    logps = (chosen, rejected, ref_chosen, ref_rejected) if ref.uses_ref else (chosen, rejected)
    whole = _run(reference, *logps, **extras, **hypers)
    full_target = torch.zeros(2 * n, 3, dtype=torch.long)
    parts, own, start = [], [], 0
    for size in PROBE_CHUNKS:
        piece = slice(start, start + size)
        start += size
        kwargs = (
            {"ref_chosen_logps": ref_chosen[piece], "ref_rejected_logps": ref_rejected[piece]} if ref.uses_ref else {}
        )
        parts.append(_run(chunked, chosen[piece], rejected[piece], full_target, **kwargs, **extras, **hypers))
        own.append(_run(reference, *(t[piece] for t in logps), **extras, **hypers)[0])
    diffs = _compare(whole, parts, outputs, n)
    # each pair's loss from its own log-probs alone: the reference on chunks, sequence by sequence, as on the batch
    per_pair = torch.cat([torch.as_tensor(o).reshape(-1) for o in own]) - torch.as_tensor(whole[0]).reshape(-1)
    diffs["per-pair losses"] = float(per_pair.abs().max()) if per_pair.numel() == n else math.inf
    return Probe(n, PROBE_CHUNKS, diffs, all(d <= PROBE_TOLERANCE for d in diffs.values()))


def _prove_unpaired(ref: Reference, reference, chunked, outputs: list[str]) -> Probe:
    n = 2 * PROBE_PAIRS
    logps, ref_logps = _logps(n), _logps(n)
    labels = torch.tensor([i % 3 != 0 for i in range(n)])
    extras, hypers = _extras(ref), _hypers(ref)
    args = (logps[labels], logps[~labels]) + ((ref_logps[labels], ref_logps[~labels]) if ref.uses_ref else ())
    whole = _run(reference, *args, **extras, **hypers)
    full_target = torch.zeros(n, 3, dtype=torch.long)
    parts, start = [], 0
    for size in (4, 2, 8):
        piece = slice(start, start + size)
        start += size
        kwargs = {"ref_log_prob_chunk": ref_logps[piece]} if ref.uses_ref else {}
        parts.append(_run(chunked, logps[piece], labels[piece], full_target, **kwargs, **extras, **hypers))
    diffs = _compare(whole, parts, outputs, n)
    return Probe(n, (4, 2, 8), diffs, all(d <= PROBE_TOLERANCE for d in diffs.values()))


# --- boolean selections written as masks ------------------------------------------------------------------------


def shape_static(ref: Reference, chunk: ast.FunctionDef, loss_types=()) -> tuple[ast.FunctionDef, MaskedCheck]:
    """The per-chunk function with its boolean selections written as masks (no shape depends on the labels, so
    torch.compile traces it as one graph), where that form is proven equal to it by running; else as it is."""
    vectors, masks = (PAIRED_VECTORS, set()) if ref.kind == PAIRED else (UNPAIRED_VECTORS, UNPAIRED_MASKS)
    result = masked.rewrite(chunk, vectors, masks)
    if result.fn is None:
        return chunk, MaskedCheck(False, result.reason)
    original, rewritten = (ast.unparse(ast.fix_missing_locations(f)) for f in (chunk, result.fn))
    cases, diff = prove_masked(ref, original, rewritten, loss_types)
    selections = tuple(result.selections)
    if not diff <= MASKED_TOLERANCE:
        reason = f"the masked form differs from the selections by {diff:.3g} on random inputs: selections kept"
        return chunk, MaskedCheck(False, reason, selections, cases, diff)
    reason = "boolean selections written as masks; outputs and gradients equal on every case"
    return result.fn, MaskedCheck(True, reason, selections, cases, diff)


def prove_masked(ref: Reference, original: str, rewritten: str, loss_types=()) -> tuple[int, float]:
    """Both forms of the per-chunk function on the same random inputs, in float64: chunk sizes 1 and more, every
    label True, every label False and mixed, with and without reference log-probs, each loss type of a family.
    Returns how many cases ran and the largest difference of any output or any gradient (inf where only one of
    the two raised)."""
    before, after = load(original, "per-chunk loss"), load(rewritten, "masked per-chunk loss")
    worst, count = 0.0, 0
    for inputs in _masked_cases(ref):
        for loss_type in loss_types or (None,):
            extra = {"loss_type": loss_type} if loss_type is not None else {}
            want, got = _run_with_grads(before, inputs, extra), _run_with_grads(after, inputs, extra)
            if want is None and got is None:  # both raise on this input: the same behaviour
                continue
            count += 1
            worst = max(worst, _max_diff(want, got))
    return count, worst


def _masked_cases(ref: Reference):
    generator = torch.Generator().manual_seed(0)
    hypers = _hypers(ref)
    for size in MASKED_SIZES:
        patterns = ["all", "none"] + (["mixed"] if size > 1 else [])
        for pattern in patterns:
            for with_ref in (True, False) if ref.uses_ref else (False,):
                tensors = _masked_inputs(ref, size, pattern, with_ref, generator)
                tensors.update({n: torch.randn(1, dtype=torch.float64, generator=generator) for n in ref.extra_tensors})
                yield {**tensors, **hypers}


def _masked_inputs(ref: Reference, size: int, pattern: str, with_ref: bool, generator) -> dict:
    def logps(low: float, high: float) -> torch.Tensor:
        return low + (high - low) * torch.rand(size, dtype=torch.float64, generator=generator)

    full_target = torch.zeros(2 * (size + 3), 3, dtype=torch.long)  # the batch: more sequences than the chunk
    if ref.kind == PAIRED:  # a mask the loss computes: chosen above rejected for all, for none, for some
        high, low = logps(-0.5, -0.05), logps(-6.0, -5.5)
        chosen, rejected = {"all": (high, low), "none": (low, high)}.get(pattern, (logps(-6, -0.05), logps(-6, -0.05)))
        inputs = {"chosen_logps": chosen, "rejected_logps": rejected, "full_target": full_target}
        if ref.uses_ref:
            inputs["ref_chosen_logps"] = logps(-6.0, -0.05) if with_ref else None
            inputs["ref_rejected_logps"] = logps(-6.0, -0.05) if with_ref else None
        return inputs
    labels = {"all": torch.ones(size, dtype=torch.bool), "none": torch.zeros(size, dtype=torch.bool)}.get(
        pattern, torch.arange(size) % 2 == 0
    )
    inputs = {"log_prob_chunk": logps(-6.0, -0.05), "preference_labels_chunk": labels, "full_target": full_target}
    if ref.uses_ref:
        inputs["ref_log_prob_chunk"] = logps(-6.0, -0.05) if with_ref else None
    return inputs


def _run_with_grads(fn, inputs: dict, extra: dict) -> list[torch.Tensor] | None:
    """Each output, then the gradient of each output's sum with respect to every floating-point input."""
    leaves = {
        k: v.detach().clone().requires_grad_(v.is_floating_point()) if isinstance(v, torch.Tensor) else v
        for k, v in inputs.items()
    }
    try:
        outputs = _as_list(fn(**leaves, **extra))
    except Exception:  # compared: both raising is the same behaviour, one raising is a difference
        return None
    differentiable = [v for v in leaves.values() if isinstance(v, torch.Tensor) and v.requires_grad]
    found = [torch.as_tensor(o).detach().double() for o in outputs]
    for output in outputs:
        if isinstance(output, torch.Tensor) and output.requires_grad:
            grads = torch.autograd.grad(output.sum(), differentiable, retain_graph=True, allow_unused=True)
        else:
            grads = [None] * len(differentiable)
        found += [torch.zeros_like(x) if g is None else g.detach() for g, x in zip(grads, differentiable, strict=True)]
    return found


def _max_diff(want: list[torch.Tensor] | None, got: list[torch.Tensor] | None) -> float:
    if want is None or got is None or len(want) != len(got):
        return math.inf
    worst = 0.0
    for a, b in zip(want, got, strict=True):
        if a.shape != b.shape or not torch.equal(a.isnan(), b.isnan()):
            return math.inf
        diff = torch.where((a == b) | a.isnan(), 0.0, (a - b).abs())  # inf beside inf, nan beside nan: the same
        if diff.numel():
            worst = max(worst, float(diff.max()))
    return worst
