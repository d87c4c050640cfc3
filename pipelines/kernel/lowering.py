"""ATen graph -> Triton statements: one table entry per ATen op, no per-kernel code.

The traced graph (`understand._trace`) computes `(outputs..., dinputs..., dparams...)` from
`(inputs..., params..., dys...)`, every input and output of one 2-D symbolic shape (R, C) (`silu(a) * b`, or add +
RMSNorm returning the sum too). Every value there has one of five shapes, and each becomes a value inside one
Triton program that holds a row (or a flat block of elements):

    (R, C)        ROW     a vector over the program's columns
    (R, 1), (R,)  RSCALAR a scalar per row (the result of a reduction over the last dimension)
    (C,), (1, C)  COL     a vector shared by all rows (a learnable weight or bias)
    (), (1,)      SCALAR  a constant, or a scalar parameter / buffer loaded once per program
    (k,)          VECTOR  a small parameter (PolyNorm's (3,) weight): `w[i]` is a scalar load of element i, and its
                          gradient is k whole-tensor sums put together element by element (select_backward, add)

A sum over dimension 0 is a parameter gradient (COLSUM): the kernel accumulates it across the rows it handles.
A sum over every dimension is a scalar parameter's gradient (TOTAL): each program stores its partial sum and one
more program adds them up, then runs the scalar statements autograd applies after that sum (the EPILOGUE, e.g. a
softplus backward). Anything else (another reduction axis, a reshape, an indexing op, an op missing from OPS, a
tensor-sized value computed from a whole-tensor sum) raises Unsupported, which makes the op tier 3. All arithmetic is done in fp32; an explicit cast to the input's low-precision dtype in
the reference is kept as a rounding step, so casting modes (llama / gemma / none) come out of the graph itself.
"""

from __future__ import annotations

import enum
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

import torch

aten = torch.ops.aten
prims = torch.ops.prims


class Unsupported(Exception):
    """The graph needs something the row-wise engine cannot express (tier 3). `op` is the ATen op at fault."""

    def __init__(self, op: str, reason: str):
        super().__init__(f"{op}: {reason}")
        self.op = op
        self.reason = reason


class Kind(str, enum.Enum):
    ROW = "row"
    RSCALAR = "row scalar"
    COL = "col"
    SCALAR = "scalar"
    COLSUM = "column sum"
    VECTOR = "small vector"  # a (k,) parameter, or its gradient: k scalars


@dataclass(frozen=True)
class Stmt:
    var: str
    expr: str


@dataclass
class Body:
    """Statements for one kernel: what it loads, what it computes, what it stores."""

    stmts: list[Stmt] = field(default_factory=list)
    loads: list[str] = field(default_factory=list)  # placeholder names in graph order: x, params, dy
    stores: dict[str, str] = field(default_factory=dict)  # output name -> variable (ROW outputs)
    col_sums: dict[str, str] = field(default_factory=dict)  # parameter-gradient name -> ROW variable to accumulate
    totals: dict[str, str] = field(default_factory=dict)  # whole-tensor sum variable -> ROW variable it sums
    epilogue: list[Stmt] = field(default_factory=list)  # scalar statements after the totals (one program)
    scalar_stores: dict[str, str] = field(default_factory=dict)  # scalar-parameter gradient name -> variable
    vector_stores: dict[str, list[str]] = field(default_factory=dict)  # small (k,) parameter gradient -> k values
    epilogue_loads: list[str] = field(default_factory=list)  # placeholders the epilogue reads
    uses_n_cols: bool = False
    row_reductions: int = 0
    # row statistics (fp32, one per row) the forward stores and the backward loads instead of recomputing them
    cached: list[str] = field(default_factory=list)
    ops: set[str] = field(default_factory=set)  # ATen ops used, for the profile


# ops whose fp32 evaluation matters (the skill's "precision_sensitive_ops")
PRECISION_SENSITIVE = {
    "exp",
    "log",
    "log1p",
    "expm1",
    "tanh",
    "sigmoid",
    "erf",
    "rsqrt",
    "sqrt",
    "pow",
    "div",
    "sin",
    "cos",
}
LOW_PRECISION = (torch.bfloat16, torch.float16)


def _lit(value) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return f"{value}.0"
    if isinstance(value, float):
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        if math.isnan(value):
            return 'float("nan")'
        return repr(value)
    raise Unsupported("constant", f"cannot use {value!r} of type {type(value).__name__} inside a kernel")


def _tanh(a: str) -> str:
    # 2*sigmoid(2a) - 1: libdevice.tanh would not run under TRITON_INTERPRET=1
    return f"(2.0 * tl.sigmoid(2.0 * {a}) - 1.0)"


def _log1p(a: str) -> str:
    # Goldberg's trick: log(u) * a / (u - 1) keeps log1p's accuracy for small a without libdevice
    return f"tl.where(1.0 + {a} == 1.0, {a}, tl.log(1.0 + {a}) * ({a} / ((1.0 + {a}) - 1.0)))"


def _expm1(a: str) -> str:
    return f"tl.where(tl.exp({a}) == 1.0, {a}, (tl.exp({a}) - 1.0) * ({a} / tl.log(tl.exp({a}))))"


class Lit(str):
    """A Python constant already written as Triton source; `value` keeps the number for builders that need it."""

    value: object = None


def _pow(a: str, b) -> str:
    b = b.value if isinstance(b, Lit) else b
    if isinstance(b, (int, float)) and not isinstance(b, bool) and float(b).is_integer() and abs(b) <= 4:
        k = int(b)
        if k == 0:
            return f"({a} * 0.0 + 1.0)"
        prod = " * ".join([a] * abs(k))
        return f"({prod})" if k > 0 else f"(1.0 / ({prod}))"
    if b == 0.5:
        return f"tl.sqrt({a})"
    if b == -0.5:
        return f"tl.rsqrt({a})"
    exponent = _lit(b) if isinstance(b, (int, float)) else b
    return f"tl.exp({exponent} * tl.log({a}))"


def _alpha(kwargs: dict) -> str:
    alpha = kwargs.get("alpha", 1)
    return "" if alpha == 1 else f"{_lit(alpha)} * "


def _clamp(a: str, lo, hi) -> str:
    out = a
    if lo is not None:
        out = f"tl.maximum({out}, {lo})"
    if hi is not None:
        out = f"tl.minimum({out}, {hi})"
    return out


def _opt(value) -> str | None:
    return None if value is None else value


# op -> (name for the profile, builder(args as strings or python values, kwargs) -> expression)
Builder = Callable[..., str]
POINTWISE: dict[object, tuple[str, Builder]] = {
    aten.add.Tensor: ("add", lambda a, b, **k: f"({a} + {_alpha(k)}{b})"),
    aten.add.Scalar: ("add", lambda a, b, **k: f"({a} + {_alpha(k)}{b})"),
    aten.sub.Tensor: ("sub", lambda a, b, **k: f"({a} - {_alpha(k)}{b})"),
    aten.sub.Scalar: ("sub", lambda a, b, **k: f"({a} - {_alpha(k)}{b})"),
    aten.rsub.Scalar: ("sub", lambda a, b, **k: f"({b} - {_alpha(k)}{a})"),
    aten.rsub.Tensor: ("sub", lambda a, b, **k: f"({b} - {_alpha(k)}{a})"),
    aten.mul.Tensor: ("mul", lambda a, b: f"({a} * {b})"),
    aten.mul.Scalar: ("mul", lambda a, b: f"({a} * {b})"),
    aten.div.Tensor: ("div", lambda a, b: f"({a} / {b})"),
    aten.div.Scalar: ("div", lambda a, b: f"({a} / {b})"),
    aten.neg.default: ("neg", lambda a: f"(-{a})"),
    aten.reciprocal.default: ("div", lambda a: f"(1.0 / {a})"),
    aten.exp.default: ("exp", lambda a: f"tl.exp({a})"),
    aten.exp2.default: ("exp", lambda a: f"tl.exp2({a})"),
    aten.expm1.default: ("expm1", lambda a: _expm1(a)),
    aten.log.default: ("log", lambda a: f"tl.log({a})"),
    aten.log2.default: ("log", lambda a: f"tl.log2({a})"),
    aten.log1p.default: ("log1p", lambda a: _log1p(a)),
    aten.sqrt.default: ("sqrt", lambda a: f"tl.sqrt({a})"),
    aten.rsqrt.default: ("rsqrt", lambda a: f"tl.rsqrt({a})"),
    aten.sigmoid.default: ("sigmoid", lambda a: f"tl.sigmoid({a})"),
    aten.tanh.default: ("tanh", lambda a: _tanh(a)),
    aten.erf.default: ("erf", lambda a: f"tl.erf({a})"),
    aten.sin.default: ("sin", lambda a: f"tl.sin({a})"),
    aten.cos.default: ("cos", lambda a: f"tl.cos({a})"),
    aten.abs.default: ("abs", lambda a: f"tl.abs({a})"),
    aten.floor.default: ("floor", lambda a: f"tl.floor({a})"),
    aten.ceil.default: ("ceil", lambda a: f"tl.ceil({a})"),
    aten.sign.default: ("sign", lambda a: f"tl.where({a} > 0, 1.0, tl.where({a} < 0, -1.0, 0.0))"),
    aten.sgn.default: ("sign", lambda a: f"tl.where({a} > 0, 1.0, tl.where({a} < 0, -1.0, 0.0))"),
    aten.pow.Tensor_Scalar: ("pow", lambda a, b: _pow(a, b)),
    aten.pow.Tensor_Tensor: ("pow", lambda a, b: _pow(a, b)),
    aten.pow.Scalar: ("pow", lambda a, b: f"tl.exp({b} * tl.log({_lit(a) if not isinstance(a, str) else a}))"),
    aten.relu.default: ("relu", lambda a: f"tl.maximum({a}, 0.0)"),
    aten.maximum.default: ("maximum", lambda a, b: f"tl.maximum({a}, {b})"),
    aten.minimum.default: ("minimum", lambda a, b: f"tl.minimum({a}, {b})"),
    aten.clamp.default: ("clamp", lambda a, lo=None, hi=None: _clamp(a, _opt(lo), _opt(hi))),
    aten.clamp.Tensor: ("clamp", lambda a, lo=None, hi=None: _clamp(a, _opt(lo), _opt(hi))),
    aten.clamp_min.default: ("clamp", lambda a, lo: _clamp(a, lo, None)),
    aten.clamp_max.default: ("clamp", lambda a, hi: _clamp(a, None, hi)),
    aten.where.self: ("where", lambda c, a, b: f"tl.where({c}, {a}, {b})"),
    aten.masked_fill.Scalar: ("where", lambda a, m, v: f"tl.where({m}, {v}, {a})"),
    aten.masked_fill_.Scalar: ("where", lambda a, m, v: f"tl.where({m}, {v}, {a})"),
    aten.gt.Scalar: ("compare", lambda a, b: f"({a} > {b})"),
    aten.gt.Tensor: ("compare", lambda a, b: f"({a} > {b})"),
    aten.ge.Scalar: ("compare", lambda a, b: f"({a} >= {b})"),
    aten.ge.Tensor: ("compare", lambda a, b: f"({a} >= {b})"),
    aten.lt.Scalar: ("compare", lambda a, b: f"({a} < {b})"),
    aten.lt.Tensor: ("compare", lambda a, b: f"({a} < {b})"),
    aten.le.Scalar: ("compare", lambda a, b: f"({a} <= {b})"),
    aten.le.Tensor: ("compare", lambda a, b: f"({a} <= {b})"),
    aten.eq.Scalar: ("compare", lambda a, b: f"({a} == {b})"),
    aten.eq.Tensor: ("compare", lambda a, b: f"({a} == {b})"),
    aten.ne.Scalar: ("compare", lambda a, b: f"({a} != {b})"),
    aten.ne.Tensor: ("compare", lambda a, b: f"({a} != {b})"),
    aten.logical_and.default: ("logical", lambda a, b: f"({a} & {b})"),
    aten.logical_and_.default: ("logical", lambda a, b: f"({a} & {b})"),
    aten.logical_or.default: ("logical", lambda a, b: f"({a} | {b})"),
    aten.bitwise_and.Tensor: ("logical", lambda a, b: f"({a} & {b})"),
    aten.bitwise_or.Tensor: ("logical", lambda a, b: f"({a} | {b})"),
    aten.logical_not.default: ("logical", lambda a: f"({a} == 0)"),
    aten.bitwise_not.default: ("logical", lambda a: f"({a} == 0)"),
    aten.isnan.default: ("compare", lambda a: f"({a} != {a})"),
    prims.div.default: ("div", lambda a, b: f"({a} / {b})"),
}

# shape-only ops: the value inside the program does not change
IDENTITY = {
    aten.alias.default,
    aten.clone.default,
    aten.detach.default,
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.expand.default,
    aten.unsqueeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.squeeze.default,
    aten.lift_fresh_copy.default,
    prims.broadcast_in_dim.default,  # a row scalar (R,) seen as (R, 1): the same value in the program
    aten.contiguous.default if hasattr(aten, "contiguous") else aten.alias.default,
}
CASTS = {aten._to_copy.default, torch.ops.prims.convert_element_type.default}
REDUCTIONS = {
    aten.sum.dim_IntList: ("sum", "0.0", "tl.sum"),
    aten.sum.default: ("sum", "0.0", "tl.sum"),
    prims.sum.default: ("sum", "0.0", "tl.sum"),
    aten.mean.dim: ("mean", "0.0", "tl.sum"),
    aten.amax.default: ("amax", 'float("-inf")', "tl.max"),
    aten.amin.default: ("amin", 'float("inf")', "tl.min"),
}
CONSTANTS = {aten.scalar_tensor.default, aten.full.default}
LIKE_CONSTANTS = {aten.full_like.default: None, aten.zeros_like.default: 0.0, aten.ones_like.default: 1.0}
PY_OPS = {operator.mul: "*", operator.add: "+", operator.sub: "-", operator.truediv: "/", operator.floordiv: "//"}


@dataclass
class Lowering:
    """Walks one joint graph once; `body(outputs)` then keeps only the statements those outputs need."""

    graph: torch.fx.Graph
    rows: object  # the symbolic R of x's shape
    cols: object  # the symbolic C
    input_dtype: torch.dtype
    float_params: dict[float, str]  # sentinel value -> runtime parameter name
    placeholder_names: dict[str, str]  # graph placeholder -> kernel variable (x, w, b, dy)
    dtype_ptr: str = "X_ptr"  # the pointer whose element type an explicit round to the input dtype uses
    vector_sizes: dict[str, int] = field(default_factory=dict)  # a small parameter's traced (symbolic) size -> k
    refs: dict[str, str] = field(default_factory=dict)  # node -> how later statements refer to its value
    stmts: dict[str, str] = field(default_factory=dict)  # node -> expression it assigns (nodes that compute)
    kinds: dict[str, Kind] = field(default_factory=dict)
    deps: dict[str, set[str]] = field(default_factory=dict)
    op_of: dict[str, str] = field(default_factory=dict)
    totals: dict[str, str] = field(default_factory=dict)  # TOTAL node -> the ROW value it sums
    after_total: set[str] = field(default_factory=set)  # TOTAL nodes and every value computed from one
    vectors: dict[str, list[str]] = field(default_factory=dict)  # VECTOR gradient node -> its k scalar expressions

    def run(self) -> list[torch.fx.Node]:
        """Lower every node; returns the graph's output nodes (flattened)."""
        outputs: list[torch.fx.Node] = []
        for node in self.graph.nodes:
            if node.op == "placeholder":
                self.refs[node.name] = self.placeholder_names[node.name]
                self.kinds[node.name] = self._kind_of(node)
                self.deps[node.name] = set()
            elif node.op == "call_function":
                self.deps[node.name] = {a.name for a in node.all_input_nodes}
                self._call(node)
            elif node.op == "output":
                outputs = list(node.args[0])
        return outputs

    def _call(self, node: torch.fx.Node) -> None:
        target = node.target
        if target is aten.sym_size.int:
            return self._sym_size(node)
        if target in PY_OPS or getattr(target, "__name__", "") in ("sym_float", "sym_int"):
            return self._python_op(node)
        if target in IDENTITY:
            return self._alias(node, node.args[0])
        if target in CASTS:
            return self._cast(node)
        if target in CONSTANTS:
            value = node.args[1] if target is aten.full.default else node.args[0]
            return self._set(node, self._arg(value), "constant")
        if target in LIKE_CONSTANTS:
            value = node.args[1] if target is aten.full_like.default else LIKE_CONSTANTS[target]
            return self._set(node, f"({self._arg(node.args[0])} * 0.0 + {self._arg(value)})", "constant")
        if target in REDUCTIONS:
            return self._reduction(node)
        if target is prims.var.default:
            return self._variance(node)
        if target is aten.select.int and self.kinds[node.args[0].name] is Kind.VECTOR:
            return self._select(node)
        if target is aten.select_backward.default:
            return self._select_backward(node)
        if target in POINTWISE and any(isinstance(a, torch.fx.Node) and a.name in self.vectors for a in node.args):
            return self._vector_pointwise(node)
        if target in POINTWISE:
            label, build = POINTWISE[target]
            args = [self._arg(a) for a in node.args]
            kwargs = {k: (self._arg(v) if k != "alpha" else v) for k, v in node.kwargs.items()}
            return self._set(node, build(*args, **kwargs), label)
        raise Unsupported(_op_name(target), "no row-wise Triton lowering for this ATen op")

    def _set(self, node: torch.fx.Node, expr: str, label: str, kind: Kind | None = None) -> None:
        self.kinds[node.name] = kind or self._kind_of(node)
        if any(a.name in self.after_total for a in node.all_input_nodes):
            if self.kinds[node.name] is not Kind.SCALAR:
                raise Unsupported(label, "a tensor-sized value needs a whole-tensor sum first (two passes)")
            self.after_total.add(node.name)
        self.stmts[node.name] = expr
        self.refs[node.name] = node.name
        self.op_of[node.name] = label

    def _select(self, node: torch.fx.Node) -> None:
        """One element of a small (k,) parameter: a scalar load, not a dependence on the whole parameter."""
        _, dim, index = node.args
        self.deps[node.name] = set()
        self._set(node, f"tl.load({self.refs[node.args[0].name]}_ptr + {index}).to(tl.float32)", "select", Kind.SCALAR)

    def _select_backward(self, node: torch.fx.Node) -> None:
        """A small parameter's gradient is built element by element: the scalar at `index`, zeros elsewhere."""
        grad, sizes, dim, index = node.args
        if self.kinds[grad.name] is not Kind.SCALAR or dim != 0 or len(sizes) != 1:
            raise Unsupported("select_backward", "a gradient of an element of a parameter that is not a small (k,) one")
        size = str(sizes[0].meta["val"]) if isinstance(sizes[0], torch.fx.Node) else str(sizes[0])
        elements = ["0.0"] * self.vector_sizes.get(size, int(size) if size.isdigit() else 0)
        if not elements:
            raise Unsupported("select_backward", f"a gradient of an element of a parameter of size {size}")
        elements[index] = self._arg(grad)
        self._vector(node, elements)

    def _vector_pointwise(self, node: torch.fx.Node) -> None:
        """Element by element over a small parameter's gradient (the sum of its select_backward pieces)."""
        label, build = POINTWISE[node.target]
        size = next(
            len(self.vectors[a.name]) for a in node.args if isinstance(a, torch.fx.Node) and a.name in self.vectors
        )
        columns = [
            [
                self.vectors[a.name][i] if isinstance(a, torch.fx.Node) and a.name in self.vectors else self._arg(a)
                for a in node.args
            ]
            for i in range(size)
        ]
        if label == "add" and not node.kwargs:  # the pieces are zero but at one index each: keep the sums readable
            columns = [[a for a in args if a != "0.0"] or ["0.0"] for args in columns]
            self._vector(node, [" + ".join(args) if len(args) > 1 else args[0] for args in columns])
        else:
            self._vector(node, [build(*args) for args in columns])
        self.op_of[node.name] = label

    def _vector(self, node: torch.fx.Node, elements: list[str]) -> None:
        self.vectors[node.name] = elements
        self.kinds[node.name] = Kind.VECTOR
        self.refs[node.name] = node.name
        self.op_of.setdefault(node.name, "select")
        if any(a.name in self.after_total for a in node.all_input_nodes):
            self.after_total.add(node.name)

    def _alias(self, node: torch.fx.Node, source: torch.fx.Node) -> None:
        self.refs[node.name] = self.refs[source.name]
        colsum = self.kinds[source.name] is Kind.COLSUM
        self.kinds[node.name] = Kind.COLSUM if colsum else self._kind_of(node)
        if source.name in self.after_total:
            self.after_total.add(node.name)

    def _cast(self, node: torch.fx.Node) -> None:
        dtype = node.kwargs.get("dtype", node.args[1] if len(node.args) > 1 else None)
        source = node.args[0]
        if self.kinds[source.name] is Kind.COLSUM or dtype is None or dtype in (torch.float32, torch.float64):
            return self._alias(node, source)
        value = self._arg(source)
        if dtype is torch.bool:
            return self._set(node, f"({value} != 0)", "cast")
        if dtype in LOW_PRECISION and dtype == self.input_dtype:
            # an explicit round to the input dtype in the reference (llama casting mode, `.to(input_dtype)`)
            return self._set(node, f"{value}{_round_suffix(self.dtype_ptr)}", "round to input dtype")
        raise Unsupported("_to_copy", f"cast to {dtype} is neither fp32 nor the input dtype")

    def _reduction(self, node: torch.fx.Node) -> None:
        label, neutral, fn = REDUCTIONS[node.target]
        source = node.args[0]
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        ndim = len(source.meta["val"].shape)
        dims = sorted(d % ndim for d in dims) if dims else list(range(ndim))
        src_kind = self.kinds[source.name]
        if src_kind is Kind.COLSUM:
            raise Unsupported(
                label, "a reduction of a sum over the rows (dimension 0): only the last dimension is row-wise"
            )
        if ndim == 2 and dims == [1] and src_kind in (Kind.ROW, Kind.COL):
            # keep_dims: a (rows, 1) column in a forward program that holds several rows, a (1,) block in a one-row loop
            value = f"{fn}(tl.where(mask, {self._arg(source)}, {neutral}), axis=-1, keep_dims=True)"
            if label == "mean":
                value = f"{value} / n_cols"
            return self._set(node, value, f"row {label}", Kind.RSCALAR)
        if label == "sum" and ndim == 2 and dims == [0] and src_kind is Kind.ROW:
            # a parameter's gradient: the backward kernel accumulates it over the rows it handles
            self.refs[node.name] = self._arg(source)
            self.kinds[node.name] = Kind.COLSUM
            return
        if label == "sum" and dims == list(range(ndim)) and src_kind is Kind.ROW:
            # a scalar parameter's gradient: partial sums per program, added up by one more program
            self.totals[node.name] = self._arg(source)
            self.refs[node.name] = node.name
            self.kinds[node.name] = Kind.SCALAR
            self.after_total.add(node.name)
            return
        raise Unsupported(label, f"reduces dimensions {dims} of a {ndim}-D value; only the last dimension is row-wise")

    def _variance(self, node: torch.fx.Node) -> None:
        """LayerNorm's row variance (prims.var over the last dimension, with its correction): two sums over the row
        held in registers, the mean first."""
        source, dims, correction = node.args[0], node.args[1], node.args[2] if len(node.args) > 2 else 0.0
        ndim = len(source.meta["val"].shape)
        if sorted(d % ndim for d in dims) != [ndim - 1] or self.kinds[source.name] not in (Kind.ROW, Kind.COL):
            raise Unsupported("var", f"a variance over dimensions {list(dims)}: only the last dimension is row-wise")
        x = self._arg(source)
        mean = f"(tl.sum(tl.where(mask, {x}, 0.0), axis=-1, keep_dims=True) / n_cols)"
        centred = f"tl.where(mask, {x} - {mean}, 0.0)"
        count = "n_cols" if not correction else f"(n_cols - {_lit(correction)})"
        value = f"tl.sum({centred} * {centred}, axis=-1, keep_dims=True) / {count}"
        self._set(node, value, "row var", Kind.RSCALAR)

    def _sym_size(self, node: torch.fx.Node) -> None:
        tensor, dim = node.args
        size = str(tensor.meta["val"].shape[dim])
        self.deps[node.name] = set()  # a size is a kernel argument (n_rows, n_cols): the tensor need not be loaded
        self.kinds[node.name] = Kind.SCALAR
        self.refs[node.name] = {str(self.cols): "n_cols", str(self.rows): "n_rows"}.get(size, size)

    def _python_op(self, node: torch.fx.Node) -> None:
        self.kinds[node.name] = Kind.SCALAR
        args = [self._arg(a) for a in node.args]
        self.refs[node.name] = f"({args[0]} {PY_OPS[node.target]} {args[1]})" if node.target in PY_OPS else args[0]

    def _arg(self, value) -> str | None:
        if isinstance(value, torch.fx.Node) and self.kinds.get(value.name) is Kind.VECTOR:
            raise Unsupported("use", "a small (k,) parameter is used whole; only its elements (w[0], w[1], ...) are")
        if isinstance(value, torch.fx.Node):
            if self.kinds.get(value.name) is Kind.COLSUM:
                # a sum over rows is a parameter's gradient only as an output; inside the op it is a cross-row reduction
                raise Unsupported(
                    "sum",
                    "a sum over the rows (dimension 0) is used inside the computation: only the last dimension is row-wise",
                )
            return self.refs[value.name]
        if value is None:
            return None
        if isinstance(value, float) and value in self.float_params:
            return self.float_params[value]
        width = str(self.cols)
        if width.isdigit() and isinstance(value, (int, float)) and not isinstance(value, bool) and value == int(width):
            # a module that holds its width (LayerNorm's normalized_shape) specialises the trace to the traced
            # width, so the width arrives as that number: it is the kernel's runtime width (the generated tests run
            # other widths)
            return "n_cols"
        lit = Lit(_lit(value))
        lit.value = value
        return lit

    def _kind_of(self, node: torch.fx.Node) -> Kind:
        val = node.meta.get("val")
        shape = [str(d) for d in getattr(val, "shape", ())]
        rows, cols = str(self.rows), str(self.cols)
        while len(shape) > 1 and shape[0] == "1":
            shape = shape[1:]
        if shape == [rows, cols]:
            return Kind.ROW
        if shape in ([rows, "1"], [rows]):
            return Kind.RSCALAR
        if shape == [cols]:
            return Kind.COL
        if len(shape) == 1 and shape[0] in self.vector_sizes:
            return Kind.VECTOR
        if all(d == "1" for d in shape):
            return Kind.SCALAR
        raise Unsupported(_op_name(node.target), f"produces shape {tuple(shape)}: not a row, a row scalar or a weight")

    def body(self, outputs: dict[str, torch.fx.Node]) -> Body:
        """The statements the named outputs need, in graph order: the backward recomputes what forward did.

        Outputs computed from a whole-tensor sum go to the epilogue; the main statements end at the summed values.
        """
        late = {k: n for k, n in outputs.items() if n.name in self.after_total}
        early = {k: n for k, n in outputs.items() if k not in late}
        epilogue = self._closure([n.name for n in late.values()], stop=set(self.totals))
        totals = [name for name in self.totals if name in epilogue]
        sources = {t: self.totals[t] for t in totals}
        needed = self._closure([n.name for n in early.values()] + [self._source_node(t) for t in totals], set())
        body = Body()
        for node in self.graph.nodes:
            if node.op == "placeholder" and node.name in needed:
                body.loads.append(self.refs[node.name])
            if node.op == "placeholder" and node.name in epilogue:
                body.epilogue_loads.append(self.refs[node.name])
            elif node.name in self.stmts and node.name in needed:
                body.stmts.append(Stmt(node.name, self.stmts[node.name]))
                body.ops.add(self.op_of[node.name])
                body.row_reductions += self.kinds[node.name] is Kind.RSCALAR and self.op_of[node.name].startswith("row")
            if node.name in self.stmts and node.name in epilogue and node.name not in self.totals:
                body.epilogue.append(Stmt(node.name, self.stmts[node.name]))
                body.ops.add(self.op_of[node.name])
        body.uses_n_cols = any("n_cols" in s.expr for s in body.stmts)
        body.totals = sources
        stored = [self.refs[n.name] for n in early.values() if self.kinds[n.name] is not Kind.COLSUM]
        for out_name, node in early.items():
            var = self.refs[node.name]
            if self.kinds[node.name] is Kind.COLSUM:
                body.col_sums[out_name] = var
            elif stored.count(var) > 1:  # one value stored twice (add + norm: dh == dresidual) keeps its statement
                body.stores[out_name] = var
            else:
                body.stores[out_name] = _without_final_round(body, var, self.dtype_ptr)
        for out_name, node in late.items():
            if node.name in self.vectors:
                body.vector_stores[out_name] = self.vectors[node.name]
            else:
                body.scalar_stores[out_name] = self.refs[node.name]
        return body

    def cache_row_statistics(self, forward: Body, backward: Body) -> None:
        """The forward stores the row statistics (mean, rstd: one fp32 per row) that the backward would recompute,
        and the backward loads them, as Liger's hand-written norms cache RSTD: a row reduction costs a cross-warp
        exchange and barrier per row of the backward's loop, which a wide row (16384) pays while its SM has few
        warps to hide it. Only statistics the backward still uses are cached; what computed them goes."""
        forward_stmts = set(forward.stmts)
        common = [s.var for s in backward.stmts if s in forward_stmts and self.kinds.get(s.var) is Kind.RSCALAR]
        if not common:
            return
        kept = [s for s in backward.stmts if s.var not in common]
        while True:
            used = _names(backward, kept)
            live = [s for s in kept if s.var in used]
            if len(live) == len(kept):
                break
            kept = live
        cached = [var for var in common if var in used]
        if cached:
            backward.stmts, backward.cached = kept, cached
            forward.cached = list(cached)

    def _closure(self, roots: list[str], stop: set[str]) -> set[str]:
        """Every node the roots depend on; the walk does not go past `stop` nodes (kept themselves)."""
        seen: set[str] = set()
        stack = list(roots)
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if name not in stop:
                stack.extend(self.deps.get(name, ()))
        return seen

    def _source_node(self, total: str) -> str:
        """The node whose value a TOTAL sums (its only tensor input)."""
        (source,) = self.deps[total]
        return source


def _names(body: Body, stmts: list[Stmt]) -> set[str]:
    """Every identifier the statements, the stores, the sums and the epilogue read."""
    exprs = [s.expr for s in stmts] + list(body.stores.values()) + list(body.col_sums.values())
    exprs += list(body.totals.values()) + [s.expr for s in body.epilogue] + list(body.scalar_stores.values())
    exprs += [v for values in body.vector_stores.values() for v in values]
    return {name for expr in exprs for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", expr)}


def _round_suffix(dtype_ptr: str) -> str:
    return f".to({dtype_ptr}.dtype.element_ty).to(tl.float32)"


def _without_final_round(body: Body, var: str, dtype_ptr: str) -> str:
    """A stored value is cast to the output dtype by the store itself: a rounding statement right before is moot."""
    stmt = next((s for s in body.stmts if s.var == var), None)
    suffix = _round_suffix(dtype_ptr)
    if stmt is None or not stmt.expr.endswith(suffix) or not stmt.expr[: -len(suffix)].isidentifier():
        return var
    if sum(var in s.expr for s in body.stmts) > 0:
        return var
    body.stmts.remove(stmt)
    return stmt.expr[: -len(suffix)]


def _op_name(target) -> str:
    name = getattr(target, "__name__", str(target))
    return name.split(".")[0]
