"""The GPU child of the perf pipeline: one process per variant, with the variant already in the target's source.

    python -m pipelines.perf.measure SPEC.json OUT.json

It runs the kernel's unit tests (in process, pytest), then times every (provider, pass, size) with the target's
own benchmark framework's passes (`benchmark/scripts/utils.py: run_speed_benchmark`) on the layers its benchmark
script's setup function builds, each replayed from a CUDA graph (`graph_ms`, after triton's do_bench_cudagraph, so the host's
launch overhead drops out) or, where capture fails, with the framework's do_bench, the method recorded per point;
torch.compile of the reference comes from the same setup. It also reads the compiled kernels' registers, spills
and shared memory (Triton's CompiledKernel), the bytes each pass's kernels touch, and the copy bandwidth ceiling of
this GPU; for the launch sweep it times candidate launch tables through the variant's `_PERF_LAUNCH`. Everything
lands in OUT.json; a crash leaves its traceback there.

Under TRITON_INTERPRET=1 (the CPU dry run, `liger-bot perf --interpret`, that tests the pipeline itself) times
are wall-clock medians on the CPU and torch.compile uses the aot_eager backend: no figure of such a run is a
speed claim, and every output says so.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import json
import sys
import time
import traceback
from pathlib import Path

from pipelines import graph_timing

MODES = ("forward", "backward", "full")


def _paths(repo: Path) -> None:
    for entry in (repo / "benchmark" / "scripts", repo, repo / "src"):
        if str(entry) not in sys.path:
            sys.path.insert(0, str(entry))


class _Counts:
    """A pytest plugin counting outcomes (the summary line, without parsing pytest's output)."""

    def __init__(self):
        self.counts: dict[str, int] = {}
        self.failed: list[str] = []

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            self.counts[report.outcome] = self.counts.get(report.outcome, 0) + 1
            if report.outcome == "failed":
                self.failed.append(report.nodeid)


def run_tests(repo: Path, spec: dict) -> dict:
    import pytest

    started = time.perf_counter()
    argv = [str(repo / spec["file"]), "-q", "-p", "no:cacheprovider", "-x"]
    if interpreting():
        argv += ["-p", "pipelines.perf.interpret"]
    if spec.get("k"):
        argv += ["-k", spec["k"]]
    argv += worker_args(spec.get("workers") or 0)
    counts = _Counts()
    code = int(pytest.main(argv, plugins=[counts]))
    import torch

    torch.use_deterministic_algorithms(False)  # the test modules switch it on at import
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.counts.items())) or "no tests ran"
    return {
        "ok": code == 0,
        "exit": code,
        "summary": summary,
        "failed": counts.failed[:5],
        "seconds": round(time.perf_counter() - started, 1),
    }


def worker_args(workers: int) -> list[str]:
    """pytest-xdist's `-n N` where it is installed: a test file of a few hundred small parametrizations (Liger's
    test_rms_norm.py) is bound by each test's launch and compile latency, not by the GPU, so workers divide its wall
    time. Without xdist the file runs serially: every test still runs."""
    if workers < 2:
        return []
    import importlib.util

    if importlib.util.find_spec("xdist") is None:
        return []
    return ["-n", str(workers)]


def interpreting() -> bool:
    import os

    return os.environ.get("TRITON_INTERPRET") == "1"


def wall_ms(forward, mode: str, x, reps: int = 5) -> float:
    """The dry run's timer: wall-clock median of `reps` calls of the pass on the CPU."""
    import torch

    def once():
        if mode == "forward":
            forward()
        elif mode == "backward":
            y = forward()
            started = time.perf_counter()
            y.backward(torch.randn_like(y))
            return time.perf_counter() - started
        else:
            y = forward()
            y.backward(torch.randn_like(y))
        return None

    samples = []
    for _ in range(reps):
        x.grad = None
        started = time.perf_counter()
        inner = once()
        samples.append(inner if inner is not None else time.perf_counter() - started)
    return sorted(samples)[len(samples) // 2] * 1e3


class Bench:
    """The benchmark script's setup function and the framework's timing, for one kernel."""

    def __init__(self, repo: Path, spec: dict):
        import torch

        _paths(repo)
        script = repo / spec["script"]
        module_spec = importlib.util.spec_from_file_location(script.stem, script)
        self.script = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(self.script)
        self.utils = importlib.import_module("utils")
        self.setup = getattr(self.script, spec["setup_fn"])
        self.config = dict(spec["config"])
        self.config["dtype"] = getattr(torch, self.config.get("dtype", "bfloat16"))
        self.providers = {"liger": spec["liger_provider"], "eager": spec["reference_provider"]}
        self.cudagraph = spec.get("timing", "cudagraph") == "cudagraph"  # "do_bench": the framework's timing only
        self.methods: dict[str, str] = {}

    def build(self, provider: str, rows: int, hidden: int, mode: str = "full"):
        """(input, forward callable) as the script builds them; `compile` wraps the reference in torch.compile."""
        import torch

        name = self.providers["eager" if provider == "compile" else provider]
        config = {**self.config, "hidden_size": hidden}
        setup_out = self.setup(self.utils.SingleBenchmarkRunInput(rows, name, mode, config))
        x, fn = setup_out[0], setup_out[1]
        if provider == "compile":
            torch._dynamo.reset()
            compiled = torch.compile(fn, dynamic=False, backend="aot_eager" if interpreting() else "inductor")
            return x, lambda: compiled(x)
        return x, lambda: self.utils.default_forward_fn(*setup_out)

    def time(self, provider: str, rows: int, hidden: int, modes) -> dict[str, float]:
        """{pass: ms}; how each pass was timed is left in `self.methods[pass]` (see `TIMING_METHODS`)."""
        x, forward = self.build(provider, rows, hidden)
        if interpreting():
            self.methods = dict.fromkeys(modes, "wall")
            return {mode: wall_ms(forward, mode, x) for mode in modes}
        out, self.methods = {}, {}
        for mode in modes:
            out[mode], self.methods[mode] = gpu_ms(self.utils, forward, mode, x, self.cudagraph)
        return out


TIMING_METHODS = graph_timing.TIMING_METHODS


def pass_fn(forward, mode: str):
    """The pass as one callable, as the framework's run_speed_benchmark times it (backward keeps its graph). Call
    it on the stream the pass is to be captured on: a backward runs on its forward's stream."""
    import torch

    if mode == "forward":
        return forward
    if mode == "backward":
        y = forward()
        dy = torch.randn_like(y)
        return lambda: y.backward(dy, retain_graph=True)
    # the gradient is drawn once, outside the timed function: a random draw inside a CUDA graph capture fails, and
    # leaves the generator unusable for the do_bench fallback ("Offset increment outside graph capture", H200)
    dy = torch.randn_like(forward())

    def full():
        forward().backward(dy, retain_graph=True)

    return full


def graph_ms(forward, mode: str, x) -> float:
    """Median ms of one call of the pass, replayed from a CUDA graph (pipelines/graph_timing.graph_ms: the pass
    built, warmed and captured on one side stream, x.grad None before each call)."""
    return graph_timing.graph_ms(lambda: pass_fn(forward, mode), [x])


def gpu_ms(utils, forward, mode: str, x, cudagraph: bool = True) -> tuple[float, str]:
    """(median ms, method): the pass replayed from a CUDA graph where it can be captured, so the host's launch and
    autograd overhead drops out (on the H200 it was most of every size below 4096x16384: backward 1024x4096 took
    0.361 ms under do_bench for 36 MB); where capture fails, the framework's own do_bench, and the method says so."""

    def do_bench() -> tuple[float, str]:
        return float(utils.run_speed_benchmark(forward, mode, [x]).y_50), "do_bench"

    return graph_timing.timed(lambda: graph_ms(forward, mode, x), do_bench, f"perf: {mode}", [x], cudagraph)


def touched_bytes(bench: Bench, kernel_module, rows: int, hidden: int) -> dict[str, int]:
    """Bytes of the distinct tensors each pass's Triton launches read or write (every tensor counted once)."""
    import torch

    jits = _jit_functions(kernel_module)
    seen: dict[int, int] = {}

    def wrap(fn):
        original = fn.run

        def run(*args, **kwargs):
            for value in list(args) + list(kwargs.values()):
                if isinstance(value, torch.Tensor):
                    seen[value.data_ptr()] = max(seen.get(value.data_ptr(), 0), value.numel() * value.element_size())
            return original(*args, **kwargs)

        fn.run = run
        return original

    originals = [(fn, wrap(fn)) for fn in jits]
    try:
        result = {}
        x, forward = bench.build("liger", rows, hidden)
        seen.clear()
        y = forward()
        _synchronize()
        result["forward"] = sum(seen.values())
        seen.clear()
        y.backward(torch.randn_like(y), retain_graph=True)
        _synchronize()
        result["backward"] = sum(seen.values())
        result["full"] = result["forward"] + result["backward"]
        return result
    finally:
        for fn, original in originals:
            fn.run = original


def _synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _jit_functions(module) -> list:
    from triton.runtime.jit import JITFunction

    return [v for v in vars(module).values() if isinstance(v, JITFunction)]


def _compiled(kernel_module):
    for fn in _jit_functions(kernel_module):
        for caches in getattr(fn, "device_caches", {}).values():
            for key, compiled in list(caches[0].items()):
                yield fn, (fn.__name__, str(key)), compiled


def compiled_keys(kernel_module) -> set:
    return {key for _, key, _ in _compiled(kernel_module)}


def compiled_facts(kernel_module, exclude: set = frozenset()) -> list[dict]:
    """Registers, spills and shared memory of the kernels compiled since `exclude` was taken (the unit tests'
    small shapes left out), from Triton's CompiledKernel metadata."""
    facts = []
    for fn, key, compiled in _compiled(kernel_module):
        if key in exclude:
            continue
        try:
            if getattr(compiled, "n_regs", None) is None:
                compiled._init_handles()
            meta = compiled.metadata
            facts.append(
                {
                    "kernel": fn.__name__,
                    "constants": _constants(fn, compiled),
                    "num_warps": getattr(meta, "num_warps", None),
                    "num_stages": getattr(meta, "num_stages", None),
                    "shared": getattr(meta, "shared", None),
                    "n_regs": compiled.n_regs,
                    "n_spills": compiled.n_spills,
                }
            )
        except Exception as exc:  # a fact we could not read is said, not guessed
            facts.append({"kernel": fn.__name__, "error": repr(exc)[:200]})
    return facts


def _constants(fn, compiled) -> dict:
    constants = getattr(getattr(compiled, "src", None), "constants", {}) or {}
    names = getattr(fn, "arg_names", [])
    out = {}
    for key, value in constants.items():
        index = key[0] if isinstance(key, tuple) else key
        name = names[index] if isinstance(index, int) and index < len(names) else str(index)
        if isinstance(value, int | float | bool | str):
            out[name] = value
    return out


def sweep(bench: Bench, kernel_module, spec: dict, sizes: list[dict]) -> dict:
    """Candidate launch tables through the variant's _PERF_LAUNCH: num_warps first (the kernel's own num_stages),
    then num_stages at the num_warps chosen per pass; each choice per pass and BLOCK_SIZE is rules.choose_launch's.
    A config is timed only at the sizes whose BLOCK_SIZE it was applied to."""
    from pipelines.perf import rules

    passes = ("forward", "backward")
    groups = rules.sizes_by_block({s["key"]: s["hidden"] for s in sizes})
    results: dict[tuple, dict[str, dict[str, float]]] = {}
    log = []
    started, limit = time.monotonic(), spec.get("seconds")  # the loop's share of the budget for the sweep

    def run(table: dict[str, dict[int, tuple]]) -> None:
        if table and limit is not None and time.monotonic() - started > limit:
            log.append({"table": str(table), "skipped": f"the sweep's {limit:.0f} s were spent"})
            return
        kernel_module._PERF_LAUNCH = {
            p: {b: c for b, c in table.get(p, {}).items() if c != rules.DEFAULT} for p in passes
        }
        for size in sizes:
            block = rules.block_size(size["hidden"])
            configs = {p: table.get(p, {}).get(block, rules.DEFAULT) for p in passes}
            if table and all(c == rules.DEFAULT for c in configs.values()):
                continue  # nothing of this run applies at this size: the default's times stand
            try:
                times = bench.time("liger", size["rows"], size["hidden"], passes)
            except Exception as exc:  # a config that does not compile or launch is left out, and said
                log.append({"table": str(table), "size": size["key"], "error": repr(exc)[:300]})
                continue
            for p in passes:
                results.setdefault(configs[p], {q: {} for q in passes})[p][size["key"]] = times[p]
        log.append({"table": {p: {str(b): list(c) for b, c in t.items()} for p, t in table.items()}})

    run({})
    for warps in spec["warps"]:
        blocks = {b: (warps, None) for b in groups if warps in rules.warp_candidates(b, spec["warps"])}
        if blocks:
            run({p: blocks for p in passes})
    min_gain = spec.get("min_gain", 0.01)
    first = {p: rules.choose_launch(results, p, groups, min_gain) for p in passes}
    for stages in spec["stages"]:
        run({p: {b: (first[p].get(b, rules.DEFAULT)[0], stages) for b in groups} for p in passes})
    table = {p: rules.choose_launch(results, p, groups, min_gain) for p in passes}
    kernel_module._PERF_LAUNCH = {p: {} for p in passes}
    measured = [{"config": list(c), "times": t} for c, t in results.items()]
    return {
        "table": {p: {str(b): list(c) for b, c in t.items()} for p, t in table.items()},
        "log": log,
        "measured": measured,
    }


def copy_bandwidth() -> float:
    if interpreting():
        import torch

        src = torch.empty(2**24, dtype=torch.bfloat16).normal_()
        dst = torch.empty_like(src)
        ms = wall_ms(lambda: dst.copy_(src), "forward", src)
        return 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9
    from pipelines.kernel.bench import copy_bandwidth as measure_copy

    return measure_copy()


def device() -> dict:
    import torch
    import triton

    if interpreting():
        return {
            "name": "CPU under TRITON_INTERPRET=1 (a dry run: no speed claims)",
            "sms": 1,
            "torch": torch.__version__,
        }
    props = torch.cuda.get_device_properties(0)
    return {
        "name": props.name,
        "sm": f"{props.major}.{props.minor}",
        "sms": props.multi_processor_count,
        "memory_gb": round(props.total_memory / 2**30),
        "torch": torch.__version__,
        "triton": triton.__version__,
    }


def measure(spec: dict) -> dict:
    repo = Path(spec["repo"])
    _paths(repo)
    if interpreting():
        from pipelines.perf import interpret

        interpret.install()
    out: dict = {"device": device()}
    if spec.get("tests"):
        out["tests"] = run_tests(repo, spec["tests"])
        if not out["tests"]["ok"]:
            return out
    if spec.get("numeric"):
        out["numeric"] = numeric_gate(repo, spec, spec["numeric"])
        if not out["numeric"]["ok"]:
            return out
    bench = Bench(repo, spec)
    kernel_module = importlib.import_module(f"liger_kernel.ops.{spec['kernel']}")
    from_tests = compiled_keys(kernel_module)
    sizes = spec["sizes"]
    if spec.get("sweep"):
        out["sweep"] = sweep(bench, kernel_module, spec["sweep"], sizes)
        return out
    times: dict[str, dict[str, dict[str, float]]] = {}
    methods: dict[str, dict[str, dict[str, str]]] = {}
    for provider in spec["providers"]:
        times[provider] = {mode: {} for mode in spec["passes"]}
        methods[provider] = {mode: {} for mode in spec["passes"]}
        for size in sizes:
            for mode, ms in bench.time(provider, size["rows"], size["hidden"], spec["passes"]).items():
                times[provider][mode][size["key"]] = ms
                methods[provider][mode][size["key"]] = bench.methods[mode]
    out["times"], out["methods"] = times, methods
    if spec.get("facts"):
        out["facts"] = compiled_facts(kernel_module, exclude=from_tests)
    if spec.get("bytes"):
        out["bytes"] = {s["key"]: touched_bytes(bench, kernel_module, s["rows"], s["hidden"]) for s in sizes}
    if spec.get("ceilings"):
        out["copy_gbps"] = copy_bandwidth()
    return out


# --- the numeric gate -------------------------------------------------------------------------------------------
#
# Liger's unit tests stop at 1,500 columns, so a variant path that switches on for wide rows only (the looped forward
# at BLOCK_SIZE >= 8192) is never run by them. The gate runs the variant and the original (v0) on the same random
# inputs at the sizes given (the target and the benchmark's), in the benchmark's dtype, forward and backward, through
# the layer the benchmark script's setup builds, and compares every output and every input / parameter gradient with
# an fp32 reference: v0 on the same values upcast (the layer built by the setup in float32). Per tensor, the error is
# max |t - ref| / max |ref| (normwise, so near-zero elements do not blow it up); the variant passes when its error is
# at most max(NUMERIC_RATIO x v0's own error, NUMERIC_FLOOR[dtype]): no worse than twice the original's rounding, or
# one unit of the dtype's precision (bf16 2^-7, fp16 2^-10, fp32 1e-5) where v0 is exact: in bf16 a wrong scale of
# about 1% or more fails it. A non-finite element where v0 has none, a tensor v0 returns and the variant does not,
# or another shape fails it too.

NUMERIC_RATIO = 2.0
NUMERIC_FLOOR = {"bfloat16": 2.0**-7, "float16": 2.0**-10, "float32": 1e-5}
NUMERIC_SEED = 1234
# the input is drawn from N(1, 1), not N(0, 1): a row statistic that misses part of the row (a chunk loop that stops
# one chunk early) shifts a centred row's mean by almost nothing, and the offset row's by a fraction of its size
NUMERIC_INPUT_MEAN = 1.0


class _OriginalFinder(importlib.abc.MetaPathFinder):
    """Imports `name` from `path` (v0's file) instead of the target's source, where the variant is installed."""

    def __init__(self, name: str, path: str):
        self.name, self.path = name, path

    def find_spec(self, fullname, path=None, target=None):
        return importlib.util.spec_from_file_location(fullname, self.path) if fullname == self.name else None


def _ours(name: str) -> bool:
    return name == "liger_kernel" or name.startswith("liger_kernel.")


@contextlib.contextmanager
def original_kernel(kernel: str, path: str):
    """liger_kernel imported afresh inside the block, with `liger_kernel.ops.KERNEL` from v0's file: what the
    benchmark's setup builds there (and every import its layer does lazily, e.g. a backend registry) runs v0. The
    variant's modules are back in sys.modules afterwards."""
    saved = {name: module for name, module in sys.modules.items() if _ours(name)}
    for name in saved:
        del sys.modules[name]
    finder = _OriginalFinder(f"liger_kernel.ops.{kernel}", path)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if _ours(n)]:
            del sys.modules[name]
        sys.modules.update(saved)


def leaves(setup_out: list) -> dict:
    """{name: tensor} of what the benchmark's pass reads and differentiates: the input, each parameter of a layer
    the setup returns, and the layers and leaf tensors a returned closure holds (fused_add_rms_norm's setup returns
    `lambda _: layer(x, r)[0]`: its residual and its weight live in the closure, not in the tuple)."""
    import torch

    found: dict = {"x": setup_out[0]}

    def add(name: str, item) -> None:
        if isinstance(item, torch.nn.Module):
            for param_name, param in item.named_parameters():
                found.setdefault(f"{name}.{param_name}" if name else param_name, param)
        elif isinstance(item, torch.Tensor) and item.is_leaf and item.is_floating_point():
            found.setdefault(name, item)

    for index, item in enumerate(setup_out[1:], 1):
        add("" if isinstance(item, torch.nn.Module) else f"arg{index}", item)
        cells = getattr(item, "__closure__", None) or ()
        for var, cell in zip(getattr(getattr(item, "__code__", None), "co_freevars", ()), cells, strict=False):
            add(var, cell.cell_contents)
    unique: dict = {}
    for name, tensor in found.items():  # the input, also held by the closure, once
        if all(tensor is not t for t in unique.values()):
            unique[name] = tensor
    return unique


def numeric_run(bench: Bench, rows: int, hidden: int, draws: dict, dtype=None) -> dict:
    """{name: tensor} of one forward and backward of the benchmark's pass: every output, the input's gradient and
    every parameter's. The setup builds the layer as it does for timing; its input and parameters are then
    overwritten in place with `draws` (drawn here the first time, in the run's own dtypes; later runs take the same
    values, upcast where `dtype` is float32), and so are the output gradients."""
    import torch

    config = {**bench.config, "hidden_size": hidden, **({"dtype": dtype} if dtype is not None else {})}
    setup_out = list(bench.setup(bench.utils.SingleBenchmarkRunInput(rows, bench.providers["liger"], "full", config)))

    def drawn(key: str, like):
        if key not in draws:
            if "generator" not in draws:  # one seeded stream per size, on the layer's device
                draws["generator"] = torch.Generator(device=like.device).manual_seed(NUMERIC_SEED)
            drawn_values = torch.randn(like.shape, generator=draws["generator"], device=like.device)
            draws[key] = (drawn_values + (NUMERIC_INPUT_MEAN if key == "x" else 0.0)).to(like.dtype)
        return draws[key].to(like.dtype)

    inputs = leaves(setup_out)
    with torch.no_grad():
        for name, tensor in inputs.items():
            tensor.copy_(drawn(name, tensor))
            tensor.grad = None
    out = bench.utils.default_forward_fn(*setup_out)
    outs = [out] if isinstance(out, torch.Tensor) else [o for o in out if isinstance(o, torch.Tensor)]
    result = {f"output {i}" if len(outs) > 1 else "output": o.detach().clone() for i, o in enumerate(outs)}
    differentiable = [(i, o) for i, o in enumerate(outs) if o.requires_grad]
    grads = [drawn(f"dy {i}", o).clone() for i, o in differentiable]  # a clone: a backward may write dY in place
    torch.autograd.backward([o for _, o in differentiable], grads)
    result.update({f"grad {name}": tensor.grad for name, tensor in inputs.items()})
    _synchronize()
    return {k: v for k, v in result.items() if v is not None}


def compare(variant: dict, original: dict, reference: dict, dtype: str) -> list[dict]:
    """Per tensor: the variant's and v0's normwise error against the fp32 reference, the limit, ok."""
    import torch

    floor = NUMERIC_FLOOR.get(dtype, NUMERIC_FLOOR["float32"])
    rows = []
    for name, ref in reference.items():
        ref = ref.float()
        base, got = original.get(name), variant.get(name)
        scale = float(ref.abs().max()) or 1.0
        v0_err = float((base.float() - ref).abs().max()) / scale if base is not None else 0.0
        limit = max(NUMERIC_RATIO * v0_err, floor)
        row = {"tensor": name, "v0_rel": v0_err, "limit": limit, "rel": None, "abs": None, "ok": False, "why": ""}
        if got is None:
            row["why"] = "the variant does not produce it"
        elif got.shape != ref.shape:
            row["why"] = f"shape {tuple(got.shape)}, v0 {tuple(ref.shape)}"
        elif not bool(torch.isfinite(got).all()) and bool(torch.isfinite(base).all()):
            row["why"] = f"{int((~torch.isfinite(got)).sum())} non-finite elements where v0 has none"
        else:
            diff = (got.float() - ref).abs().max()
            row["abs"], row["rel"] = float(diff), float(diff) / scale
            row["abs_vs_v0"] = float((got.float() - base.float()).abs().max())
            row["ok"] = row["rel"] <= limit
            if not row["ok"]:
                row["why"] = f"max rel err {row['rel']:.2e} vs fp32 (v0 {v0_err:.2e}, limit {limit:.2e})"
        rows.append(row)
    return rows


def numeric_gate(repo: Path, spec: dict, numeric: dict) -> dict:
    """The variant (installed in the target's source) against v0 (`numeric["original"]`) at `numeric["sizes"]`."""
    started = time.perf_counter()
    try:
        checked = _numeric_sizes(repo, spec, numeric)
    except Exception:
        return {"ok": False, "summary": f"error: {traceback.format_exc()[-1500:]}", "sizes": []}
    failures = [(size, r) for size, rows in checked for r in rows if not r["ok"]]
    rows = [(size, r) for size, rows in checked for r in rows if r["rel"] is not None]
    worst = max(rows, key=lambda sr: sr[1]["rel"] / sr[1]["limit"], default=None)
    if failures:
        size, r = failures[0]
        summary = f"{r['tensor']} at {size}: {r['why']}" + (
            f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
        )
    elif worst:
        size, r = worst
        summary = f"max rel err {r['rel']:.2e} at {size} ({r['tensor']}; v0 {r['v0_rel']:.2e}, limit {r['limit']:.2e})"
    else:
        summary = "nothing compared"
    return {
        "ok": not failures and worst is not None,
        "summary": summary,
        "dtype": numeric_dtype(spec),
        "sizes": [{"size": size, "tensors": rows} for size, rows in checked],
        "seconds": round(time.perf_counter() - started, 1),
    }


def numeric_dtype(spec: dict) -> str:
    """The benchmark's dtype; float32 under TRITON_INTERPRET=1, whose numpy emulation of bf16 arithmetic overflows
    (poly_norm's x**6 comes back NaN from v0 itself there)."""
    return "float32" if interpreting() else spec["config"].get("dtype", "bfloat16")


def _numeric_sizes(repo: Path, spec: dict, numeric: dict) -> list[tuple[str, list[dict]]]:
    import torch

    dtype = numeric_dtype(spec)
    spec = {**spec, "config": {**spec["config"], "dtype": dtype}}
    variant_bench = Bench(repo, spec)
    checked = []
    for size in numeric["sizes"]:
        draws: dict = {}
        variant = numeric_run(variant_bench, size["rows"], size["hidden"], draws)
        with original_kernel(spec["kernel"], numeric["original"]):
            original_bench = Bench(repo, spec)
            original = numeric_run(original_bench, size["rows"], size["hidden"], draws)
            reference = numeric_run(original_bench, size["rows"], size["hidden"], draws, dtype=torch.float32)
        checked.append((size["key"], compare(variant, original, reference, dtype)))
        del variant, original, reference, draws
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return checked


def ncu_target(spec: dict) -> None:
    """What Nsight Compute profiles: the liger layer's pass at one size, a few times, untimed."""
    import torch

    _paths(Path(spec["repo"]))
    bench = Bench(Path(spec["repo"]), spec)
    size = spec["sizes"][0]
    x, forward = bench.build("liger", size["rows"], size["hidden"])
    for _ in range(3):
        y = forward()
        y.backward(torch.randn_like(y))
        x.grad = None
    torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(argv[0]).read_text())
    if spec.get("ncu_only"):
        ncu_target(spec)
        return
    out_path = Path(argv[1])
    try:
        result = measure(spec)
    except Exception:
        result = {"error": traceback.format_exc()[-4000:]}
    out_path.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
