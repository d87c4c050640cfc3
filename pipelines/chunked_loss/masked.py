"""Boolean selections written as masks, so the per-chunk loss has no shapes that depend on the data.

A per-chunk loss that selects with a boolean mask (`chosen = logps[labels]`) and then reduces (`chosen.sum()`,
`.mean()`, `.shape[0]`, a branch on `chosen.shape[0] != 0`) has a size that only the labels decide; torch.compile,
which Liger's bases wrap around the per-chunk function, cannot trace that as one graph. The same loss on the whole
chunk, with the mask applied at the reductions, is shape-static:

    chosen = logps[m]                  chosen = logps
    chosen.sum()                 ->    torch.where(m, chosen, 0).sum()
    chosen.mean()                ->    torch.where(m, chosen, 0).sum() / m.sum()
    chosen.shape[0]                    m.sum()
    torch.cat((a[m], b[~m]))           torch.where(m, a, b)     (only ever reduced: the order is lost)
    if a.shape[0] != 0: X else: <empty>  ->  X     (the reductions of an empty selection are the masked ones')

A selected value flows through element-wise operations with values that do not depend on the sequence (numbers,
hyper-parameters, the batch's kl), computed on every sequence of the chunk and masked where it is reduced. Anything
else a selected value meets (a per-sequence return, an indexing, a sort, a loop, a branch on its values) leaves the
whole function as it is: `rewrite` returns None with the reason. What the rewrite assumes (the other sequences'
values are finite where a selection's formula is computed on them) is checked by running both forms
(`understand.prove_masked`), which keeps the original on any difference.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass
from dataclasses import field

# element-wise functions, as `torch.x(...)` / `F.x(...)` / `torch.nn.functional.x(...)` or a method `v.x(...)`
ELEMENTWISE = {
    "sigmoid",
    "logsigmoid",
    "log",
    "log1p",
    "log2",
    "log10",
    "exp",
    "expm1",
    "relu",
    "tanh",
    "abs",
    "neg",
    "square",
    "sqrt",
    "rsqrt",
    "clamp",
    "clip",
    "clamp_min",
    "clamp_max",
    "softplus",
    "pow",
    "minimum",
    "maximum",
    "where",
    "sign",
    "float",
    "double",
    "to",
    "detach",
    "zeros_like",
    "ones_like",
    "full_like",
}
REDUCTIONS = {"sum", "mean"}
COUNTS = {"numel", "nelement"}
SHAPE_FREE_ATTRIBUTES = {"device", "dtype"}  # the same on a selection as on the whole chunk
MODULES = {"torch", "F"}
EMPTY_MAKERS = {"Tensor", "tensor", "FloatTensor", "empty", "zeros"}


class NotExact(Exception):
    """A construct the masked form would not reproduce exactly; the function is left as it is."""


@dataclass(frozen=True)
class Mask:
    key: str  # the positive mask's source
    negated: bool = False
    names: frozenset[str] = frozenset()  # names the mask reads: reassigning one would change what it means

    def node(self) -> ast.expr:
        positive = ast.parse(self.key, mode="eval").body
        return ast.UnaryOp(op=ast.Invert(), operand=positive) if self.negated else positive

    def complement(self) -> Mask:
        return Mask(self.key, not self.negated, self.names)


@dataclass(frozen=True)
class Kind:
    """free: the same for every sequence (numbers, hyper-parameters, reductions); vector: one value per sequence of
    the chunk, in order (or not: a masked cat); mask: a boolean vector; selected: a vector whose entries count only
    where `mask` holds; count: a selection's size, written as a tensor (`m.sum()`), so arithmetic only."""

    tag: str
    mask: Mask | None = None
    ordered: bool = True
    tensor: bool = False  # free and known to be a tensor (a reduction's result)


FREE = Kind("free")
REDUCED = Kind("free", tensor=True)
VECTOR = Kind("vector")


@dataclass
class Rewritten:
    fn: ast.FunctionDef | None  # None: left as it is
    reason: str
    selections: list[str] = field(default_factory=list)  # the selections written as masks


def rewrite(fn: ast.FunctionDef, vectors: set[str], masks: set[str]) -> Rewritten:
    """`fn` with its boolean selections written as masks; `vectors` are its per-sequence parameters, `masks` its
    boolean per-sequence parameters."""
    if not any(isinstance(node, ast.Subscript) for node in ast.walk(fn)):  # nothing to select with
        return Rewritten(None, "no boolean selection")
    masker = _Masker(vectors, masks)
    try:
        body = masker.block(copy.deepcopy(fn.body))
    except NotExact as exc:
        return Rewritten(None, str(exc))
    if not masker.selections:
        return Rewritten(None, "no boolean selection")
    new = copy.deepcopy(fn)
    new.body = body
    return Rewritten(ast.fix_missing_locations(new), "rewritten", masker.selections)


def _call_name(func: ast.expr) -> tuple[str, ast.expr | None]:
    """`torch.sigmoid` -> ("sigmoid", None); `F.logsigmoid` too; `x.sum` -> ("sum", x); `len` -> ("len", None)."""
    if isinstance(func, ast.Name):
        return func.id, None
    if isinstance(func, ast.Attribute):
        owner = ast.unparse(func.value)
        if owner in MODULES or owner in ("torch.nn.functional", "nn.functional"):
            return func.attr, None
        return func.attr, func.value
    return "", None


def _where(mask: Mask, value: ast.expr, other: ast.expr | None = None) -> ast.expr:
    fallback = other if other is not None else ast.Constant(value=0)
    return ast.parse(
        f"torch.where({ast.unparse(mask.node())}, {ast.unparse(value)}, {ast.unparse(fallback)})", mode="eval"
    ).body


def _count(mask: Mask) -> ast.expr:
    return ast.parse(f"({ast.unparse(mask.node())}).sum()", mode="eval").body


def _ends(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise))


def _assigned(body: list[ast.stmt]) -> set[str]:
    return {n.id for s in body for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


class _Masker:
    def __init__(self, vectors: set[str], masks: set[str]):
        self.env: dict[str, Kind] = {name: VECTOR for name in vectors}
        self.env.update({name: Kind("mask", Mask(name, names=frozenset({name}))) for name in masks})
        self.selections: list[str] = []
        self.live_mask_names: set[str] = set()

    # --- statements ---------------------------------------------------------------------------------------------

    def block(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in body:
            out.extend(self.stmt(stmt))
        return out

    def stmt(self, stmt: ast.stmt) -> list[ast.stmt]:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            return [self.assign(stmt)]
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            value = ast.BinOp(left=ast.Name(id=stmt.target.id, ctx=ast.Load()), op=stmt.op, right=stmt.value)
            return [self.assign(ast.Assign(targets=[stmt.target], value=value))]
        if isinstance(stmt, ast.If):
            return self.branch(stmt)
        if isinstance(stmt, ast.Return):
            return [self.returned(stmt)]
        if isinstance(stmt, (ast.Raise, ast.Pass, ast.Expr)):
            self.require_free(stmt, "a statement")
            return [stmt]
        raise NotExact(f"`{ast.unparse(stmt).splitlines()[0]}`: a {type(stmt).__name__} statement")

    def assign(self, stmt: ast.Assign) -> ast.Assign:
        target = stmt.targets[0]
        if not isinstance(target, ast.Name):
            self.require_free(stmt, "an unpacking or item assignment")
            for name in _assigned([stmt]):
                self.bind(name, FREE)
            return stmt
        value, kind = self.expr(stmt.value)
        if kind.tag == "mask":  # a named mask: selections read the name, which then must not be reassigned
            kind = Kind("mask", Mask(target.id, names=frozenset({target.id})))
        self.bind(target.id, kind)
        return ast.Assign(targets=[target], value=value)

    def bind(self, name: str, kind: Kind) -> None:
        if name in self.live_mask_names:
            raise NotExact(f"`{name}` is reassigned while a mask reads it")
        self.env[name] = kind

    def returned(self, stmt: ast.Return) -> ast.Return:
        if stmt.value is None:
            return stmt
        elements = stmt.value.elts if isinstance(stmt.value, ast.Tuple) else [stmt.value]
        new = []
        for element in elements:
            value, kind = self.expr(element)
            if kind.tag in ("selected", "count", "mask") or (kind.tag == "vector" and not kind.ordered):
                raise NotExact(f"`{ast.unparse(element)}` is returned as a selection or its size")
            new.append(value)
        return ast.Return(value=ast.Tuple(elts=new, ctx=ast.Load()) if isinstance(stmt.value, ast.Tuple) else new[0])

    def require_free(self, node: ast.AST, what: str) -> None:
        for name in (n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)):
            if self.env.get(name, FREE).tag != "free":
                raise NotExact(f"`{ast.unparse(node).splitlines()[0]}`: {what} reading `{name}`")

    def branch(self, stmt: ast.If) -> list[ast.stmt]:
        size = self.size_test(stmt.test)
        if size is not None:
            return self.size_branch(stmt, *size)
        if self.expr(stmt.test)[1].tag != "free":
            raise NotExact(f"`if {ast.unparse(stmt.test)}`: a branch on per-sequence values")
        before = dict(self.env)
        body = self.block(stmt.body)
        after_body, self.env = self.env, dict(before)
        orelse = self.block(stmt.orelse)
        after_else = self.env
        self.env = self.merge(
            before, [e for e, b in ((after_body, stmt.body), (after_else, stmt.orelse)) if not _ends(b)]
        )
        return [ast.If(test=stmt.test, body=body or [ast.Pass()], orelse=orelse)]

    @staticmethod
    def merge(before: dict[str, Kind], branches: list[dict[str, Kind]]) -> dict[str, Kind]:
        if not branches:
            return before
        merged = dict(branches[0])
        for env in branches[1:]:
            for name in set(merged) | set(env):
                if merged.get(name) != env.get(name) and (name in merged and name in env or name in before):
                    raise NotExact(f"`{name}` has different kinds on the two sides of a branch")
                merged.setdefault(name, env.get(name))
        return merged

    def size_branch(self, stmt: ast.If, mask: Mask, nonempty: bool) -> list[ast.stmt]:
        """`if <selection is non-empty>: X else: <empty tensors>` -> X."""
        taken, empty = (stmt.body, stmt.orelse) if nonempty else (stmt.orelse, stmt.body)
        if _ends(taken) or not empty:
            raise NotExact(f"`if {ast.unparse(stmt.test)}`: not a non-empty case beside an empty one")
        for other in empty:
            if not (
                isinstance(other, ast.Assign) and isinstance(other.targets[0], ast.Name) and _is_empty(other.value)
            ):
                raise NotExact(f"`{ast.unparse(other)}`: the empty case does more than make empty tensors")
        body = self.block(taken)
        names = _assigned(taken)
        if names != _assigned(empty):
            raise NotExact(f"`if {ast.unparse(stmt.test)}`: its two sides assign different names")
        for name in names:
            kind = self.env[name]
            if kind.tag != "selected" or kind.mask != mask:
                raise NotExact(f"`{name}`: set under a size test of a selection, but not selected by its mask")
        return body

    def size_test(self, test: ast.expr) -> tuple[Mask, bool] | None:
        """`a.shape[0] != 0 or b.shape[0] != 0` over one mask's selections -> (mask, True); `== 0` -> False."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.size_test(test.operand)
            return (inner[0], not inner[1]) if inner else None
        if isinstance(test, ast.BoolOp):
            parts = [self.size_test(v) for v in test.values]
            if all(parts) and len({p for p in parts}) == 1:
                return parts[0]
            return None
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
            return None
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if isinstance(left, ast.Constant):  # 0 < n -> n > 0
            flipped = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE, ast.Eq: ast.Eq}
            flipped[ast.NotEq] = ast.NotEq
            if type(op) not in flipped:
                return None
            left, right, op = right, left, flipped[type(op)]()
        mask = self.count_of(left)
        if mask is None or not (isinstance(right, ast.Constant) and type(right.value) is int):
            return None
        nonempty = {(ast.NotEq, 0), (ast.Gt, 0), (ast.GtE, 1)}
        empty = {(ast.Eq, 0), (ast.Lt, 1), (ast.LtE, 0)}
        case = (type(op), right.value)
        return (mask, True) if case in nonempty else (mask, False) if case in empty else None

    def count_of(self, node: ast.expr) -> Mask | None:
        """The mask whose selection's size `node` reads (`x.shape[0]`, `len(x)`, `x.numel()`, `x.size(0)`)."""
        target = None
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
            if isinstance(node.slice, ast.Constant) and node.slice.value in (0, -1):
                target = node.value.value
        elif isinstance(node, ast.Call) and not node.keywords:
            name, owner = _call_name(node.func)
            if name == "len" and owner is None and len(node.args) == 1:
                target = node.args[0]
            elif owner is not None and name in COUNTS and not node.args:
                target = owner
            elif owner is not None and name == "size" and [ast.unparse(a) for a in node.args] in (["0"], ["-1"]):
                target = owner
        if target is None:
            return None
        kind = self.expr(target)[1]
        return kind.mask if kind.tag == "selected" else None

    # --- expressions --------------------------------------------------------------------------------------------

    def expr(self, node: ast.expr) -> tuple[ast.expr, Kind]:
        mask = self.count_of(node)
        if mask is not None:
            return _count(mask), Kind("count", mask)
        if isinstance(node, ast.Constant):
            return node, FREE
        if isinstance(node, ast.Name):
            return node, self.env.get(node.id, FREE)
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.Attribute):
            value, kind = self.expr(node.value)
            if kind.tag in ("selected", "count") and node.attr not in SHAPE_FREE_ATTRIBUTES:
                raise NotExact(f"`{ast.unparse(node)}`: an attribute of a per-sequence value")
            return ast.Attribute(value=value, attr=node.attr, ctx=node.ctx), FREE
        if isinstance(node, ast.BinOp):
            (left, right), kind = self.combine([node.left, node.right], node)
            return ast.BinOp(left=left, op=node.op, right=right), kind
        if isinstance(node, ast.UnaryOp):
            return self.unary(node)
        if isinstance(node, ast.Compare):
            if any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):  # identity, `x is None`: a Python bool
                return node, FREE
            values, kind = self.combine([node.left, *node.comparators], node)
            if kind.tag == "vector" and not kind.ordered:
                raise NotExact(f"`{ast.unparse(node)}`: a comparison of a reordered vector")
            if kind.tag == "vector":
                kind = Kind("mask", Mask(ast.unparse(node), names=frozenset(_names(node))))
            return ast.Compare(left=values[0], ops=node.ops, comparators=values[1:]), kind
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.BoolOp):
            if any(self.expr(v)[1].tag != "free" for v in node.values):
                raise NotExact(f"`{ast.unparse(node)}`: `and` / `or` of per-sequence values")
            return node, FREE
        self.require_free(node, "an expression")
        return node, FREE

    def subscript(self, node: ast.Subscript) -> tuple[ast.expr, Kind]:
        value, kind = self.expr(node.value)
        index, index_kind = self.expr(node.slice)
        if kind == VECTOR and index_kind.tag == "mask":
            mask = index_kind.mask
            self.live_mask_names |= mask.names
            if ast.unparse(node) not in self.selections:
                self.selections.append(ast.unparse(node))
            return value, Kind("selected", mask)
        if kind.tag != "free" or index_kind.tag != "free":
            raise NotExact(f"`{ast.unparse(node)}`: an indexing of a per-sequence value")
        return node, FREE

    def unary(self, node: ast.UnaryOp) -> tuple[ast.expr, Kind]:
        operand, kind = self.expr(node.operand)
        if isinstance(node.op, ast.Invert) and kind.tag == "mask":
            return ast.UnaryOp(op=node.op, operand=operand), Kind("mask", kind.mask.complement())
        if isinstance(node.op, ast.Not) and kind.tag != "free":
            raise NotExact(f"`{ast.unparse(node)}`: `not` of a per-sequence value")
        if kind.tag == "mask":
            raise NotExact(f"`{ast.unparse(node)}`: arithmetic on a mask")
        return ast.UnaryOp(op=node.op, operand=operand), kind

    def combine(self, nodes: list[ast.expr], whole: ast.expr) -> tuple[list[ast.expr], Kind]:
        """The kind of an element-wise operation over `nodes`: one mask's selection with sequence-free values stays
        that selection; a selection beside anything per-sequence of another kind is not exact."""
        shown = ast.unparse(whole)
        pairs = [self.expr(n) for n in nodes]
        values, kinds = [v for v, _ in pairs], [k for _, k in pairs]
        tags = {k.tag for k in kinds}
        if "selected" in tags:
            masks = {k.mask for k in kinds if k.tag == "selected"}
            if len(masks) > 1 or tags - {"selected", "free", "count"}:
                raise NotExact(f"`{shown}`: a selection beside values of other sequences")
            return values, Kind("selected", masks.pop())
        per_sequence = [k for k in kinds if k.tag in ("vector", "mask")]
        if per_sequence:
            if len(per_sequence) > 1 and not all(k.ordered for k in per_sequence):
                raise NotExact(f"`{shown}`: a reordered vector beside another vector")
            logical = isinstance(whole, ast.BinOp) and isinstance(whole.op, (ast.BitAnd, ast.BitOr, ast.BitXor))
            if "vector" in tags or not logical:  # `m * x`, `m.float()`, `m + 1`: numbers, no longer a mask
                return values, Kind("vector", ordered=all(k.ordered for k in per_sequence))
            return values, Kind("mask", Mask(shown, names=frozenset(_names(whole))))
        if "count" in tags:  # a size beside a tensor is a tensor either way; beside a number it would become one
            if any(k.tensor for k in kinds):
                return values, REDUCED
            return values, Kind("count", next(k.mask for k in kinds if k.tag == "count"))
        return values, Kind("free", tensor=any(k.tensor for k in kinds))

    def call(self, node: ast.Call) -> tuple[ast.expr, Kind]:
        name, owner = _call_name(node.func)
        if owner is not None and name in REDUCTIONS and not node.args and not node.keywords:
            return self.reduce(node, owner, name)
        if owner is None and name in REDUCTIONS and len(node.args) == 1 and not node.keywords:
            return self.reduce(node, node.args[0], name)
        if owner is None and name == "cat":
            cat = self.cat(node)
            if cat is not None:
                return cat
        operands = ([owner] if owner is not None else []) + list(node.args) + [k.value for k in node.keywords]
        if name in ELEMENTWISE:
            values, kind = self.combine(operands, node)
            if kind.tag == "count":
                raise NotExact(f"`{ast.unparse(node)}`: a selection's size passed to a function")
            return self.rebuilt(node, owner, values), kind
        for operand in operands:
            if self.expr(operand)[1].tag != "free":
                raise NotExact(f"`{ast.unparse(node)}`: not an element-wise function of a per-sequence value")
        return node, FREE

    @staticmethod
    def rebuilt(node: ast.Call, owner: ast.expr | None, values: list[ast.expr]) -> ast.Call:
        offset = 1 if owner is not None else 0
        n_args = len(node.args)
        func = ast.Attribute(value=values[0], attr=node.func.attr, ctx=ast.Load()) if owner is not None else node.func
        args = values[offset : offset + n_args]
        keywords = [
            ast.keyword(arg=k.arg, value=v) for k, v in zip(node.keywords, values[offset + n_args :], strict=True)
        ]
        return ast.Call(func=func, args=args, keywords=keywords)

    def reduce(self, node: ast.Call, operand: ast.expr, name: str) -> tuple[ast.expr, Kind]:
        """`x.sum()` / `torch.sum(x)` (and mean) over all of x; a selection's is masked."""
        value, kind = self.expr(operand)
        if kind.tag == "selected":
            total = ast.Call(
                func=ast.Attribute(value=_where(kind.mask, value), attr="sum", ctx=ast.Load()), args=[], keywords=[]
            )
            if name == "mean":
                return ast.BinOp(left=total, op=ast.Div(), right=_count(kind.mask)), REDUCED
            return total, REDUCED
        if kind.tag in ("mask", "count"):
            raise NotExact(f"`{ast.unparse(operand)}.{name}()`: a reduction of a mask or a size")
        call = copy.copy(node)
        if node.args:  # torch.sum(x)
            call.args = [value]
        else:  # x.sum()
            call.func = ast.Attribute(value=value, attr=name, ctx=ast.Load())
        return call, REDUCED

    def cat(self, node: ast.Call) -> tuple[ast.expr, Kind] | None:
        """`torch.cat((a[m], b[~m]), 0)` -> `torch.where(m, a, b)`, a vector whose order only reductions may ignore."""
        dims = [ast.unparse(a) for a in node.args[1:]] + [ast.unparse(k.value) for k in node.keywords if k.arg == "dim"]
        if len(node.args) < 1 or not isinstance(node.args[0], (ast.Tuple, ast.List)) or len(node.args[0].elts) != 2:
            return None
        if set(dims) - {"0", "-1"} or len(node.keywords) > (1 if dims and len(node.args) == 1 else 0):
            return None
        pairs = [self.expr(e) for e in node.args[0].elts]
        kinds = [k for _, k in pairs]
        if not any(k.tag == "selected" for k in kinds):
            if any(k.tag != "free" for k in kinds):
                raise NotExact(f"`{ast.unparse(node)}`: a concatenation of per-sequence values")
            return None
        if not all(k.tag == "selected" for k in kinds) or kinds[0].mask != kinds[1].mask.complement():
            raise NotExact(f"`{ast.unparse(node)}`: not a concatenation of a selection and its complement")
        (first, _), (second, _) = pairs
        where = _where(kinds[0].mask, first, second)
        return where, Kind("vector", ordered=False)


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _is_empty(node: ast.expr) -> bool:
    """`torch.Tensor([])`, `torch.tensor([])`, `torch.empty(0)`, `torch.zeros(0)`, each maybe `.to(...)`."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to":
        node = node.func.value
    if not (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) == "torch"
    ):
        return False
    if node.func.attr not in EMPTY_MAKERS or len(node.args) != 1:
        return False
    arg = node.args[0]
    return (isinstance(arg, ast.List) and not arg.elts) or (isinstance(arg, ast.Constant) and arg.value == 0)
