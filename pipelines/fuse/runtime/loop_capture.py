"""Module-level capture of the data-dependent Python loop `stack([values[o[i]:o[i+1]].mean(0) for i ...])`.

Dynamo cannot keep that loop in one graph: `offsets.tolist()` breaks the graph, and the code after the break
is traced with the list's ints as constants, unrolled B times and recompiled for every new batch of lengths.
So before Dynamo sees a module, its `forward` source is rewritten (ast): the loop (append form or list
comprehension, over `range(len(o) - 1)` or `zip(o[:-1], o[1:])`) becomes one call of the pooling custom op on
the offsets *tensor*, behind a check that keeps the original loop as the fallback:

    if __liger_fuse_loops__.applies(values.device.type, values.dtype, values.dim()):
        pooled = __liger_fuse_loops__.pool(values, offsets)
    else:
        <the original statements>

The split form, `stack([t.mean(0) for t in torch.split(values, lengths.tolist())])` (or its append loop), is the
same loop with the partitions given by size: it becomes one call on the lengths tensor (`pool_lengths`); the
tensor_split form, `torch.tensor_split(values, o[1:-1].tolist())`, the same loop given by its split points
(`pool_points`). The stacked means may sit anywhere in a statement (`return self.mlp(torch.stack(...))`), and
`torch.cat` / `torch.vstack` of `mean(0, keepdim=True)` rows is the same pooling as `torch.stack` of `mean(0)`. A split
by an int (equal chunks, `torch.split(values, self.chunk)`) that only a run can tell from sizes is computed as written.

The check is evaluated once at trace time (assume_constant_result), so only one branch is traced.

Why not a pattern / replacement pair: the loop is Python source before Dynamo runs (after Dynamo it is B unrolled
slices, a graph whose size depends on the data: unrolled_forms.py), so no FX matcher can see it. Captures count as
`loop_slice_mean_stack` replacements in the same registry stats as the pairs.
"""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap
import types
from dataclasses import dataclass

import torch

from .families import KERNEL_FUNCTIONS
from .padding import PATTERN_NAME as PADDED_SPLIT
from .padding import pad_partitions
from .registry import OperandSpec
from .registry import Registry

HELPER = "__liger_fuse_loops__"
PATTERN_NAME = "loop_slice_mean_stack"


@dataclass(frozen=True)
class LoopMatch:
    values: ast.expr
    offsets: ast.expr  # partition bounds; their sizes (the split form) or inner split points (tensor_split)
    helper: str = "pool"  # the LoopHelpers method that pools by `offsets`: pool, pool_lengths or pool_points


class LoopHelpers:
    """What rewritten code calls. `applies` answers from static facts only, so Dynamo can fold it."""

    def __init__(self, registry: Registry):
        self.registry = registry

        @torch.compiler.assume_constant_result
        def applies(device: str, dtype: torch.dtype, rank: int) -> bool:
            kernel, _ = self.registry.pick("partitioned_mean", OperandSpec(device, dtype, (1,) * rank))
            return kernel is not None

        self.applies = applies

    @staticmethod
    def pool(values: torch.Tensor, offsets) -> torch.Tensor:
        return KERNEL_FUNCTIONS["triton_partitioned_mean"](values, _as_index(offsets, values))

    @staticmethod
    def pool_lengths(values: torch.Tensor, lengths) -> torch.Tensor:
        """The split form: partitions given by their sizes, as `torch.split` takes them (an int: equal chunks, as
        written)."""
        if isinstance(lengths, int):
            return torch.stack([chunk.mean(0) for chunk in torch.split(values, lengths)])
        lengths = _as_index(lengths, values)
        offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
        return KERNEL_FUNCTIONS["triton_partitioned_mean"](values, offsets)

    @staticmethod
    def pool_points(values: torch.Tensor, points) -> torch.Tensor:
        """The tensor_split form: partitions given by their inner split points (an int: that many sections, as
        written)."""
        if isinstance(points, int):
            return torch.stack([chunk.mean(0) for chunk in torch.tensor_split(values, points)])
        points = _as_index(points, values)
        offsets = torch.cat([points.new_zeros(1), points, points.new_full((1,), values.shape[0])])
        return KERNEL_FUNCTIONS["triton_partitioned_mean"](values, offsets)

    @staticmethod
    def pad_lengths(values: torch.Tensor, lengths) -> torch.Tensor:
        """`pad_sequence(torch.split(values, lengths.tolist()), batch_first=True)` without the host list (an int:
        equal chunks, as written)."""
        if isinstance(lengths, int):
            return torch.nn.utils.rnn.pad_sequence(torch.split(values, lengths), batch_first=True)
        return pad_partitions(values, _as_index(lengths, values))


def _as_index(sizes, values: torch.Tensor) -> torch.Tensor:
    """Sizes, bounds or points as the int64 tensor the ops take (a Python list on the values' device)."""
    if not isinstance(sizes, torch.Tensor):
        return torch.tensor(sizes, dtype=torch.int64, device=values.device)
    return sizes.to(torch.int64)


def capture_loops(model: torch.nn.Module, registry: Registry) -> int:
    """Rewrite the forward of every submodule that holds the loop; returns how many loops were captured."""
    helpers = LoopHelpers(registry)
    captured = 0
    for module in model.modules():
        rewritten, captures = rewrite_function(type(module).forward, helpers)
        if captures:
            module.forward = types.MethodType(rewritten, module)
            captured += len(captures)
            for pattern, kernel in captures:
                registry.note_replaced(pattern, kernel, type(module).__qualname__)
    return captured


def rewrite_function(function, helpers: LoopHelpers):
    """(new function, [(pattern, kernel) per capture]) or (function, []) when there is nothing to capture or no
    source."""
    if function.__code__.co_freevars:
        return function, []  # a closure (or zero-argument super()) cannot be rebuilt from source
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return function, []
    tree = ast.parse(source)
    definition = tree.body[0]
    if not isinstance(definition, ast.FunctionDef):
        return function, []
    definition.decorator_list = []
    rewriter = _LoopRewriter(definition)
    rewriter.visit(definition)
    if not rewriter.captures:
        return function, []
    ast.fix_missing_locations(tree)
    namespace = dict(function.__globals__)
    namespace[HELPER] = helpers
    code = compile(tree, f"<liger_fuse rewrite of {function.__qualname__}>", "exec")
    exec(code, namespace)
    rewritten = namespace[definition.name]
    rewritten.__qualname__ = function.__qualname__
    return rewritten, rewriter.captures


class _LoopRewriter(ast.NodeTransformer):
    def __init__(self, definition: ast.FunctionDef):
        self.definition = definition
        self.captures: list[tuple[str, str]] = []

    def generic_visit(self, node):
        super().generic_visit(node)
        for name in ("body", "orelse", "finalbody"):
            statements = getattr(node, name, None)
            if isinstance(statements, list) and statements and isinstance(statements[0], ast.stmt):
                setattr(node, name, self._rewrite_block(statements))
        return node

    def _rewrite_block(self, statements: list[ast.stmt]) -> list[ast.stmt]:
        out = []
        i = 0
        while i < len(statements):
            self._pad_splits(statements[i], out)
            found = _append_loop(statements, i) or _comprehension(statements[i])
            if found is None:
                out.append(statements[i])
                i += 1
                continue
            span, match, which = found
            region = statements[i : i + span]
            out = self._guarded(out, region, match, which)
            i += span
            self.captures.append((PATTERN_NAME, "triton_partitioned_mean"))
        return out

    def _pad_splits(self, statement: ast.stmt, preceding: list[ast.stmt]) -> None:
        """Every `pad_sequence(torch.split(values, t.tolist()), batch_first=True)` in `statement` becomes
        `pad_lengths(values, t)`, in place; a `sizes = t.tolist()` before it, used nowhere else, is dropped."""
        for node in ast.walk(statement):
            for field, child in ast.iter_fields(node):
                found = _pad_split(child)
                if found is None:
                    continue
                values, lengths = found
                source = _tolist_source(preceding, lengths)
                if _is_method(lengths, "tolist") and not lengths.args:
                    lengths = lengths.func.value
                elif source is not None and _uses(self.definition, source.targets[0].id, exclude=[source]) == 1:
                    lengths = source.value.func.value
                    preceding.remove(source)
                else:
                    continue  # sizes from the caller: constants in the trace whatever we do
                setattr(node, field, _helper_call("pad_lengths", [values, lengths]))
                self.captures.append((PADDED_SPLIT, "pad_partitions"))

    def _guarded(self, preceding: list[ast.stmt], region, match: LoopMatch, which: int) -> list[ast.stmt]:
        """`if applies(values): <the region's last statement, its stacking call number `which` replaced by one
        pooling call>`, the region as written otherwise."""
        offsets, fallback = match.offsets, list(region)
        source = _tolist_source(preceding, offsets)
        if _is_method(offsets, "tolist") and not offsets.args:
            offsets = offsets.func.value  # split(values, lengths.tolist())  ->  pool over lengths
        elif source is not None:
            offsets = source.value.func.value  # o = t.tolist()  ->  pool over t
            if _uses(self.definition, source.targets[0].id, exclude=[source, *region]) == 0:
                preceding = [s for s in preceding if s is not source]
                fallback = [source, *fallback]  # the graph-breaking tolist only runs on the fallback path
        call = _helper_call(match.helper, [copy.deepcopy(match.values), copy.deepcopy(offsets)])
        fast = _with_call(region[-1], which, call)
        values = match.values
        check = _helper_call(
            "applies",
            [
                _attr(_attr(copy.deepcopy(values), "device"), "type"),
                _attr(copy.deepcopy(values), "dtype"),
                ast.Call(_attr(copy.deepcopy(values), "dim"), [], []),
            ],
        )
        return [*preceding, ast.If(check, [fast], fallback)]


def _helper_call(name: str, args: list[ast.expr]) -> ast.Call:
    return ast.Call(_attr(ast.Name(HELPER, ast.Load()), name), args, [])


def _attr(value: ast.expr, name: str) -> ast.Attribute:
    return ast.Attribute(value, name, ast.Load())


def _append_loop(statements, i):
    """`acc = []; for ...: acc.append(<mean of slice>); <a statement using torch.stack(acc)>` -> (3, match, which
    stacking call)."""
    if i + 2 >= len(statements):
        return None
    init, loop, stack = statements[i : i + 3]
    if not (isinstance(init, ast.Assign) and len(init.targets) == 1 and isinstance(init.targets[0], ast.Name)):
        return None
    if not (isinstance(init.value, ast.List) and not init.value.elts):
        return None
    name = init.targets[0].id
    if not isinstance(loop, ast.For) or loop.orelse or len(loop.body) != 1 or not isinstance(loop.body[0], ast.Expr):
        return None
    append = loop.body[0].value
    if not (_is_method(append, "append") and _is_name(append.func.value, name) and len(append.args) == 1):
        return None
    for which, (stacked, keepdims) in enumerate(_stackings(stack)):
        if _is_name(stacked, name):
            match = _mean_over_partitions(append.args[0], loop.target, loop.iter, keepdims)
            return (3, match, which) if match else None
    return None


def _comprehension(statement):
    """A statement using `torch.stack([<mean of slice> for ... in ...])` (cat / vstack of keepdim means) -> (1, match,
    which stacking call)."""
    for which, (stacked, keepdims) in enumerate(_stackings(statement)):
        if not isinstance(stacked, ast.ListComp) or len(stacked.generators) != 1:
            continue
        generator = stacked.generators[0]
        if generator.ifs or generator.is_async:
            continue
        match = _mean_over_partitions(stacked.elt, generator.target, generator.iter, keepdims)
        if match:
            return 1, match, which
    return None


# row means a stacking call joins into [B, D]: stack of mean(0); cat of mean(0, keepdim=True); vstack of either
_STACKINGS = {"torch.stack": (False,), "stack": (False,), "torch.cat": (True,), "torch.vstack": (False, True)}
_NEW_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.FunctionDef, ast.ClassDef)


def _stacking_calls(node):
    """Calls of a _STACKINGS function along rows in `node`, outer first, not inside a nested scope."""
    if isinstance(node, ast.Call) and _dotted(node.func) in _STACKINGS and len(node.args) in (1, 2):
        only_dim = all(k.arg == "dim" for k in node.keywords)
        if only_dim and all(_is_const(d, 0) for d in [*node.args[1:], *(k.value for k in node.keywords)]):
            yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, _NEW_SCOPES):
            yield from _stacking_calls(child)


def _stackings(statement):
    """(the joined expression, the keepdims its row means may have) for each stacking call in `statement`."""
    if not isinstance(statement, ast.Assign | ast.Return | ast.Expr | ast.AnnAssign | ast.AugAssign):
        return
    for call in _stacking_calls(statement):
        yield call.args[0], _STACKINGS[_dotted(call.func)]


def _with_call(statement: ast.stmt, which: int, call: ast.Call) -> ast.stmt:
    """A copy of `statement` with its stacking call number `which` (in _stacking_calls' order) replaced by `call`."""
    fast = copy.deepcopy(statement)
    chosen = list(_stacking_calls(fast))[which]

    class Replace(ast.NodeTransformer):
        def visit_Call(self, node):
            return call if node is chosen else self.generic_visit(node)

    return Replace().visit(fast)


def _mean_over_partitions(element, target, iterable, keepdims=(False,)) -> LoopMatch | None:
    """values and offsets, when `element` is the mean over rows of `values[offsets[i]:offsets[i+1]]`; or values and
    lengths, when it is the mean of `t` for `t in torch.split(values, lengths)` (`values.split(lengths)` too); or
    values and inner split points, for `t in torch.tensor_split(values, points)`."""
    sliced = _rows_mean(element, keepdims)
    split = _split_call(iterable)
    if split is not None:
        values, sizes, helper = split
        ok = _is_name(sliced, getattr(target, "id", None)) and not any(
            isinstance(n, ast.Call) for n in ast.walk(values)
        )
        return LoopMatch(values, sizes, helper) if ok else None
    if not isinstance(sliced, ast.Subscript) or not isinstance(sliced.slice, ast.Slice) or sliced.slice.step:
        return None
    values, lower, upper = sliced.value, sliced.slice.lower, sliced.slice.upper
    if any(isinstance(n, ast.Call) for n in ast.walk(values)):
        return None  # evaluated twice (check + call): only plain names and attributes
    offsets = _range_form(target, iterable, lower, upper) or _zip_form(target, iterable, lower, upper)
    return LoopMatch(values, offsets) if offsets is not None else None


_PAD_SEQUENCE = ("pad_sequence", "rnn.pad_sequence", "nn.utils.rnn.pad_sequence", "torch.nn.utils.rnn.pad_sequence")


def _pad_split(node):
    """(values, lengths) for `pad_sequence(torch.split(values, lengths), batch_first=True)` padded with zeros."""
    if not isinstance(node, ast.Call) or _dotted(node.func) not in _PAD_SEQUENCE or len(node.args) != 1:
        return None
    keywords = {k.arg: k.value for k in node.keywords}
    if set(keywords) - {"batch_first", "padding_value"} or not _is_const(keywords.get("batch_first"), True):
        return None
    if "padding_value" in keywords and not _is_const(keywords["padding_value"], 0):
        return None
    split = _split_call(node.args[0])
    return split[:2] if split is not None and split[2] == "pool_lengths" else None


_SPLITS = {"split": "pool_lengths", "tensor_split": "pool_points"}  # how each names its partitions


def _split_call(node):
    """(values, lengths, "pool_lengths") for `torch.split(values, lengths)` / `values.split(lengths)` along rows,
    (values, points, "pool_points") for `torch.tensor_split(values, points)` / `values.tensor_split(points)`, else
    None."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute) or node.func.attr not in _SPLITS:
        return None
    if _dotted(node.func) == f"torch.{node.func.attr}" and len(node.args) >= 2:
        values, lengths, rest = node.args[0], node.args[1], node.args[2:]
    elif _dotted(node.func) != f"torch.{node.func.attr}" and node.args:
        values, lengths, rest = node.func.value, node.args[0], node.args[1:]
    else:
        return None
    dims = rest + [k.value for k in node.keywords if k.arg == "dim"]
    if len(rest) + len(node.keywords) > 1 or any(not _is_const(d, 0) for d in dims):
        return None
    if isinstance(lengths, ast.Constant):
        return None  # split(values, 3): equal chunks, not partitions by lengths
    return values, lengths, _SPLITS[node.func.attr]


def _rows_mean(node, keepdims=(False,)):
    """x, when `node` is the mean of x over rows (`x.mean(0)`, `torch.mean(x, dim=0)`) with a keepdim in
    `keepdims` (positional or keyword; absent is False)."""
    if _is_method(node, "mean") and _dotted(node.func) != "torch.mean":
        subject, args = node.func.value, node.args
    elif _dotted(node.func) == "torch.mean" and node.args:
        subject, args = node.args[0], node.args[1:]
    else:
        return None
    keywords = {k.arg: k.value for k in node.keywords}
    if set(keywords) - {"dim", "keepdim"} or len(args) > 2:
        return None
    given = dict(zip(("dim", "keepdim"), args, strict=False))
    if given.keys() & keywords.keys():
        return None
    given |= keywords
    dim, keepdim = given.get("dim"), given.get("keepdim", ast.Constant(False))
    ok = _is_const(dim, 0) and isinstance(keepdim, ast.Constant) and keepdim.value in keepdims
    return subject if ok else None


def _range_form(target, iterable, lower, upper):
    """for i in range(len(o) - 1): values[o[i]:o[i + 1]]  ->  o."""
    if not (isinstance(target, ast.Name) and isinstance(iterable, ast.Call) and _dotted(iterable.func) == "range"):
        return None
    if len(iterable.args) != 1:
        return None
    bound = iterable.args[0]
    if not (isinstance(bound, ast.BinOp) and isinstance(bound.op, ast.Sub) and _is_const(bound.right, 1)):
        return None
    counted = bound.left
    if not (isinstance(counted, ast.Call) and _dotted(counted.func) == "len" and len(counted.args) == 1):
        return None
    offsets, index = counted.args[0], target.id
    if not (isinstance(lower, ast.Subscript) and ast.dump(lower.value) == ast.dump(offsets)):
        return None
    if not _is_name(lower.slice, index):
        return None
    upper_index = upper.slice if isinstance(upper, ast.Subscript) else None
    if upper_index is None or ast.dump(upper.value) != ast.dump(offsets):
        return None
    ok = isinstance(upper_index, ast.BinOp) and isinstance(upper_index.op, ast.Add)
    ok = ok and _is_name(upper_index.left, index) and _is_const(upper_index.right, 1)
    return offsets if ok else None


def _zip_form(target, iterable, lower, upper):
    """for s, e in zip(o[:-1], o[1:]): values[s:e]  ->  o."""
    if not (
        isinstance(target, ast.Tuple) and len(target.elts) == 2 and all(isinstance(t, ast.Name) for t in target.elts)
    ):
        return None
    if not (isinstance(iterable, ast.Call) and _dotted(iterable.func) == "zip" and len(iterable.args) == 2):
        return None
    head, tail = iterable.args
    if not (isinstance(head, ast.Subscript) and isinstance(tail, ast.Subscript)):
        return None
    if ast.dump(head.value) != ast.dump(tail.value):
        return None
    if not (_is_slice(head.slice, None, -1) and _is_slice(tail.slice, 1, None)):
        return None
    if not (_is_name(lower, target.elts[0].id) and _is_name(upper, target.elts[1].id)):
        return None
    return head.value


def _tolist_source(preceding: list[ast.stmt], offsets: ast.expr):
    """The statement `o = t.tolist()` that bound the offsets name, when it precedes in the same block."""
    if not isinstance(offsets, ast.Name):
        return None
    for statement in reversed(preceding):
        if isinstance(statement, ast.Assign) and any(_is_name(t, offsets.id) for t in statement.targets):
            ok = len(statement.targets) == 1 and _is_method(statement.value, "tolist") and not statement.value.args
            return statement if ok else None
    return None


def _uses(definition: ast.FunctionDef, name: str, exclude: list[ast.stmt]) -> int:
    skipped = {id(n) for statement in exclude for n in ast.walk(statement)}
    return sum(1 for n in ast.walk(definition) if isinstance(n, ast.Name) and n.id == name and id(n) not in skipped)


def _is_method(node, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name


def _is_name(node, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _is_const(node, value) -> bool:
    return isinstance(node, ast.Constant) and node.value == value


def _is_slice(node, lower, upper) -> bool:
    if not isinstance(node, ast.Slice) or node.step is not None:
        return False
    return _const_or_none(node.lower) == lower and _const_or_none(node.upper) == upper


def _const_or_none(node):
    if node is None:
        return None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return -node.operand.value
    return node.value if isinstance(node, ast.Constant) else object()


def _dotted(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""
