"""What can be read about a target kernel without a GPU: its files, its @triton.jit functions, its launches and the
benchmark script's sweep, all with `ast` (the target's code is read, never imported, in this process).

KERNEL is the stem shared by `src/liger_kernel/ops/{KERNEL}.py`, `benchmark/scripts/benchmark_{KERNEL}.py` and
`test/transformers/test_{KERNEL}.py` (LinkedIn's skill checks the same three before it starts).
"""

from __future__ import annotations

import ast
import math
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from pipelines.kernel.spec import validate_name
from pipelines.outcome import PipelineError
from pipelines.target import Checkout

SETTINGS_KEYWORDS = ("BLOCK_SIZE", "BLOCK_ROW", "num_warps", "num_stages")


@dataclass(frozen=True)
class PerfFiles:
    ops: Path
    benchmark: Path
    test: Path

    @classmethod
    def of(cls, name: str) -> PerfFiles:
        return cls(
            Path(f"src/liger_kernel/ops/{name}.py"),
            Path(f"benchmark/scripts/benchmark_{name}.py"),
            Path(f"test/transformers/test_{name}.py"),
        )


@dataclass(frozen=True)
class JitFunction:
    name: str
    line: int
    params: tuple[str, ...]
    constexprs: tuple[str, ...]

    @property
    def pass_name(self) -> str:
        return "backward" if "backward" in self.name else "forward"


@dataclass(frozen=True)
class Launch:
    kernel: str
    line: int
    caller: str  # the Python function that launches it
    grid: str
    settings: dict[str, str]  # BLOCK_SIZE / num_warps / num_stages -> the expression passed


@dataclass(frozen=True)
class BenchmarkSweep:
    """The benchmark script's token-length sweep on its default model, read from the script and its configs."""

    setup_fn: str
    providers: tuple[str, ...]
    liger_provider: str
    reference_provider: str
    model: str
    model_config: dict  # the default model's fields the script reads (hidden_size, dtype, ...)
    extra_config: dict  # the script's extra_configs (eps ...)
    x_name: str
    x_values: tuple[int, ...]
    modes: tuple[str, ...]

    def config(self, hidden: int) -> dict:
        """The extra_benchmark_config the script builds, with hidden_size set (the sizes beyond its sweep)."""
        return {
            **self.model_config,
            **self.extra_config,
            "hidden_size": hidden,
            "bsz": 1,
            "seq_len": max(self.x_values),
        }


@dataclass(frozen=True)
class KernelSource:
    name: str
    files: PerfFiles
    jit_functions: tuple[JitFunction, ...]
    launches: tuple[Launch, ...]
    settings_calls: tuple[str, ...]  # e.g. "rms_norm_forward:460 BLOCK_SIZE, num_warps = calculate_settings(n_cols)"
    sweep: BenchmarkSweep
    tests: tuple[str, ...]  # test functions of the unit test file
    lines: int
    text: str = field(repr=False, default="")

    def to_json(self) -> dict:
        data = asdict(self)
        data.pop("text")
        data["files"] = {k: str(v) for k, v in asdict(self.files).items()}
        return data


def read_kernel(checkout: Checkout, name: str) -> KernelSource:
    name = validate_name(name)
    files = PerfFiles.of(name)
    missing = [str(p) for p in (files.ops, files.benchmark, files.test) if not checkout.path(p).is_file()]
    if missing:
        raise PipelineError(
            f"{name}: the kernel needs {', '.join(missing)} in the target",
            hint="KERNEL is the stem of src/liger_kernel/ops/KERNEL.py with its benchmark and unit test files",
        )
    text = checkout.path(files.ops).read_text()
    tree = _parse(text, files.ops)
    jits = tuple(_jit_functions(tree))
    jit_names = {j.name for j in jits}
    if not jit_names:
        raise PipelineError(f"{files.ops} holds no @triton.jit function", hint="perf tunes Triton kernels")
    launches = tuple(_launches(tree, jit_names, text))
    settings = tuple(_settings_calls(tree, text))
    sweep = read_sweep(checkout, files.benchmark, name)
    tests = tuple(_test_functions(_parse(checkout.path(files.test).read_text(), files.test)))
    return KernelSource(name, files, jits, launches, settings, sweep, tests, len(text.splitlines()), text)


def _parse(text: str, path: Path) -> ast.Module:
    try:
        return ast.parse(text)
    except SyntaxError as exc:
        raise PipelineError(f"{path} does not parse: {exc}") from None


def _is_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(target, ast.Attribute) and target.attr in ("jit", "autotune", "heuristics")


def _is_constexpr(annotation: ast.expr | None) -> bool:
    return annotation is not None and "constexpr" in ast.unparse(annotation)


def _jit_functions(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(_is_jit(d) for d in node.decorator_list):
            args = node.args.args
            yield JitFunction(
                node.name,
                node.lineno,
                tuple(a.arg for a in args),
                tuple(a.arg for a in args if _is_constexpr(a.annotation)),
            )


def launch_calls(tree: ast.Module, jit_names: set[str]):
    """(caller FunctionDef, Call) for every `kernel[grid](...)` of a jit function of the module."""
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef):
            continue
        for node in ast.walk(func):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Subscript)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in jit_names
            ):
                yield func, node


def _launches(tree: ast.Module, jit_names: set[str], text: str):
    for func, call in launch_calls(tree, jit_names):
        settings = {k.arg: ast.get_source_segment(text, k.value) for k in call.keywords if k.arg in SETTINGS_KEYWORDS}
        grid = ast.get_source_segment(text, call.func.slice) or ""
        yield Launch(call.func.value.id, call.lineno, func.name, grid, settings)


def _settings_calls(tree: ast.Module, text: str):
    """The assignments that set launch parameters: calculate_settings, num_stages, rows_per_program, grid."""
    names = ("BLOCK_SIZE", "num_warps", "num_stages", "rows_per_program", "grid", "BLOCK_ROW")
    for func in tree.body:
        if not isinstance(func, ast.FunctionDef):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.Assign):
                targets = {ast.unparse(e) for t in node.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])}
                if targets & set(names):
                    yield f"{func.name}:{node.lineno} {ast.get_source_segment(text, node)}"


def _test_functions(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            yield node.name


# --- the benchmark script -----------------------------------------------------------------------------------


def _keywords(tree: ast.Module, function: str) -> dict[str, ast.expr]:
    """Keywords of the first call to `function` in the script (build_token_length_sweep, run_benchmarks)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == function:
            return {k.arg: k.value for k in node.keywords if k.arg}
    return {}


def _literal(node: ast.expr | None, default=None):
    if node is None:
        return default
    try:
        return ast.literal_eval(node)
    except ValueError:
        return default


def _providers(tree: ast.Module) -> tuple[str, ...]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "common_configs['kernel_providers']":
            return tuple(_literal(node.value, ()))
    return ()


def _model_configs(checkout: Checkout) -> tuple[str, dict]:
    """The default model of benchmark_model_configs.py (DEFAULT_MODEL_CONFIG) and its literal fields."""
    path = checkout.path("benchmark/scripts/benchmark_model_configs.py")
    tree = _parse(path.read_text(), path)
    constants: dict[str, ast.Call] = {}
    default = ""
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "ModelConfig":
                constants[node.targets[0].id] = node.value
            if node.targets[0].id == "DEFAULT_MODEL_CONFIG":
                default = ast.unparse(node.value)
    if default not in constants:
        raise PipelineError(f"{path}: no DEFAULT_MODEL_CONFIG = ModelConfig(...) to read the benchmark's sizes from")
    fields = {"dtype": "bfloat16", "max_position_embeddings": 8192}  # ModelConfig's own defaults
    for keyword in constants[default].keywords:
        value = ast.unparse(keyword.value)
        fields[keyword.arg] = value.removeprefix("torch.") if value.startswith("torch.") else _literal(keyword.value)
    return str(fields.get("name", default)), fields


def read_sweep(checkout: Checkout, script: Path, name: str) -> BenchmarkSweep:
    tree = _parse(checkout.path(script).read_text(), script)
    sweep = _keywords(tree, "build_token_length_sweep")
    speed = _keywords(tree, "run_benchmarks")
    providers = _providers(tree)
    if not sweep or not providers:
        raise PipelineError(
            f"{script}: no build_token_length_sweep(...) and kernel_providers to read the sizes and providers from",
            hint="perf reads the benchmark script of Liger's framework (benchmark/scripts/utils.py)",
        )
    liger = [p for p in providers if p.startswith("liger")]
    liger_provider = next((p for p in liger if p.endswith(name)), liger[0] if liger else "")
    reference = _literal(sweep.get("probe_provider"), "huggingface")
    model, fields = _model_configs(checkout)
    keys = _literal(sweep.get("model_keys"), ["hidden_size"])
    model_config = {k: fields[k] for k in keys if k in fields}
    seq_len = int(fields.get("max_position_embeddings", 8192))
    # the script's default x values: powers of two from 1024 up to the model's context (memory is no limit here)
    x_values = tuple(2**i for i in range(10, int(math.log2(seq_len)) + 1))
    modes = tuple(_literal(speed.get("kernel_operation_modes"), ["forward", "backward", "full"]))
    return BenchmarkSweep(
        setup_fn=ast.unparse(sweep["setup_fn"]) if "setup_fn" in sweep else f"setup_{name}",
        providers=providers,
        liger_provider=liger_provider,
        reference_provider=reference if reference in providers else next(p for p in providers if p not in liger),
        model=model,
        model_config=model_config,
        extra_config=_literal(sweep.get("extra_configs"), {}) or {},
        x_name=_literal(sweep.get("scale_dim"), "T"),
        x_values=x_values,
        modes=modes,
    )
