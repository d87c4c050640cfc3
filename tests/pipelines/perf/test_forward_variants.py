"""The forward variants of the catalogue on Liger 0.8.5's own layer_norm and poly_norm: the looped forward's
structure, its numerics against the original kernel under TRITON_INTERPRET=1, where it refuses, and that the loop
tries forward variants only for a target they can change."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipelines.perf import catalogue as c
from pipelines.perf import pipeline
from pipelines.perf import rules as rules_mod
from pipelines.perf.pipeline import Loop
from pipelines.perf.pipeline import Options

ROOT = Path(__file__).resolve().parents[3]
LOOPED = {"chunk": 2048, "warps": 8, "from_block": 8192}


@pytest.fixture(scope="module")
def sources(liger_template) -> dict[str, str]:
    ops = liger_template / "src/liger_kernel/ops"
    return {k: (ops / f"{k}.py").read_text() for k in ("layer_norm", "poly_norm", "rms_norm", "softmax")}


def function(text: str, name: str) -> ast.FunctionDef:
    return next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)


def loops(func: ast.FunctionDef) -> list[ast.For]:
    return [n for n in func.body if isinstance(n, ast.For)]


def test_layer_norm_gets_one_pass_per_dependent_reduction_and_a_dispatch_by_row_width(sources):
    text = c.looped_forward(sources["layer_norm"], LOOPED)
    looped = function(text, "_layer_norm_forward_kernel_looped")
    passes = loops(looped)
    assert len(passes) == 3  # mean, then the variance (it reads the mean), then the outputs
    first, second, last = (ast.unparse(p) for p in passes)
    assert "row_acc_0 += X_f32" in first and "W_ptr" not in first and "tl.store" not in first
    assert "X_centered_masked * X_centered_masked" in second and "tl.store" not in second
    assert "tl.store(row_Y_ptr + col_offsets" in last and "tl.sum" not in last
    assert "mean = tl.sum(row_acc_0, axis=0) / n_cols" in ast.unparse(looped)
    # the original kernel stays, for rows below the threshold, and the launcher picks by BLOCK_SIZE
    assert ast.unparse(function(text, "_layer_norm_forward_kernel")) == ast.unparse(
        function(sources["layer_norm"], "_layer_norm_forward_kernel")
    )
    wrapper = ast.unparse(function(text, "layer_norm_forward"))
    assert "if BLOCK_SIZE >= _PERF_LOOPED_FROM_BLOCK:" in wrapper
    assert "BLOCK_SIZE=min(BLOCK_SIZE, _PERF_LOOPED_CHUNK)" in wrapper and "num_warps=_PERF_LOOPED_WARPS" in wrapper
    assert "_PERF_LOOPED_CHUNK = 2048" in text and "_PERF_LOOPED_FROM_BLOCK = 8192" in text
    # applied again (the next entry, on the best so far) it only sets the constants
    again = c.looped_forward(text, {"chunk": 4096, "warps": 8, "from_block": 8192})
    assert again.count("def _layer_norm_forward_kernel_looped") == 1 and "_PERF_LOOPED_CHUNK = 4096" in again
    # a later launch sweep leaves the looped launch's own settings alone
    swept = c.launch_table(text, {"table": {"forward": {16384: (8, 2)}}})
    assert "num_warps=_PERF_LOOPED_WARPS" in swept and swept.count("**_launch") == 1  # the narrow rows' launch only


def test_poly_norms_three_sums_share_one_pass(sources):
    looped = function(c.looped_forward(sources["poly_norm"], LOOPED), "_poly_norm_forward_kernel_looped")
    stats, outputs = loops(looped)
    accumulated = [line.strip() for line in ast.unparse(stats).splitlines() if "+=" in line]
    assert accumulated == [
        "row_acc_0 += X_pow3 * X_pow3",
        "row_acc_1 += X_pow2 * X_pow2",
        "row_acc_2 += X_pow1 * X_pow1",
    ]
    assert "tl.store(Y_ptr + col_offsets, Y_row, mask=mask)" in ast.unparse(outputs)


def test_the_looped_forward_refuses_kernels_it_would_get_wrong(sources):
    with pytest.raises(c.NotApplicable, match="tl.max"):  # a chunk's max is not the row's
        c.looped_forward(sources["softmax"], LOOPED)
    with pytest.raises(c.NotApplicable, match="an `if` at line"):  # the casting modes' branches
        c.looped_forward(sources["rms_norm"], LOOPED)
    no_tile = textwrap.dedent(
        """
        import triton
        import triton.language as tl


        @triton.jit
        def f_forward(x, n, BLOCK: tl.constexpr):
            tl.store(x + tl.program_id(0), tl.load(x))


        def launch(x):
            f_forward[(1,)](x, 1, BLOCK=32, num_warps=4)
        """
    )
    with pytest.raises(c.NotApplicable, match="row tile"):
        c.looped_forward(no_tile, LOOPED)


NUMERICS = textwrap.dedent(
    """
    import importlib.util, sys, torch
    from pipelines.perf import catalogue, interpret
    interpret.install()
    def load(name, text):
        path = f"{sys.argv[2]}/{name}.py"
        open(path, "w").write(text)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    torch.manual_seed(0)
    for kernel, forward, params in (("layer_norm", "layer_norm_forward", 200), ("poly_norm", "poly_norm_forward", 3)):
        text = open(f"{sys.argv[1]}/liger_kernel/ops/{kernel}.py").read()
        # every row takes the looped kernel here: 200 columns in four chunks of 64, the last one masked
        variant = catalogue.looped_forward(text, {"from_block": 1, "chunk": 64, "warps": 4})
        x = torch.randn(3, 200) + 0.5
        w, b = torch.randn(params), torch.randn(params if kernel == "layer_norm" else 1)
        want = getattr(load(f"original_{kernel}", text), forward)(x, w, b, 1e-6)
        got = getattr(load(f"looped_{kernel}", variant), forward)(x, w, b, 1e-6)
        compared = [(g, e) for g, e in zip(got, want) if isinstance(e, torch.Tensor)]
        for g, e in compared:
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
        print(kernel, "matches", len(compared))
    """
)


def test_the_looped_forwards_compute_what_the_originals_do_under_the_interpreter(liger_template, tmp_path):
    script = tmp_path / "numerics.py"
    script.write_text(NUMERICS)
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(liger_template / "src")]),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    proc = subprocess.run(
        [sys.executable, str(script), str(liger_template / "src"), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Y, X (the input back), Mean, RSTD for layer_norm; Y, X, RSTD for poly_norm
    assert proc.stdout.split("\n")[:2] == ["layer_norm matches 4", "poly_norm matches 3"]


def tried_entries(target_pass: str, text: str) -> tuple[list[str], list[str]]:
    """(titles tried, titles skipped as off target) when the structural loop runs for that target pass."""
    rules = rules_mod.Rules(target_pass, ("4096x16384",), max_variants=8, patience=99)
    loop = Loop(None, None, Options(target_pass=target_pass), None, print, rules, text)
    loop.texts["v0"] = text
    tried = []
    loop.try_variant = lambda title, *_: tried.append(title)
    loop.structural()
    off = [r.title for r in loop.records if r.skipped.startswith("changes the")]
    return tried, off


def test_the_loop_tries_forward_variants_only_where_they_can_change_the_target(sources):
    forward_titles = [e.title for e in c.CATALOGUE if "forward" in e.passes]
    tried, off = tried_entries("forward", sources["layer_norm"])
    assert tried == forward_titles and len(forward_titles) == 2
    assert off == [e.title for e in c.CATALOGUE if "forward" not in e.passes]
    tried, off = tried_entries("backward", sources["layer_norm"])
    assert not set(tried) & set(forward_titles) and off == forward_titles
    assert "dW over 2 programs per SM" in tried
    tried, off = tried_entries("full", sources["layer_norm"])
    assert off == [] and set(forward_titles) <= set(tried)
    assert pipeline.off_target_reason(c.CATALOGUE[0], "backward") == (
        "changes the forward pass only; the target is the backward pass"
    )
