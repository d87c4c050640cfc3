"""Understand: the reference run eagerly (bad-input checks), then forward and autograd's backward traced together
to ATen, lowered to Triton statements, and classified into a tier.

One joint graph `(inputs..., params..., dys...) -> (outputs..., dinputs..., dparams...)` is traced with `make_fx`
on symbolic shapes (R, C) in bf16, so explicit casts and shape arithmetic (a mean's 1/C) stay visible. Every tensor
input has the shape of the first (`silu(a) * b`, `hidden_states + residual`), and so has every output; an input the
reference broadcasts from another shape (a per-batch scale it unsqueezes) is refused first (broadcast.py). The forward
kernel is the slice of that graph the outputs need; the backward kernel is the slice the gradients need, which
recomputes forward intermediates from the saved inputs instead of saving them.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace

import torch
from torch._decomp import core_aten_decompositions
from torch._decomp import get_decompositions
from torch.fx.experimental.proxy_tensor import make_fx

from pipelines.kernel import broadcast as broadcast_mod
from pipelines.kernel import dropin as dropin_mod
from pipelines.kernel import reference as reference_mod
from pipelines.kernel.dropin import DropIn
from pipelines.kernel.lowering import Body
from pipelines.kernel.lowering import Lowering
from pipelines.kernel.lowering import Unsupported
from pipelines.kernel.reference import ReferenceCode
from pipelines.kernel.spec import Spec
from pipelines.kernel.spec import SpecKind
from pipelines.outcome import PipelineError

aten = torch.ops.aten
TRACE_SHAPE = (5, 7)  # (R, C): distinct, not 0 or 1, so neither is specialised away
PROBE_SHAPE = (4, 33)
MAX_SMALL_PARAM = 16  # a (k,) parameter up to this size is k scalars (PolyNorm's (3,) weight), not a column
SENTINEL_BASE = 1.2345678e-5  # float parameters are traced with these values to find them in the graph
# decompose activations core ATen keeps whole, so the graph is made of ops the lowering table knows
EXTRA_DECOMPOSITIONS = [
    aten.gelu,
    aten.gelu_backward,
    aten.leaky_relu,
    aten.leaky_relu_backward,
    aten.hardtanh,
    aten.hardtanh_backward,
    aten.hardswish,
    aten.hardswish_backward,
    aten.hardsigmoid,
    aten.silu,
    aten.silu_backward,
    aten.mish,
    aten.mish_backward,
    aten._prelu_kernel,
    aten._prelu_kernel_backward,
    aten.softplus,
    aten.softplus_backward,
    aten.elu,
    aten.elu_backward,
    aten.threshold_backward,
    aten.sigmoid_backward,
    aten.tanh_backward,
    aten._softmax,
    aten._softmax_backward_data,
    aten._log_softmax,
    aten._log_softmax_backward_data,
    aten.native_layer_norm,
    aten.native_layer_norm_backward,
    aten.var,
    aten.var_mean,
    aten.norm,
    aten.linalg_vector_norm,
]


class Tier:
    ELEMENTWISE = 1
    ROWWISE = 2
    COMPLEX = 3


TIER_NAMES = {1: "element-wise", 2: "reduction", 3: "fused/complex"}


@dataclass(frozen=True)
class Weight:
    """A tensor the reference holds: a learnable parameter, or a buffer the kernel reads as a runtime constant."""

    name: str  # the kernel's variable (and the Liger module's attribute)
    state_key: str  # the reference module's state-dict key
    scalar: bool  # one element, loaded once per program; else one value per column (hidden,)
    shape: tuple[int, ...]  # the reference's shape of a scalar: () or (1,)
    init: str  # "ones" | "zeros" for columns; the reference's value (a float literal) for scalars
    learnable: bool  # a parameter (the backward computes its gradient) or a buffer
    optional: str = ""  # the reference's switch that leaves it out when False (DyT's beta, elementwise_affine)
    neutral: float = 0.0  # the value it is held at when left out: the op without it is the op at this constant

    @property
    def vector(self) -> bool:
        """A small (k,) parameter (PolyNorm's three weights): each element read as a scalar, never as a column."""
        return self.scalar and self.shape not in ((), (1,))

    def init_expr(self) -> str:
        """The Liger module's initial value, as torch source (hidden_size in scope for columns)."""
        if self.init.startswith("torch.tensor("):
            return self.init
        if self.scalar:
            return f"torch.full({self.shape!r}, {self.init})"
        return f"torch.{self.init}(hidden_size)"


@dataclass(frozen=True)
class Port:
    """One tensor input or output of the kernel, under the names the generated files spell it with."""

    name: str  # the reference's argument name (the module's forward and the functional take it); outputs: y, y0, ...
    var: str  # the Triton variable holding its values
    arg: str  # the ops functions' Python variable; the kernel's pointer is `{arg}_ptr`
    grad_var: str  # outputs: the Triton variable of the incoming gradient (dy)
    grad_arg: str  # the gradient's Python variable (dX for an input, dY for an output); its pointer `{grad_arg}_ptr`


# names the ops templates use themselves: an input spelled like one of them is renamed (x0, x1, ...)
TEMPLATE_NAMES = {"x", "y", "dy", "mask", "offsets", "program_id", "row_idx", "col_offsets", "col_mask", "n_rows"}
TEMPLATE_NAMES |= {"n_cols", "n_elements", "row_start", "row_end", "rows_per_program", "n_programs", "sm_count"}
TEMPLATE_NAMES |= {"tl", "triton", "torch", "args", "constexprs", "shape", "num_warps", "partials", "ctx", "in_place"}
TEMPLATE_NAMES |= {"start", "scalar_args", "self", "layer", "inputs", "outputs"}


def input_ports(names: list[str], taken: set[str]) -> list[Port]:
    """One input keeps the engine's x / X / dX; several keep the reference's names (a, b -> a_ptr, da)."""
    if len(names) == 1:
        return [Port(names[0], "x", "X", "", "dX")]
    spelled = set(names) | {f"d{n}" for n in names}
    clash = len(spelled) < 2 * len(names) or bool(spelled & (taken | TEMPLATE_NAMES))
    kernel_names = [f"x{i}" for i in range(len(names))] if clash else names
    return [Port(n, k, k, "", f"d{k}") for n, k in zip(names, kernel_names, strict=True)]


def output_ports(count: int) -> list[Port]:
    if count == 1:
        return [Port("y", "y", "Y", "dy", "dY")]
    return [Port(f"y{i}", f"y{i}", f"Y{i}", f"dy{i}", f"dY{i}") for i in range(count)]


@dataclass
class Understanding:
    spec: Spec
    reference: ReferenceCode
    tier: int
    forward: Body | None
    backward: Body | None
    weights: list[Weight]  # parameters then buffers, in the kernel's argument order
    runtime_floats: list[str]  # float parameters the kernel takes at run time
    output_dtypes: list[str]  # per output: "input" or "float32"
    refusal: str = ""  # why tier 3, and what would be needed
    graph_code: str = ""  # the joint ATen graph, for the profile
    inputs: list[Port] = field(default_factory=list)
    outputs: list[Port] = field(default_factory=list)
    dropin: DropIn | None = None  # the target's own module for this op, whose signatures the generated one takes


def understand(spec: Spec, repo) -> Understanding:
    ref = reference_mod.build(spec, repo)
    cls = reference_mod.load_class(ref)
    if ref.forward_inherited:  # torch.nn.LayerNorm's forward(input), torch.nn.KLDivLoss's forward(input, target)
        ref.inputs = reference_mod.inherited_inputs(cls)
    module = _instantiate(cls, ref, PROBE_SHAPE[1], sentinels=False)
    weights = _optional_weights(cls, ref, _weights(module, ref, spec))
    # before the same-shape probe: there `x * scale.unsqueeze(1)` would read as a shape-changing op
    broadcast = broadcast_mod.find(module, ref, PROBE_SHAPE[1])
    if broadcast:
        refusal = _refusal_text(broadcast, BROADCAST_NEEDS)
        return Understanding(
            spec, ref, Tier.COMPLEX, None, None, weights, [], [], refusal, "", input_ports(ref.inputs, set())
        )
    output_dtypes = _probe(module, ref, spec)
    graph, sentinels = _trace(cls, ref, spec, weights, len(output_dtypes))
    taken = {n.name for n in graph.graph.nodes} | {w.name for w in weights} | {p.name for p in ref.float_params}
    inputs, outputs = input_ports(ref.inputs, taken), output_ports(len(output_dtypes))
    placeholders = _placeholder_names(graph, inputs, weights, outputs)
    val = next(n for n in graph.graph.nodes if n.op == "placeholder").meta["val"]
    rows, cols = val.shape
    dtype_ptr = f"{inputs[0].arg}_ptr"  # explicit rounds in the reference go to the inputs' dtype
    vectors = _vector_sizes(graph, placeholders, weights)
    lowering = Lowering(graph.graph, rows, cols, torch.bfloat16, sentinels, placeholders, dtype_ptr, vectors)
    graph_code = graph.code
    parts = (ref, Tier.COMPLEX, None, None, weights, [], output_dtypes)
    try:
        out_nodes = lowering.run()
        forward = lowering.body({o.arg: n for o, n in zip(outputs, out_nodes, strict=False)})
        grad_nodes = out_nodes[len(outputs) :]
        learnable = [w.name for w in weights if w.learnable]
        grads = {i.grad_arg: n for i, n in zip(inputs, grad_nodes, strict=False) if n is not None}
        params = grad_nodes[len(inputs) :]
        grads |= {f"d{w}": n for w, n in zip(learnable, params, strict=True) if n is not None}
        backward = lowering.body(grads)
    except Unsupported as exc:
        return Understanding(spec, *parts, _refusal(exc), graph_code, inputs, outputs)
    statements = forward.stmts + backward.stmts + backward.epilogue
    runtime = [p.name for p in ref.float_params if any(p.name in s.expr for s in statements)]
    columns = any(not w.scalar for w in weights)
    reduces = forward.row_reductions or backward.row_reductions
    tier = Tier.ELEMENTWISE if not columns and not reduces else Tier.ROWWISE
    if tier == Tier.ROWWISE:
        lowering.cache_row_statistics(forward, backward)
    flags = sorted({w.optional for w in weights if w.optional})
    dropin = dropin_mod.find(spec, ref, len(weights), runtime, flags)
    return Understanding(
        spec, ref, tier, forward, backward, weights, runtime, output_dtypes, "", graph_code, inputs, outputs, dropin
    )


def _refusal(exc: Unsupported) -> str:
    return _refusal_text(f"the traced graph needs `{exc.op}` ({exc.reason})")


TILING_NEEDS = (
    "This op would need a hand-designed tiling (multi-pass or cross-row reduction, matmul, indexing): "
    "write it with the liger-kernel-dev skill's tier-3 template (cross_entropy.py is the closest pattern)."
)
BROADCAST_NEEDS = (
    "This op would need a kernel that reads each broadcast input at its own shape (a row index per batch, per token "
    "or none): write it with the liger-kernel-dev skill's tier-3 template."
)


def _refusal_text(reason: str, needs: str = TILING_NEEDS) -> str:
    return (
        f"tier 3: {reason}. The default engine writes element-wise kernels and row-wise reductions over the last "
        "dimension, of one or more tensor inputs and outputs of one shape, with optional parameters and buffers of "
        f"shape (hidden,) or of one element. {needs}"
    )


def _instantiate(cls, ref: ReferenceCode, hidden: int, sentinels: bool, **flags) -> torch.nn.Module:
    kwargs: dict = dict(flags)  # switches, or float parameters at other values than their defaults
    if sentinels:
        kwargs |= {p.name: SENTINEL_BASE * (i + 1) for i, p in enumerate(ref.float_params)}
    args = (hidden,) if ref.has_weights else ()
    with reference_mod._target_on_path(ref.repo):
        return cls(*args, **kwargs)


def _weights(module: torch.nn.Module, ref: ReferenceCode, spec: Spec) -> list[Weight]:
    """Parameters (learnable) then buffers (runtime constants); each one element or one value per column."""
    known = dict(ref.weights)
    hidden = PROBE_SHAPE[1]
    out = []
    tensors = [(n, t, True) for n, t in module.named_parameters()] + [(n, t, False) for n, t in module.named_buffers()]
    for key, tensor, learnable in tensors:
        small = tensor.dim() == 1 and 1 < tensor.numel() <= MAX_SMALL_PARAM and tensor.numel() != hidden
        if tensor.numel() != 1 and tuple(tensor.shape) != (hidden,) and not small:
            kind = "parameter" if learnable else "buffer"
            raise PipelineError(
                f"the reference's {kind} {key} has shape {tuple(tensor.shape)}; the kernel engine handles tensors of "
                f"one element, of shape (hidden,) or of a small shape (k,) (k <= {MAX_SMALL_PARAM}) read element by element",
                hint="a weight of another shape needs a hand-designed kernel (liger-kernel-dev skill, tier 3)",
            )
        name = _short(key.removeprefix("act.") if spec.kind == SpecKind.ACTIVATION else key)
        if tensor.numel() == 1 or small:  # loaded once per program; a (k,) one element at a time
            values = tensor.detach().float().reshape(-1).tolist()
            init = repr(values[0]) if len(set(values)) == 1 else f"torch.tensor({values!r})"
            out.append(Weight(name, key, True, tuple(tensor.shape), init, learnable))
            continue
        init = known.get(key) or ("zeros" if bool((tensor == 0).all()) else "ones")
        out.append(Weight(name, key, False, (), init, learnable))
    return out


NEUTRAL_CANDIDATES = (0.0, 1.0)


def _optional_weights(cls, ref: ReferenceCode, weights: list[Weight]) -> list[Weight]:
    """A switch of the reference that defaults to True and leaves parameters out when False (DyT's `beta`, RMSNorm's
    `elementwise_affine`) makes them optional where the op without them is the op with them held at one constant:
    found by running both on the same input (Gemma's `x * (1 + w)` without w is w = 0, Llama's `w * x` is w = 1).
    The generated Function then takes None for them, as Liger's do. A switch that changes the op otherwise is left
    out of the kernel (the constructor accepts it at its default only)."""
    hidden = PROBE_SHAPE[1]
    # the constant must not depend on a runtime float (ModulatedRMSNorm's `x * (offset + w)`): tried at two settings
    settings = [{}, {p.name: p.default + 0.25 for p in ref.float_params}]
    for flag in ref.flags:
        found = set()
        for floats in settings:
            try:
                full = _instantiate(cls, ref, hidden, sentinels=False, **floats)
                without = _instantiate(cls, ref, hidden, sentinels=False, **floats, **{flag: False})
            except Exception:  # the reference rejects the switch off: nothing optional about it
                found.add(None)
                break
            present = dict(full.named_parameters()) | dict(full.named_buffers())
            kept = dict(without.named_parameters()) | dict(without.named_buffers())
            dropped = [k for k in present if k not in kept]
            if not dropped or any(k not in present for k in kept):
                found.add(None)
                break
            found.add(_neutral_value(full, without, dropped, ref))
        if len(found) != 1 or None in found:
            continue
        neutral = found.pop()
        weights = [replace(w, optional=flag, neutral=neutral) if w.state_key in dropped else w for w in weights]
    return weights


def _neutral_value(full: torch.nn.Module, without: torch.nn.Module, dropped: list[str], ref: ReferenceCode):
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(*PROBE_SHAPE, generator=generator) for _ in ref.inputs]
    state = dict(full.named_parameters()) | dict(full.named_buffers())
    with torch.no_grad():
        for key, tensor in (dict(without.named_parameters()) | dict(without.named_buffers())).items():
            tensor.copy_(torch.rand(tensor.shape, generator=generator) + 0.5)
            state[key].copy_(tensor)
        try:
            expected = _as_list(without(*inputs))
        except Exception:
            return None
        for value in NEUTRAL_CANDIDATES:
            for key in dropped:
                state[key].fill_(value)
            actual = _as_list(full(*inputs))
            if len(actual) == len(expected) and all(
                a.shape == e.shape and torch.allclose(a, e, rtol=1e-6, atol=1e-6)
                for a, e in zip(actual, expected, strict=True)
            ):
                return value
    return None


def _as_list(result) -> list:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _probe(module: torch.nn.Module, ref: ReferenceCode, spec: Spec) -> list[str]:
    """Run the reference eagerly on small real tensors: the bad-input checks that need real values. Returns each
    output's dtype on bf16 inputs ("input" or "float32")."""
    inputs = [torch.randn(*PROBE_SHAPE, dtype=torch.float32, requires_grad=True) for _ in ref.inputs]
    shapes = f"a {PROBE_SHAPE} float32 input" if len(inputs) == 1 else f"{len(inputs)} {PROBE_SHAPE} float32 inputs"
    try:
        result = module(*inputs)
    except Exception as exc:
        raise PipelineError(
            f"{spec.text} fails on {shapes}: {type(exc).__name__}: {exc}",
            hint=f"the op must take {_inputs_phrase(ref)} of shape (..., hidden)",
        ) from exc
    outputs = list(result) if isinstance(result, (tuple, list)) else [result]
    for y in outputs:
        _check_output(y, spec, len(outputs))
    try:
        grads = torch.autograd.grad(outputs, inputs, [torch.randn_like(y) for y in outputs], allow_unused=True)
    except RuntimeError as exc:
        raise PipelineError(f"{spec.text} is not differentiable: {exc}".strip(), hint="no backward to build") from exc
    if not any(g is not None and bool(g.abs().sum() > 0) for g in grads):
        raise PipelineError(
            f"{spec.text} is not differentiable in any useful sense: its gradient is zero everywhere on random inputs",
            hint="piecewise-constant ops (round, floor, sign) need no backward kernel",
        )
    inputs16 = [torch.randn(*PROBE_SHAPE, dtype=torch.bfloat16) for _ in ref.inputs]
    with torch.no_grad():
        result16 = module.to(torch.bfloat16)(*inputs16)
    module.float()
    outputs16 = list(result16) if isinstance(result16, (tuple, list)) else [result16]
    return ["input" if y16.dtype == torch.bfloat16 else "float32" for y16 in outputs16]


def _inputs_phrase(ref: ReferenceCode) -> str:
    return "one tensor" if len(ref.inputs) == 1 else f"{len(ref.inputs)} tensors ({', '.join(ref.inputs)}), each"


def _check_output(y, spec: Spec, count: int) -> None:
    if not isinstance(y, torch.Tensor):
        what = "one tensor" if count == 1 else "a tuple of tensors"
        raise PipelineError(f"{spec.text} returns {type(y).__name__}, not {what}", hint="kernels output tensors")
    if not (y.is_floating_point() or y.is_complex()):
        raise PipelineError(
            f"{spec.text} returns integer/boolean values ({y.dtype}); a kernel with integer outputs has no gradient",
            hint="the kernel pipeline builds differentiable ops (forward and backward)",
        )
    if not y.requires_grad:
        raise PipelineError(
            f"{spec.text} is not differentiable: its output does not require grad (detached or computed under no_grad)",
            hint="the kernel pipeline builds ops with a backward; an inference-only op needs no autograd Function",
        )
    if tuple(y.shape) != PROBE_SHAPE:
        raise PipelineError(
            f"tier 3: {spec.text} maps shape {PROBE_SHAPE} to {tuple(y.shape)}; the default engine writes kernels "
            "whose outputs have the input's shape",
            hint="shape-changing ops need a hand-designed kernel (liger-kernel-dev skill, tier 3)",
        )


def _trace(cls, ref: ReferenceCode, spec: Spec, weights: list[Weight], n_outputs: int):
    module = _instantiate(cls, ref, TRACE_SHAPE[1], sentinels=True).to(torch.bfloat16)
    state = dict(module.named_parameters()) | dict(module.named_buffers())
    keys = [w.state_key for w in weights]
    n_inputs = len(ref.inputs)
    n_params = sum(w.learnable for w in weights)
    sentinels = {SENTINEL_BASE * (i + 1): p.name for i, p in enumerate(ref.float_params)}

    def joint(*args):
        inputs = [t.detach().requires_grad_(True) for t in args[:n_inputs]]
        tensors, dys = args[n_inputs : len(args) - n_outputs], args[len(args) - n_outputs :]
        params = [t.detach().requires_grad_(True) for t in tensors[:n_params]]
        with torch.enable_grad():
            values = dict(zip(keys, params + list(tensors[n_params:]), strict=True))
            result = torch.func.functional_call(module, values, tuple(inputs))
            outputs = list(result) if isinstance(result, (tuple, list)) else [result]
            grads = torch.autograd.grad(outputs, [*inputs, *params], list(dys), allow_unused=True)
        return (*outputs, *grads)

    decompositions = core_aten_decompositions() | get_decompositions(EXTRA_DECOMPOSITIONS)
    decompositions[aten.native_layer_norm.default] = _native_layer_norm
    example = [torch.randn(*TRACE_SHAPE, dtype=torch.bfloat16) for _ in range(n_inputs)]
    example += [state[k].detach().clone() for k in keys]
    example += [torch.randn(*TRACE_SHAPE, dtype=torch.bfloat16) for _ in range(n_outputs)]
    try:
        with reference_mod._target_on_path(ref.repo):
            graph = make_fx(joint, tracing_mode="symbolic", decomposition_table=decompositions)(*example)
    except Exception as exc:
        raise _trace_error(exc, spec) from exc
    return graph, sentinels


def _native_layer_norm(input, normalized_shape, weight, bias, eps):
    """torch's decomposition, less its CPU-only rounding of the saved mean and rstd to the input dtype: the trace runs
    on CPU tensors, the kernel runs beside CUDA's LayerNorm, which keeps both in fp32 for its backward."""
    dims = list(range(input.dim() - len(normalized_shape), input.dim()))
    x = input.to(torch.float32)
    var, mean = torch.var_mean(x, dim=dims, correction=0, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    out = (x - mean) * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out.to(input.dtype), mean, rstd


def _vector_sizes(graph, placeholders: dict[str, str], weights: list[Weight]) -> dict[str, int]:
    """The symbolic size the trace gave each small (k,) parameter, and its k."""
    vectors = {w.name: w.shape[0] for w in weights if w.vector}
    nodes = [n for n in graph.graph.nodes if n.op == "placeholder" and placeholders[n.name] in vectors]
    return {str(n.meta["val"].shape[0]): vectors[placeholders[n.name]] for n in nodes}


def _placeholder_names(graph, inputs: list[Port], weights: list[Weight], outputs: list[Port]) -> dict[str, str]:
    placeholders = [n.name for n in graph.graph.nodes if n.op == "placeholder"]
    kernel_names = [i.var for i in inputs] + [w.name for w in weights] + [o.grad_var for o in outputs]
    return dict(zip(placeholders, kernel_names, strict=True))


def _short(param_name: str) -> str:
    return param_name.replace(".", "_")


def _trace_error(exc: Exception, spec: Spec) -> PipelineError:
    text = f"{type(exc).__name__}: {exc}"
    where = _reference_frame(exc)
    if "data-dependent" in text.lower() or "DataDependent" in type(exc).__name__ or "_local_scalar_dense" in text:
        return PipelineError(
            f"{spec.text} has data-dependent Python control flow{where}: a branch or loop decided by tensor values "
            "cannot become one Triton kernel",
            hint="write the branch as torch.where(cond, a, b) so both sides are computed element-wise",
        )
    return PipelineError(
        f"{spec.text} could not be traced to ATen{where}: {text.splitlines()[0][:300]}",
        hint="the op must be plain PyTorch tensor code (no .item(), no numpy, no in-place writes to inputs)",
    )


def _reference_frame(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "site-packages" not in f.filename]
    frames = [f for f in frames if "pipelines/kernel" not in f.filename]
    return f" (at {frames[-1].filename}:{frames[-1].lineno}: {frames[-1].line})" if frames else ""
