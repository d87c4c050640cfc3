"""The structural variants the engine knows how to apply to Liger's row-wise kernels, as source rewrites.

Each rewrite takes the kernel file's text and returns the new text, or raises NotApplicable with the reason (the
log shows it; it costs no variant). Rewrites find their places with `ast` (launch sites, the backward wrapper, the
autograd Function) and edit by position, so comments and the rest of the file stay as they are. They compose: a
variant is the current best with one more rewrite, so its file says which earlier variant it builds on.

    launch_table       v1: per pass and BLOCK_SIZE, the (num_warps, num_stages) the sweep measured best
    unused_grad_none   gradients of unused outputs arrive as None: no zero tensor allocated and read
    programs_per_sm    the dW partial sums over K x SM-count programs (fewer rows each), the same second-stage sum
    reload_weight      the backward loads W inside its row loop (from L1/L2) instead of holding it in registers
    pipelined_rows     the backward's row loop as tl.range(num_stages=S): the next rows' loads overlap this row's math
    empty_dx           dX allocated with empty_like when the kernel writes every element (no memset)
    keep_rstd          a backward that recomputes the row statistic loads the one the forward stored instead
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

PROGRAMS_CONSTANT = "_PERF_PROGRAMS_PER_SM"
LAUNCH_TABLE = "_PERF_LAUNCH"


class NotApplicable(Exception):
    """The rewrite has nothing to change in this kernel; the message says why."""


@dataclass(frozen=True)
class Entry:
    key: str
    title: str
    hypothesis: str  # written into the variant's notes before it runs
    expected: str
    rewrite: Callable[[str, dict], str]
    params: dict
    passes: tuple[str, ...] = ("backward",)  # the passes the rewrite changes: a variant for another target is not tried


# --- editing by position -------------------------------------------------------------------------------------


class Edits:
    """Replacements at (line, col) spans of one text, applied back to front so earlier positions stay valid."""

    def __init__(self, text: str):
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.spans: list[tuple[int, int, str]] = []

    def offset(self, line: int, col: int) -> int:
        return self.starts[line - 1] + len(self.lines[line - 1].encode()[:col].decode())

    def replace_node(self, node: ast.AST, new: str) -> None:
        self.spans.append(
            (self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset), new)
        )

    def insert_before_line(self, line: int, new: str) -> None:
        at = self.starts[line - 1]
        self.spans.append((at, at, new))

    def delete_line(self, line: int) -> None:
        self.spans.append((self.starts[line - 1], self.starts[line], ""))

    def apply(self) -> str:
        text = self.text
        for start, end, new in sorted(self.spans, key=lambda s: (s[0], s[1]), reverse=True):
            text = text[:start] + new + text[end:]
        return text


def _indent(line_text: str) -> str:
    return line_text[: len(line_text) - len(line_text.lstrip())]


def _jit_names(tree: ast.Module) -> set[str]:
    from pipelines.perf.source import _jit_functions

    return {j.name for j in _jit_functions(tree)}


def _launches(tree: ast.Module):
    from pipelines.perf.source import launch_calls

    return list(launch_calls(tree, _jit_names(tree)))


def _statement_of(func: ast.FunctionDef, call: ast.Call) -> ast.stmt:
    """The innermost simple statement holding the call (the launch's own line, inside any if / with)."""
    simple = [
        node
        for node in ast.walk(func)
        if isinstance(node, ast.Expr | ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Return)
        and node.lineno <= call.lineno
        and node.end_lineno >= call.end_lineno
    ]
    if not simple:
        raise NotApplicable(f"no statement holds the launch at line {call.lineno}")
    return max(simple, key=lambda n: (n.lineno, -n.end_lineno))


def _module_insert_line(tree: ast.Module) -> int:
    """The line before the first function or class: module helpers and constants go there."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            return min([node.lineno] + [d.lineno for d in node.decorator_list])
    return len(tree.body) + 1


def _backward_wrapper(tree: ast.Module) -> ast.FunctionDef:
    """The Python function launching the backward kernels on an SM-count grid (Liger's `*_backward`)."""
    for func, call in _launches(tree):
        if "backward" in call.func.value.id and "sm_count" in ast.unparse(func):
            return func
    raise NotApplicable("no backward launcher sized by sm_count (the dW partial-sum pattern)")


# --- v1: the launch table -------------------------------------------------------------------------------------

LAUNCH_HELPER = """# liger-bot perf: (num_warps, num_stages) per pass and BLOCK_SIZE, measured on {gpu} over the benchmark's sizes
# (launch sweep); a BLOCK_SIZE not in the table keeps the kernel's own settings.
{table} = {value}


def _perf_launch(pass_name, block_size, **launch):
    num_warps, num_stages = {table}[pass_name].get(block_size, (None, None))
    if num_warps is not None:
        launch["num_warps"] = num_warps
    if num_stages is not None:
        launch["num_stages"] = num_stages
    return launch


"""


def table_literal(table: dict) -> str:
    passes = []
    for pass_name in ("forward", "backward"):
        rows = ", ".join(f"{block}: {tuple(cfg)!r}" for block, cfg in sorted(table.get(pass_name, {}).items()))
        passes.append(f'"{pass_name}": {{{rows}}}')
    return "{" + ", ".join(passes) + "}"


def launch_table(text: str, params: dict) -> str:
    """Every launch takes its num_warps / num_stages from the table; an existing table just gets new values."""
    table = params.get("table", {})
    tree = ast.parse(text)
    existing = [n for n in tree.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == LAUNCH_TABLE]
    if existing:
        edits = Edits(text)
        edits.replace_node(existing[0].value, table_literal(table))
        return edits.apply()
    launches = _launches(tree)
    if not launches:
        raise NotApplicable("no kernel[grid](...) launch to set num_warps / num_stages on")
    edits = Edits(text)
    for func, call in launches:
        keywords = {k.arg: k for k in call.keywords if k.arg}
        if "num_warps" not in keywords or "BLOCK_SIZE" not in keywords:
            continue
        if ast.unparse(keywords["num_warps"].value).startswith("_PERF_"):
            continue  # a catalogue variant's launch (the looped forward): its settings are that variant's parameters
        statement = _statement_of(func, call)
        indent = _indent(edits.lines[statement.lineno - 1])
        pass_name = "backward" if "backward" in call.func.value.id else "forward"
        block = ast.get_source_segment(text, keywords["BLOCK_SIZE"].value)
        given = [f"num_warps={ast.get_source_segment(text, keywords['num_warps'].value)}"]
        if "num_stages" in keywords:
            given.append(f"num_stages={ast.get_source_segment(text, keywords['num_stages'].value)}")
            stages = keywords["num_stages"]
            if edits.lines[stages.lineno - 1].strip().rstrip(",") == ast.get_source_segment(text, stages):
                edits.delete_line(stages.lineno)
            else:
                edits.replace_node(stages, "**{}")
        launch_args = ", ".join(given)
        edits.insert_before_line(
            statement.lineno, f'{indent}_launch = _perf_launch("{pass_name}", {block}, {launch_args})\n'
        )
        edits.replace_node(keywords["num_warps"], "**_launch")
    if not edits.spans:
        raise NotApplicable("no launch passes BLOCK_SIZE and num_warps")
    helper = LAUNCH_HELPER.format(gpu=params.get("gpu", "the GPU"), table=LAUNCH_TABLE, value=table_literal(table))
    edits.insert_before_line(_module_insert_line(tree), helper)
    return edits.apply()


# --- unused output gradients as None -------------------------------------------------------------------------


def _optional_grads(tree: ast.Module) -> list[tuple[ast.FunctionDef, ast.Call, str]]:
    """(launcher, launch, name) for backward launches passing `has_<x>=<name> is not None`."""
    found = []
    for func, call in _launches(tree):
        for keyword in call.keywords:
            value = keyword.value
            if (
                keyword.arg
                and keyword.arg.startswith("has_")
                and isinstance(value, ast.Compare)
                and isinstance(value.ops[0], ast.IsNot)
                and isinstance(value.left, ast.Name)
            ):
                found.append((func, call, value.left.id))
    return found


def _autograd_function(tree: ast.Module) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any("Function" in ast.unparse(b) for b in node.bases):
            return node
    raise NotApplicable("no torch.autograd.Function in the kernel file")


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise NotApplicable(f"{cls.name} has no {name}")


def _body_start(func: ast.FunctionDef) -> ast.stmt:
    """The first statement after the docstring."""
    body = func.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and len(body) > 1:
        return body[1]
    return body[0]


def unused_grad_none(text: str, params: dict) -> str:
    """ctx.set_materialize_grads(False): autograd stops allocating (and the kernel stops reading) a zero gradient
    for an output nobody used; the kernel already skips it (`has_x=x is not None`), the launcher now lets it."""
    tree = ast.parse(text)
    optional = _optional_grads(tree)
    if not optional:
        raise NotApplicable("no backward launch takes an optional gradient (`has_x=x is not None`)")
    if "set_materialize_grads" in text:
        raise NotApplicable("gradients are already left unmaterialised")
    cls = _autograd_function(tree)
    forward, backward = _method(cls, "forward"), _method(cls, "backward")
    grads = [a.arg for a in backward.args.args[1:]]
    if len(grads) < 2:
        raise NotApplicable(f"{cls.name}.backward takes one gradient: every output is used")
    edits = Edits(text)
    first = _body_start(forward)
    indent = _indent(edits.lines[first.lineno - 1])
    edits.insert_before_line(
        first.lineno,
        f"{indent}# liger-bot perf: an unused output's gradient arrives as None instead of a tensor of zeros\n"
        f"{indent}ctx.set_materialize_grads(False)\n",
    )
    start = _body_start(backward)
    indent = _indent(edits.lines[start.lineno - 1])
    names = {name for _, _, name in optional}
    guards = []
    for grad in grads:
        others = [g for g in grads if g != grad]
        if grad not in names and others:  # a required gradient: zeros when only the other outputs were used
            guards.append(f"{indent}if {grad} is None:\n{indent}    {grad} = torch.zeros_like({others[0]})\n")
    edits.insert_before_line(start.lineno, "".join(guards))
    for func, call, name in optional:
        fallback = ast.unparse(call.args[0]) if call.args else None
        for node in ast.walk(func):
            if (
                isinstance(node, ast.Assign)
                and ast.unparse(node.targets[0]) == name
                and ast.unparse(node.value).startswith(f"{name}.")
            ):
                edits.replace_node(
                    node.value, f"{ast.get_source_segment(text, node.value)} if {name} is not None else None"
                )
            if isinstance(node, ast.Call) and ast.unparse(node.func) == f"{name}.stride":
                edits.replace_node(node, f"({ast.get_source_segment(text, node)} if {name} is not None else 0)")
        for arg in call.args:
            if isinstance(arg, ast.Name) and arg.id == name and fallback and fallback != name:
                edits.replace_node(arg, f"{name} if {name} is not None else {fallback}")
    return edits.apply()


# --- dW over more programs -----------------------------------------------------------------------------------


def programs_per_sm(text: str, params: dict) -> str:
    """The backward grid, its rows per program and the dW partial buffer sized by K x sm_count: more programs in
    flight per SM hide the row loop's memory latency; the second-stage sum over the partials stays the same."""
    k = int(params["k"])
    tree = ast.parse(text)
    existing = [n for n in tree.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == PROGRAMS_CONSTANT]
    if existing:
        edits = Edits(text)
        edits.replace_node(existing[0].value, str(k))
        return edits.apply()
    func = _backward_wrapper(tree)
    # the last statement that sets sm_count (the device if/elif chain) ends where n_programs starts
    chain_end = None
    for node in func.body:
        if "sm_count" in ast.unparse(node) and any(
            isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "sm_count" for n in ast.walk(node)
        ):
            chain_end = node
    if chain_end is None:
        raise NotApplicable(f"{func.name} does not set sm_count")
    edits = Edits(text)
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and node.id == "sm_count" and node.lineno > chain_end.end_lineno:
            edits.replace_node(node, "n_programs")
    if not edits.spans:
        raise NotApplicable(f"{func.name} never uses sm_count after setting it")
    indent = _indent(edits.lines[chain_end.lineno - 1])
    edits.insert_before_line(
        chain_end.end_lineno + 1,
        f"{indent}# liger-bot perf: {PROGRAMS_CONSTANT} programs per SM, each with a partial dW row (summed below)\n"
        f"{indent}n_programs = sm_count * {PROGRAMS_CONSTANT}\n",
    )
    edits.insert_before_line(
        _module_insert_line(tree),
        f"# liger-bot perf: backward programs per SM (dW partial rows = this x SM count)\n{PROGRAMS_CONSTANT} = {k}\n\n\n",
    )
    return edits.apply()


# --- the backward's row loop, software-pipelined -------------------------------------------------------------


def pipelined_rows(text: str, params: dict) -> str:
    stages = int(params["stages"])
    tree = ast.parse(text)
    edits = Edits(text)
    for node in tree.body:
        if not (isinstance(node, ast.FunctionDef) and node.name in _jit_names(tree) and "backward" in node.name):
            continue
        for loop in ast.walk(node):
            if isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call):
                callee = ast.unparse(loop.iter.func)
                if callee == "range":
                    args = ", ".join(ast.get_source_segment(text, a) for a in loop.iter.args)
                    edits.replace_node(loop.iter, f"tl.range({args}, num_stages={stages})")
                elif callee == "tl.range":
                    raise NotApplicable(f"{node.name}'s row loop is a tl.range already")
    if not edits.spans:
        raise NotApplicable("no backward kernel loops over rows with range()")
    return edits.apply()


# --- fewer live registers: W reloaded per row -----------------------------------------------------------------


def _assigns(node: ast.stmt, name: str) -> bool:
    return any(isinstance(n, ast.Assign) and name in [ast.unparse(t) for t in n.targets] for n in ast.walk(node))


def reload_weight(text: str, params: dict) -> str:
    """The statements before the backward's row loop that load W (and add the offset) move to the top of the loop
    body: W is then live only until m is formed, not across the whole row (one fewer BLOCK_SIZE vector of
    registers across the loop; the reload hits L1/L2, W being one row shared by every program)."""
    name = params.get("name", "W_row")
    tree = ast.parse(text)
    edits = Edits(text)
    for kernel in tree.body:
        if not (isinstance(kernel, ast.FunctionDef) and kernel.name in _jit_names(tree) and "backward" in kernel.name):
            continue
        loops = [n for n in kernel.body if isinstance(n, ast.For)]
        if not loops:
            continue
        loop = loops[0]
        moved = [n for n in kernel.body if n.lineno < loop.lineno and _assigns(n, name)]
        if not moved:
            continue
        indent = _indent(edits.lines[loop.body[0].lineno - 1])
        block = []
        for node in moved:
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            source = "".join(edits.lines[first - 1 : node.end_lineno])
            outer = _indent(edits.lines[first - 1])
            block.append(
                "".join(indent + line[len(outer) :] if line.strip() else line for line in source.splitlines(True))
            )
            for line in range(first, node.end_lineno + 1):
                edits.delete_line(line)
        note = f"{indent}# liger-bot perf: {name} reloaded per row (L1/L2 hit) instead of live in registers across the loop\n"
        edits.insert_before_line(loop.body[0].lineno, note + "".join(block))
    if not edits.spans:
        raise NotApplicable(f"no backward kernel holds {name} in registers across a row loop")
    return edits.apply()


# --- dX without a memset --------------------------------------------------------------------------------------

_ZEROS_DX = re.compile(r"^(?P<indent>\s*)dX = torch\.zeros_like\((?P<arg>\w+)\)[ \t]*$", re.MULTILINE)


def empty_dx(text: str, params: dict) -> str:
    """Every row and column of dX is stored by the kernel (masked to n_cols), so zero-filling it first is a
    wasted pass over memory."""
    if not _ZEROS_DX.search(text):
        raise NotApplicable("dX is not allocated with torch.zeros_like")
    return _ZEROS_DX.sub(
        lambda m: f"{m['indent']}dX = torch.empty_like({m['arg']})  # liger-bot perf: the kernel writes every element",
        text,
    )


# --- keep the row statistic -----------------------------------------------------------------------------------


def keep_rstd(text: str, params: dict) -> str:
    tree = ast.parse(text)
    backward = [j for j in _jit_names(tree) if "backward" in j]
    kernels = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in backward]
    if kernels and all("RSTD_ptr" in [a.arg for a in k.args.args] for k in kernels):
        raise NotApplicable("the backward already loads the rstd the forward stored (kept, not recomputed)")
    raise NotApplicable("the backward has no stored row statistic to load; recomputing it is the kernel's choice")


# --- forwards: one row per program, the whole row's tile in registers ------------------------------------------

LOOPED_CHUNK = "_PERF_LOOPED_CHUNK"
LOOPED_WARPS = "_PERF_LOOPED_WARPS"
LOOPED_FROM = "_PERF_LOOPED_FROM_BLOCK"
REDUCTIONS = ("tl.sum",)  # a sum over chunks is the sum of the chunks' sums; a max or a min would need other algebra
OTHER_REDUCTIONS = {
    "max",
    "min",
    "argmax",
    "argmin",
    "reduce",
    "cumsum",
    "cumprod",
    "prod",
    "xor_sum",
    "associative_scan",
}


def _names_read(node: ast.AST) -> set[str]:
    read = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
        read.add(node.target.id)
    return read


def _names_set(node: ast.stmt) -> set[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return {n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}


def _row_reductions(node: ast.AST) -> list[ast.Call]:
    """The `tl.sum(v, axis=0)` calls of a statement (reductions over the row)."""
    found = []
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and ast.unparse(call.func) in REDUCTIONS and call.args:
            axis = [k.value for k in call.keywords if k.arg == "axis"] or call.args[1:2]
            if not axis or (isinstance(axis[0], ast.Constant) and axis[0].value in (0, -1)):
                found.append(call)
    return found


@dataclass
class RowStatement:
    node: ast.stmt
    vector: bool  # computes (or stores) a row vector: runs inside a loop over the row's chunks
    level: int  # 0: before any reduction; L: needs the row reductions of level L (computed by pass L)
    reductions: list = field(default_factory=list)  # its tl.sum calls (a scalar statement of its level)


@dataclass
class RowKernel:
    """A forward kernel of one row per program, read as passes: each level of row reductions (a reduction of
    level L reads only what reductions below L gave) is one pass over the row, then one pass stores the outputs."""

    func: ast.FunctionDef
    cols: ast.stmt  # `cols = tl.arange(0, BLOCK_SIZE)`
    mask: ast.stmt  # `mask = cols < n_cols`
    n_cols: str
    block: str
    statements: list[RowStatement]

    @property
    def levels(self) -> int:
        return max(s.level for s in self.statements if s.reductions)


def _row_kernel(func: ast.FunctionDef) -> RowKernel:
    constexprs = {
        a.arg for a in func.args.args if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)
    }
    body = (
        func.body[1:]
        if isinstance(func.body[0], ast.Expr) and isinstance(func.body[0].value, ast.Constant)
        else func.body
    )
    cols = next(
        (
            s
            for s in body
            if isinstance(s, ast.Assign)
            and isinstance(s.value, ast.Call)
            and ast.unparse(s.value.func) == "tl.arange"
            and len(s.value.args) == 2
            and ast.unparse(s.value.args[0]) == "0"
            and ast.unparse(s.value.args[1]) in constexprs
        ),
        None,
    )
    if cols is None or len(_names_set(cols)) != 1:
        raise NotApplicable(f"{func.name} has no `cols = tl.arange(0, BLOCK)` row tile")
    col_name, block = next(iter(_names_set(cols))), ast.unparse(cols.value.args[1])
    mask = next(
        (
            s
            for s in body
            if isinstance(s, ast.Assign)
            and isinstance(s.value, ast.Compare)
            and isinstance(s.value.ops[0], ast.Lt)
            and ast.unparse(s.value.left) == col_name
            and isinstance(s.value.comparators[0], ast.Name)
        ),
        None,
    )
    if mask is None:
        raise NotApplicable(f"{func.name} masks no row with `mask = {col_name} < n_cols`")
    n_cols = mask.value.comparators[0].id
    vectors, levels, statements, set_by = {col_name}, {}, [], {}
    for node in body:
        if node in (cols, mask):
            vectors |= _names_set(node)
            continue
        if not isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Expr):
            kind = type(node).__name__.lower()
            raise NotApplicable(
                f"{func.name} has an `{kind}` at line {node.lineno}: only straight-line rows are looped"
            )
        reductions = _row_reductions(node)
        other = _other_reductions(node, reductions)
        if other:
            raise NotApplicable(f"{func.name} reduces with {other} at line {node.lineno}: only tl.sum(v, axis=0) loops")
        operands = set().union(*(_names_read(r.args[0]) for r in reductions)) if reductions else set()
        if reductions and _outside_reductions(node, reductions) & vectors:
            raise NotApplicable(f"line {node.lineno} mixes a row reduction with row vectors outside it")
        if reductions and any(_row_reductions(r.args[0]) for r in reductions):
            raise NotApplicable(f"line {node.lineno} nests one row reduction in another")
        read = _names_read(node)
        level = max([levels.get(n, 0) for n in read] + [0])
        if reductions:
            level = max(level, 1 + max([levels.get(n, 0) for n in operands] + [0]))
        vector = not reductions and bool(read & vectors)
        for name in _names_set(node):
            if name in set_by and (vector or set_by[name] or level > 0):
                raise NotApplicable(f"{name} is assigned twice in {func.name} (line {node.lineno})")
            set_by[name] = vector or level > 0
            levels[name] = level
            if vector:
                vectors.add(name)
        statements.append(RowStatement(node, vector, level, reductions))
    if not any(s.reductions for s in statements):
        raise NotApplicable(f"{func.name} reduces nothing over the row (tl.sum)")
    if not any(s.vector and isinstance(s.node, ast.Expr) for s in statements):
        raise NotApplicable(f"{func.name} stores no row vector")
    return RowKernel(func, cols, mask, n_cols, block, statements)


def _other_reductions(node: ast.stmt, sums: list[ast.Call]) -> str:
    """The first reduction call that is not one of the row sums (a chunk's max is not the row's): '' if none."""
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and call not in sums:
            name = ast.unparse(call.func)
            if name.split(".")[-1] in OTHER_REDUCTIONS | {"sum"}:
                return name
    return ""


def _outside_reductions(node: ast.stmt, reductions: list[ast.Call]) -> set[str]:
    """The names a reduction statement reads outside its tl.sum calls."""
    keys = {ast.unparse(r) for r in reductions}
    return _names_read(_Accumulated(dict.fromkeys(keys, "row_reduced")).visit(copy.deepcopy(node)))


def _forward_row_kernels(tree: ast.Module) -> dict[str, RowKernel]:
    """Name -> RowKernel for every forward jit function launched one row per program; why not, when none fits."""
    jit = _jit_names(tree)
    launched = {call.func.value.id: call for _, call in _launches(tree)}
    found, why = {}, []
    for node in tree.body:
        if not (isinstance(node, ast.FunctionDef) and node.name in jit and "backward" not in node.name):
            continue
        if node.name.endswith("_looped"):
            continue
        if node.name not in launched:
            why.append(f"{node.name} is not launched here")
            continue
        try:
            found[node.name] = _row_kernel(node)
        except NotApplicable as exc:
            why.append(str(exc))
    if not found:
        raise NotApplicable("; ".join(why) or "no forward kernel")
    return found


def _source_of(lines: list[str], node: ast.stmt, indent: str) -> str:
    text = "".join(lines[node.lineno - 1 : node.end_lineno])
    outer = _indent(lines[node.lineno - 1])
    return "".join(indent + line[len(outer) :] if line.strip() else line for line in text.splitlines(True))


class _Accumulated(ast.NodeTransformer):
    """tl.sum(v, axis=0) -> tl.sum(acc_i, axis=0): the pass accumulated v chunk by chunk into acc_i."""

    def __init__(self, names: dict[str, str]):
        self.names = names  # the call's source -> its accumulator

    def visit_Call(self, node):
        name = self.names.get(ast.unparse(node))
        if name is None:
            return self.generic_visit(node)
        load = ast.Load()
        return ast.Call(
            ast.Attribute(ast.Name("tl", load), "sum", load),
            [ast.Name(name, load)],
            [ast.keyword("axis", ast.Constant(0))],
        )


def _needed(kernel: RowKernel, wanted: list[ast.AST], before: int) -> list[RowStatement]:
    """The vector statements (before line `before`) the wanted expressions read, directly or through others."""
    names = set().union(*(_names_read(w) for w in wanted)) if wanted else set()
    chosen = []
    for statement in reversed([s for s in kernel.statements if s.vector and s.node.lineno < before]):
        if _names_set(statement.node) & names:
            chosen.append(statement)
            names |= _names_read(statement.node)
    return list(reversed(chosen))


def _looped_body(kernel: RowKernel, lines: list[str]) -> str:
    indent, inner = " " * 4, " " * 8
    cols, mask = kernel.cols, kernel.mask
    col_name = next(iter(_names_set(cols)))
    chunk_head = (
        f"{indent}for chunk_start in range(0, {kernel.n_cols}, {kernel.block}):\n"
        f"{inner}{col_name} = chunk_start + tl.arange(0, {kernel.block})\n"
        f"{_source_of(lines, mask, inner)}"
    )
    out = [
        f'{indent}"""liger-bot perf: the row in {kernel.block}-column chunks, one pass per level of row reductions."""\n'
    ]
    out += [_source_of(lines, s.node, indent) for s in kernel.statements if not s.vector and s.level == 0]
    accumulators: dict[str, str] = {}
    for level in range(1, kernel.levels + 1):
        reducing = [s for s in kernel.statements if s.reductions and s.level == level]
        calls = list({ast.unparse(c): c for s in reducing for c in s.reductions}.values())
        out.append(f"{indent}# pass {level}: the row reductions of level {level}, all in one pass over the row\n")
        for call in calls:
            name = accumulators.setdefault(ast.unparse(call), f"row_acc_{len(accumulators)}")
            out.append(f"{indent}{name} = tl.zeros(({kernel.block},), dtype=tl.float32)\n")
        out.append(chunk_head)
        first = min(s.node.lineno for s in reducing)
        out += [_source_of(lines, s.node, inner) for s in _needed(kernel, [c.args[0] for c in calls], first)]
        out += [f"{inner}{accumulators[ast.unparse(c)]} += {ast.unparse(c.args[0])}\n" for c in calls]
        for statement in (s for s in kernel.statements if not s.vector and s.level == level):
            if statement.reductions:
                node = _Accumulated(accumulators).visit(copy.deepcopy(statement.node))
                out.append(f"{indent}{ast.unparse(ast.fix_missing_locations(node))}\n")
            else:
                out.append(_source_of(lines, statement.node, indent))
    stores = [s for s in kernel.statements if s.vector and isinstance(s.node, ast.Expr)]
    out.append(f"{indent}# last pass: the outputs\n{chunk_head}")
    out += [
        _source_of(lines, s.node, inner) for s in _needed(kernel, [s.node for s in stores], kernel.func.end_lineno + 1)
    ]
    out += [_source_of(lines, s.node, inner) for s in stores]
    return "".join(out)


LOOPED_CONSTANTS = """# liger-bot perf: rows of BLOCK_SIZE >= {from_name} take the looped forward, in chunks of {chunk_name} columns on
# {warps_name} warps (few live registers, many programs per SM) instead of the whole row in registers
{from_name} = {from_block}
{chunk_name} = {chunk}
{warps_name} = {warps}


"""


def _looped_launch(text: str, call: ast.Call, kernel: RowKernel) -> str:
    """The launch of the looped copy: the same arguments, BLOCK_SIZE the chunk, the chunk's warps."""
    looped = copy.deepcopy(call)
    looped.func.value.id = f"{kernel.func.name}_looped"
    keywords = []
    for keyword in looped.keywords:
        if keyword.arg in ("num_warps", "num_stages") or (
            keyword.arg is None and ast.unparse(keyword.value) == "_launch"
        ):
            continue
        if keyword.arg == kernel.block:
            keyword = ast.keyword(
                keyword.arg, ast.parse(f"min({ast.unparse(keyword.value)}, {LOOPED_CHUNK})").body[0].value
            )
        keywords.append(keyword)
    looped.keywords = [*keywords, ast.keyword("num_warps", ast.Name(LOOPED_WARPS, ast.Load()))]
    return ast.unparse(looped)


def looped_forward(text: str, params: dict) -> str:
    """A copy of each row-wise forward kernel that walks the row in chunks: one pass over the row per level of
    dependent row reductions (every reduction of a level accumulated in the same pass, in fp32), then a pass that
    computes and stores the outputs; the launcher takes it for rows of BLOCK_SIZE >= the threshold. Re-applied,
    it only sets the chunk, warps and threshold."""
    values = {LOOPED_FROM: params.get("from_block", 8192), LOOPED_CHUNK: params["chunk"], LOOPED_WARPS: params["warps"]}
    tree = ast.parse(text)
    existing = {
        ast.unparse(n.targets[0]): n
        for n in tree.body
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) in values
    }
    if existing:
        edits = Edits(text)
        for name, node in existing.items():
            edits.replace_node(node.value, str(values[name]))
        return edits.apply()
    kernels = _forward_row_kernels(tree)
    edits = Edits(text)
    for func, call in _launches(tree):
        kernel = kernels.get(call.func.value.id)
        if kernel is None:
            continue
        block = next((k.value for k in call.keywords if k.arg == kernel.block), None)
        if block is None:
            raise NotApplicable(f"the launch at line {call.lineno} does not pass {kernel.block}=")
        statement = _statement_of(func, call)
        indent = _indent(edits.lines[statement.lineno - 1])
        original = _source_of(edits.lines, statement, indent + "    ")
        edits.replace_node(
            statement,
            f"if {ast.get_source_segment(text, block)} >= {LOOPED_FROM}:  # liger-bot perf: a wide row, in chunks\n"
            f"{indent}    {_looped_launch(text, call, kernel)}\n{indent}else:\n{original.rstrip()}",
        )
    for kernel in kernels.values():
        func = kernel.func
        first = min([func.lineno] + [d.lineno for d in func.decorator_list])
        body_start = func.body[0].lineno
        header = "".join(edits.lines[first - 1 : body_start - 1]).replace(
            f"def {func.name}(", f"def {func.name}_looped(", 1
        )
        if isinstance(func.body[0], ast.Expr) and isinstance(func.body[0].value, ast.Constant):
            header = "".join(edits.lines[first - 1 : func.body[0].lineno - 1]).replace(
                f"def {func.name}(", f"def {func.name}_looped(", 1
            )
        edits.insert_before_line(func.end_lineno + 1, f"\n\n{header}{_looped_body(kernel, edits.lines)}")
    constants = {"from_name": LOOPED_FROM, "chunk_name": LOOPED_CHUNK, "warps_name": LOOPED_WARPS}
    edits.insert_before_line(
        _module_insert_line(tree),
        LOOPED_CONSTANTS.format(
            **constants, from_block=values[LOOPED_FROM], chunk=params["chunk"], warps=params["warps"]
        ),
    )
    return edits.apply()


CATALOGUE: tuple[Entry, ...] = (
    Entry(
        "looped_forward",
        "Looped forward: the wide row in 2048-column chunks",
        "One program holds its whole row (BLOCK_SIZE = next_pow2(n) = 16384 columns at 16 warps) in registers: ptxas "
        "(sm_90a) gives Liger's layer_norm / poly_norm forward 128 / 127 registers a thread there, no spills, so one "
        "program fills the SM's 64K registers: one row in flight per SM (16 of 64 warp slots), whose load, block "
        "reductions (two / three, each a barrier) and store never overlap another row's. Inductor's reduction at this "
        "width loops over the row in RBLOCK=2048 chunks on 8 warps; the looped copy does the same (46-48 registers: "
        "8 programs, 64 warps a SM): one pass over the row per level of row reductions (poly_norm's three sums in one "
        "pass, layer_norm's mean then variance), the re-reads from L2.",
        "forward -(15-45)% at hidden >= 8192 (4096x16384: Liger 0.77x / 0.55x torch.compile for layer_norm / "
        "poly_norm); the narrower sizes keep the original kernel: no change there",
        looped_forward,
        {"chunk": 2048, "warps": 8, "from_block": 8192},
        ("forward",),
    ),
    Entry(
        "looped_forward",
        "Looped forward: 4096-column chunks",
        "Building on the best so far: half as many chunks (16 values a thread at 8 warps), fewer loop iterations and "
        "reductions per row, if the first looped variant spent its time in the loop rather than in memory.",
        "forward a further -(0-10)% at hidden >= 8192; none if the 2048 chunk already streams at the copy ceiling",
        looped_forward,
        {"chunk": 4096, "warps": 8, "from_block": 8192},
        ("forward",),
    ),
    Entry(
        "unused_grad_none",
        "Unused output gradients as None",
        "An output nobody uses (the residual S of the benchmark) gets a gradient of zeros from autograd: a memset of a "
        "rows x hidden tensor, then a read of it in the backward kernel. set_materialize_grads(False) removes both.",
        "backward -(15-25)% at every size where only Y is used (two of the kernel's four full-size streams go away)",
        unused_grad_none,
        {},
    ),
    Entry(
        "reload_weight",
        "W reloaded per row (fewer live registers)",
        "At BLOCK_SIZE 16384 every live fp32 vector is 32 registers per thread at 16 warps; the backward keeps the dW "
        "accumulator, W, X, dY and m live, more than the 128 registers a thread may hold there, so it spills. W is "
        "the one that need not stay live across the row loop.",
        "backward -(5-20)% at the largest hidden size if it spilled; none where the registers fit",
        reload_weight,
        {},
    ),
    Entry(
        "programs_per_sm",
        "dW over 2 programs per SM",
        "One program per SM runs its rows one after another with a single row in flight; two programs per SM overlap "
        "one's loads with the other's math. The dW partial buffer doubles (2 x SMs rows), the second-stage sum is the "
        "same.",
        "backward -(5-20)% at large hidden sizes, where one row is the whole register file",
        programs_per_sm,
        {"k": 2},
    ),
    Entry(
        "pipelined_rows",
        "Software-pipelined row loop",
        "The backward's row loop issues the next row's loads only after this row's store; tl.range(num_stages=2) lets "
        "Triton prefetch the next rows while this one reduces.",
        "backward -(5-15)% where the loop is latency-bound (few programs per SM)",
        pipelined_rows,
        {"stages": 2},
    ),
    Entry(
        "programs_per_sm",
        "dW over 4 programs per SM",
        "Building on the best so far: four programs per SM if two helped (more latency hidden), at the cost of a "
        "4 x SMs dW partial buffer.",
        "backward a further -(0-10)%; none if registers already cap occupancy",
        programs_per_sm,
        {"k": 4},
    ),
    Entry(
        "empty_dx",
        "dX without a memset",
        "dX = torch.zeros_like(dY) fills a tensor the kernel then overwrites completely.",
        "backward -(5-20)% when in_place=False (the benchmark's default layer is in place: no change there)",
        empty_dx,
        {},
    ),
    Entry(
        "keep_rstd",
        "Keep the row statistic",
        "A backward that recomputes rstd reads its row twice; loading the stored rstd saves a reduction.",
        "none if the kernel already keeps it",
        keep_rstd,
        {},
    ),
)
