"""Act: the loss's files rendered from `kernel_templates/chunked_loss/`, its exports spliced in with libcst.

Everything is built in memory first; nothing is written until every file rendered and every edit found its place,
so a refusal leaves the target untouched.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from pipelines import render
from pipelines.changeset import Changeset
from pipelines.changeset import generated_changeset
from pipelines.chunked_loss.reference import PAIRED
from pipelines.chunked_loss.understand import Understanding
from pipelines.kernel import exports
from pipelines.outcome import PipelineError
from pipelines.target import Checkout

CHUNKED_INIT = Path("src/liger_kernel/chunked_loss/__init__.py")
FUNCTIONAL = Path("src/liger_kernel/chunked_loss/functional.py")
# the words Liger spells in capitals in its chunked losses' names (LigerFusedLinearSimPOLoss, ...KTOLoss)
ACRONYMS = {
    "dpo": "DPO",
    "ipo": "IPO",
    "orpo": "ORPO",
    "simpo": "SimPO",
    "cpo": "CPO",
    "kto": "KTO",
    "grpo": "GRPO",
    "apo": "APO",
    "nca": "NCA",
    "bco": "BCO",
    "sppo": "SPPO",
    "exo": "EXO",
    "aot": "AOT",
    "jsd": "JSD",
    "ppo": "PPO",
}
# Liger's tolerances for its chunked losses (test_dpo_loss.py): (atol, rtol)
FP32_TOL = ("1e-5", "5e-4")
BF16_TOL = ("5e-2", "5e-1")


@dataclass(frozen=True)
class LossFiles:
    loss: Path
    test: Path
    benchmark: Path

    @classmethod
    def of(cls, name: str) -> LossFiles:
        return cls(
            Path(f"src/liger_kernel/chunked_loss/{name}_loss.py"),
            Path(f"test/chunked_loss/test_{name}_loss.py"),
            Path(f"benchmark/scripts/benchmark_{name}_loss.py"),
        )

    @property
    def all(self) -> tuple[Path, ...]:
        return (self.loss, self.test, self.benchmark)


def pascal(name: str) -> str:
    """`ipo` -> `IPO`, `apo_zero` -> `APOZero`, `simpo` -> `SimPO`: the Liger{...}Function spelling."""
    return "".join(ACRONYMS.get(word, word.capitalize()) for word in name.split("_"))


def names(name: str) -> dict[str, str]:
    cls = pascal(name)
    return {
        "pascal": cls,
        "function_class": f"LigerFusedLinear{cls}Function",
        "module_class": f"LigerFusedLinear{cls}Loss",
        "functional_name": f"liger_fused_linear_{name}",
    }


def check_no_clash(checkout: Checkout, name: str) -> None:
    """A loss name must be new: no file of that name, no class or function spelled from it."""
    existing = [str(p) for p in LossFiles.of(name).all if checkout.path(p).exists()]
    for path in (CHUNKED_INIT, FUNCTIONAL):
        if not checkout.path(path).is_file():
            raise PipelineError(
                f"{checkout.root} has no {path}", hint="the chunked-loss pipeline writes into Liger-Kernel 0.8.x"
            )
        text = checkout.path(path).read_text()
        existing += [f"{n} in {path}" for n in names(name).values() if re.search(rf"\b{n}\b", text)]
    if existing:
        raise PipelineError(
            f"a chunked loss named {name!r} exists already in {checkout.root}: {', '.join(sorted(set(existing)))}",
            hint="choose another name with --name (the existing loss is left as it is)",
        )


def _hyper_list(u: Understanding) -> list[dict]:
    hypers = [{"name": h.name, "default_repr": repr(h.default)} for h in u.reference.hypers]
    if not any(h["name"] == "beta" for h in hypers):  # the bases always hand the loss a beta
        hypers.insert(0, {"name": "beta", "default_repr": "0.1"})
    return hypers


def _chunk_body(u: Understanding) -> list[str]:
    """The per-chunk function's body, indented for a staticmethod (ast.unparse gave it 4 spaces)."""
    return ["    " + line if line.strip() else "" for line in u.chunk_body]


def _chunk_signature(u: Understanding) -> list[str]:
    fn = ast.parse(u.chunk_source).body[0]
    args = fn.args.args
    defaults = [None] * (len(args) - len(fn.args.defaults)) + list(fn.args.defaults)
    return [a.arg if d is None else f"{a.arg}={ast.unparse(d)}" for a, d in zip(args, defaults, strict=True)]


def context(u: Understanding) -> dict:
    ref = u.reference
    paired = ref.kind == PAIRED
    hypers = _hyper_list(u)
    others = [h for h in hypers if h["name"] != "beta"]
    beta = next(h["default_repr"] for h in hypers if h["name"] == "beta")
    ref_inputs = ["ref_input", "ref_weight", "ref_bias"] if ref.uses_ref else []
    extras = list(ref.extra_tensors)
    average = repr(ref.average_log_prob)
    loss_types = [t for t, _ in u.variants]
    # a family's switch, where Liger's DPO has it: right after chunk_size
    switch = [f"loss_type={loss_types[0]!r}"] if loss_types else []
    nll = repr(ref.compute_nll_loss)
    if paired:
        forward = ["_input", "weight", "target", "bias=None"]
        forward += [f"{p}=None" for p in ref_inputs + extras]
        forward += ["ignore_index=-100", f"beta={beta}", f"compute_nll_loss={nll}", "compiled=True"]
        forward += ["use_ref_model=True"] if ref.uses_ref else []
        forward += [f"average_log_prob={average}", "chunk_size=1"] + switch
        # alpha and nll_target last, as Liger's DPO appends: positional callers of the earlier slots keep working
        forward += [f"{h['name']}={h['default_repr']}" for h in others] + ["alpha=1.0", "nll_target=None"]
        super_kwargs = ["_input", "weight", "target", "bias", "ignore_index", "beta", "alpha", "compute_nll_loss"]
        super_kwargs += ["nll_target"]
        super_kwargs += ["compiled"] + (["use_ref_model", *ref_inputs] if ref.uses_ref else [])
        init = ["ignore_index: int = -100", f"beta: float = {beta}", "alpha: float = 1.0"]
        init += [f"compute_nll_loss: bool = {nll}", "compiled: bool = True"]
        module_forward = ["lin_weight", "_input", "target", "bias=None"]
        apply = ["_input", "lin_weight", "target", "bias"]
    else:
        forward = ["_input", "weight", "target", "preference_labels", "bias=None"]
        forward += [f"{p}=None" for p in ref_inputs + extras]
        forward += ["ignore_index=-100", f"beta={beta}", "compiled=True"]
        forward += ["use_ref_model=True"] if ref.uses_ref else []
        forward += [f"average_log_prob={average}", "chunk_size=1"] + switch
        forward += [f"{h['name']}={h['default_repr']}" for h in others]
        super_kwargs = ["_input", "weight", "target", "preference_labels", "bias", "ignore_index", "beta", "compiled"]
        super_kwargs += ["use_ref_model", *ref_inputs] if ref.uses_ref else []
        init = ["ignore_index: int = -100", f"beta: float = {beta}", "compiled: bool = True"]
        module_forward = ["_input", "lin_weight", "target", "bias=None", "preference_labels=None"]
        apply = ["_input", "lin_weight", "target", "preference_labels", "bias"]
    super_kwargs += ["average_log_prob", "chunk_size", *[h["name"] for h in others], *extras]
    super_kwargs += ["loss_type"] if loss_types else []
    init += ["use_ref_model: bool = True"] if ref.uses_ref else []
    init += [f"average_log_prob: bool = {average}", "chunk_size: int = 1"]
    init += [f"loss_type: str = {loss_types[0]!r}"] if loss_types else []
    init += [f"{h['name']}: float = {h['default_repr']}" for h in others]
    init_names = [p.split(":")[0] for p in init]
    module_forward += [f"{p}=None" for p in ref_inputs + extras]
    apply += ref_inputs + extras
    apply += [f"self.{p.split('=')[0]}" for p in forward[len(apply) :] if p != "nll_target=None"]
    if paired:  # the NLL term's own target (ORPO's nll_target): a tensor of the call, not of the module
        module_forward.append("nll_target=None")
        apply.append("nll_target")
    n_grads = 4 if paired else 5
    n_inputs = 4 if paired else 5  # _input, weight, target[, preference_labels], bias: the test passes these itself
    tail = ["ref_input", "ref_weight", "None"] if ref.uses_ref else []
    tail += [f'extras["{e}"]' for e in extras]
    tail += [
        "COMPILED" if p.startswith("compiled=") else "loss_type" if p.startswith("loss_type=") else p.split("=", 1)[1]
        for p in forward[n_inputs + len(tail) :]
    ]
    return {
        "name": u.spec.name,
        "spec": u.spec.text,
        "origin": ref.origin,
        "kind": ref.kind,
        "paired": paired,
        "uses_ref": ref.uses_ref,
        "extra_tensors": extras,
        "hypers": hypers,
        "average_log_prob": average,
        "test_average_log_prob": repr(
            ref.average_log_prob if ref.harness_average_log_prob is None else ref.harness_average_log_prob
        ),
        "compute_nll_loss": nll,
        "base_module": "fused_linear_preference" if paired else "fused_linear_unpaired_preference",
        "base_class": "LigerFusedLinearPreferenceBase" if paired else "LigerFusedLinearUnpairedPreferenceBase",
        "loss_title": f"{pascal(u.spec.name)} loss, chunked (generated by liger-bot).",
        "normaliser": "(full_target.shape[0] // 2)" if paired else "full_target.shape[0]",
        "chunk_signature": _chunk_signature(u),
        "chunk_docs": _chunk_docs(u),
        "chunk_body": _chunk_body(u),
        "masked_selections": u.masking.applied,
        "forward_signature": forward,
        "forward_docs": [_doc(p.split("=")[0]) for p in forward],
        "super_kwargs": super_kwargs,
        "n_grads": n_grads,
        "n_none": len(forward) - n_grads,
        "init_signature": init,
        "init_docs": [_doc(n) for n in init_names],
        "init_names": init_names,
        "module_forward_signature": module_forward,
        "apply_args": apply,
        "reference_source": _reference_source(u),
        "n_base_outputs": 5 if paired else 4,
        "functional_tail": tail,
        "family": bool(loss_types),
        "loss_types": loss_types,
        "variant_sources": _variant_sources(u),
        "variant_hypers": _variant_hypers(u),
        "fp32_tol": FP32_TOL,
        "bf16_tol": BF16_TOL,
        **names(u.spec.name),
    }


DOCS = {
    "_input": "_input (torch.Tensor): Input tensor. Shape: (batch_size, seq_len, hidden_size)",
    "weight": "weight (torch.Tensor): Weight tensor. Shape: (vocab_size, hidden_size)",
    "target": "target (torch.LongTensor): Target tensor. Shape: (batch_size, seq_len)",
    "preference_labels": "preference_labels (torch.Tensor): True for chosen, False for rejected. Shape: (batch_size,)",
    "bias": "bias (torch.Tensor, optional): Bias tensor. Shape: (vocab_size,)",
    "ref_input": "ref_input (torch.Tensor, optional): Reference model input tensor. Shape: (batch_size, seq_len, hidden_size)",
    "ref_weight": "ref_weight (torch.Tensor, optional): Reference model weight tensor. Shape: (vocab_size, hidden_size)",
    "ref_bias": "ref_bias (torch.Tensor, optional): Reference model bias tensor. Shape: (vocab_size,)",
    "ignore_index": "ignore_index (int): Index to ignore in loss computation",
    "beta": "beta (float): Weight of the preference loss",
    "alpha": "alpha (float): Weight for the NLL loss component",
    "compute_nll_loss": "compute_nll_loss (bool): Whether to compute the NLL loss",
    "compiled": "compiled (bool): Whether to use torch compile",
    "use_ref_model": "use_ref_model (bool): Whether to use a reference model",
    "average_log_prob": "average_log_prob (bool): Whether to average the log probability per non-masked token",
    "chunk_size": "chunk_size (int): Size of chunks for processing",
    "loss_type": "loss_type (str): Which of the loss types to compute (one branch of preference_loss_fn each)",
    "nll_target": "nll_target (torch.LongTensor, optional): Target tensor for the NLL loss. Shape: (batch_size, seq_len)",
    "chosen_logps": "chosen_logps (torch.Tensor): Log probabilities of chosen tokens. Shape: (chunk_size,)",
    "rejected_logps": "rejected_logps (torch.Tensor): Log probabilities of rejected tokens. Shape: (chunk_size,)",
    "full_target": "full_target (torch.Tensor): Non chunked full target tensor",
    "ref_chosen_logps": "ref_chosen_logps (torch.Tensor, optional): Reference log probs of chosen tokens",
    "ref_rejected_logps": "ref_rejected_logps (torch.Tensor, optional): Reference log probs of rejected tokens",
    "log_prob_chunk": "log_prob_chunk (torch.Tensor): Log probabilities of the chunk's sequences. Shape: (chunk_size,)",
    "preference_labels_chunk": "preference_labels_chunk (torch.Tensor): The chunk's preference labels",
    "ref_log_prob_chunk": "ref_log_prob_chunk (torch.Tensor, optional): Reference log probs of the chunk's sequences",
}


def _doc(name: str) -> str:
    return DOCS.get(name, f"{name}: hyper-parameter or input of the reference loss, passed through unchanged")


def _chunk_docs(u: Understanding) -> list[str]:
    return [_doc(a.split("=")[0]) for a in _chunk_signature(u)]


def _reference_source(u: Understanding) -> str:
    """The normal form under the test's name for it."""
    fn = ast.parse(u.reference.source).body[0]
    fn.name = f"reference_{u.spec.name}_loss"
    return ast.unparse(fn)


def _variant_sources(u: Understanding) -> list[str]:
    """A family's reference per loss type, each under the test's name for it."""
    out = []
    for loss_type, ref in u.variants:
        fn = ast.parse(ref.source).body[0]
        fn.name = f"reference_{u.spec.name}_{loss_type}_loss"
        out.append(ast.unparse(fn))
    return out


def _variant_hypers(u: Understanding) -> dict[str, dict]:
    """Each loss type's own hyper-parameters and defaults (the family's module has one default for each)."""
    return {loss_type: {h.name: h.default for h in ref.hypers} for loss_type, ref in u.variants}


def render_files(u: Understanding) -> dict[str, str]:
    ctx = context(u)
    files = LossFiles.of(u.spec.name)
    return {
        str(files.loss): render.render("chunked_loss/loss.py.j2", **ctx),
        str(files.test): render.render("chunked_loss/unit_test.py.j2", **ctx),
        str(files.benchmark): render.render("chunked_loss/benchmark.py.j2", **ctx),
    }


def _assign_key(stmt: cst.CSTNode) -> str | None:
    """`liger_fused_linear_dpo = LigerFusedLinearDPOFunction.apply` -> "liger_fused_linear_dpo"."""
    if not isinstance(stmt, cst.SimpleStatementLine) or not isinstance(stmt.body[0], cst.Assign):
        return None
    target = stmt.body[0].targets[0].target
    return target.value if isinstance(target, cst.Name) and target.value.startswith("liger_fused_linear_") else None


def append_after_last(source: str, key_of, key: str, code: str) -> str:
    """After the last statement `key_of` recognises: Liger's functional.py lists its `.apply` aliases unsorted
    (orpo, dpo, jsd, ...), so there is no alphabetical place; the newest goes last, as Liger's own did."""
    module = cst.parse_module(source)
    body = list(module.body)
    found = [i for i, stmt in enumerate(body) if key_of(stmt) is not None]
    if not found:
        raise exports.ExportError(f"no `liger_fused_linear_* = ...apply` alias to place {key!r} after")
    if any(key_of(stmt) == key for stmt in body):
        raise exports.ExportError(f"{key!r} is already present")
    body.insert(found[-1] + 1, cst.parse_module(code).body[0])
    return module.with_changes(body=body).code


def edit_existing(checkout: Checkout, u: Understanding) -> dict[str, str]:
    ctx = context(u)
    export_lines = render.render("chunked_loss/exports.py.j2", **ctx).splitlines()
    module_import, function_import = [line for line in export_lines if line.startswith("from ")]
    name, module = ctx["name"], f"liger_kernel.chunked_loss.{ctx['name']}_loss"
    try:
        init = exports.insert_statement(
            checkout.path(CHUNKED_INIT).read_text(),
            exports.import_key("liger_kernel.chunked_loss."),
            f"{module}.{ctx['module_class']}",
            module_import,
        )
        functional = exports.insert_statement(
            checkout.path(FUNCTIONAL).read_text(),
            exports.import_key("liger_kernel.chunked_loss."),
            f"{module}.{ctx['function_class']}",
            function_import,
        )
        assignment = render.render("chunked_loss/functional_fn.py.j2", **ctx)
        functional = append_after_last(functional, _assign_key, ctx["functional_name"], assignment)
    except (exports.ExportError, FileNotFoundError) as exc:
        raise PipelineError(
            f"cannot place the {name} exports in {checkout.root}: {exc}",
            hint="the target's files differ from what the chunked-loss pipeline expects (a liger-kernel 0.8.x checkout?)",
        ) from exc
    return {str(CHUNKED_INIT): init, str(FUNCTIONAL): functional}


def build_changeset(checkout: Checkout, u: Understanding) -> Changeset:
    check_no_clash(checkout, u.spec.name)
    return generated_changeset(render_files(u), edit_existing(checkout, u))
