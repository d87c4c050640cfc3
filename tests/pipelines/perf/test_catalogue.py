"""The catalogue's rewrites on Liger 0.8.5's own fused_add_rms_norm and rms_norm: where they edit, where they refuse,
and that the rewritten kernels still pass the target's unit tests under TRITON_INTERPRET=1."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipelines.perf import catalogue as c

ROOT = Path(__file__).resolve().parents[3]
KERNELS = ("fused_add_rms_norm", "rms_norm")


@pytest.fixture(scope="module")
def sources(liger_template) -> dict[str, str]:
    return {k: (liger_template / f"src/liger_kernel/ops/{k}.py").read_text() for k in KERNELS}


def launch_keywords(text: str) -> dict[str, list[str]]:
    tree = ast.parse(text)
    out: dict[str, list[str]] = {}
    for _, call in c._launches(tree):
        out.setdefault(call.func.value.id, []).append(",".join(sorted(k.arg or "**" for k in call.keywords)))
    return out


def test_the_launch_table_reaches_every_launch_and_a_second_sweep_only_changes_the_table(sources):
    text = c.launch_table(sources["rms_norm"], {"table": {"backward": {16384: (8, 3)}}, "gpu": "H200"})
    keywords = launch_keywords(text)
    assert len(keywords) == 4 and all("num_warps" not in k for ks in keywords.values() for k in ks)
    assert text.count('_launch = _perf_launch("backward", BLOCK_SIZE, num_warps=num_warps)') == 2
    assert text.count('_launch = _perf_launch("forward", BLOCK_SIZE, num_warps=num_warps)') == 2
    assert '_PERF_LAUNCH = {"forward": {}, "backward": {16384: (8, 3)}}' in text
    namespace: dict = {}
    helper = [n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == "_perf_launch"]
    exec(
        compile(ast.Module(helper, []), "helper", "exec"),
        {"_PERF_LAUNCH": {"backward": {16384: (8, 3)}, "forward": {}}},
        namespace,
    )
    perf_launch = namespace["_perf_launch"]
    assert perf_launch("backward", 16384, num_warps=16) == {"num_warps": 8, "num_stages": 3}
    assert perf_launch("backward", 4096, num_warps=8, num_stages=2) == {"num_warps": 8, "num_stages": 2}
    assert perf_launch("forward", 16384, num_warps=16) == {"num_warps": 16}
    again = c.launch_table(text, {"table": {"forward": {4096: (16, None)}}})
    assert again.count("def _perf_launch") == 1 and '"forward": {4096: (16, None)}' in again


def test_the_fused_kernels_num_stages_moves_into_the_launch_helper(sources):
    text = c.launch_table(sources["fused_add_rms_norm"], {"table": {}})
    keywords = launch_keywords(text)
    assert all("num_stages" not in k and "num_warps" not in k for ks in keywords.values() for k in ks)
    assert text.count("num_warps=num_warps, num_stages=num_stages)") == 2
    ast.parse(text)


def test_programs_per_sm_sizes_the_grid_the_rows_and_the_dW_partials_alike(sources):
    text = c.programs_per_sm(sources["rms_norm"], {"k": 2})
    wrapper = text.split("def rms_norm_backward")[1].split("\nclass ")[0]
    assert "n_programs = sm_count * _PERF_PROGRAMS_PER_SM" in wrapper
    after = wrapper.split("n_programs = sm_count")[1]
    assert "sm_count" not in after.replace("_PERF_PROGRAMS_PER_SM", "")
    assert "(n_programs, n_cols)" in after and "grid = (n_programs,)" in after and "n_rows / n_programs" in after
    assert "_PERF_PROGRAMS_PER_SM = 4" in c.programs_per_sm(text, {"k": 4})


def test_rewrites_that_do_not_fit_say_why(sources):
    with pytest.raises(c.NotApplicable, match="optional gradient"):
        c.unused_grad_none(sources["rms_norm"], {})
    with pytest.raises(c.NotApplicable, match="zeros_like"):
        c.empty_dx(sources["fused_add_rms_norm"], {})
    with pytest.raises(c.NotApplicable, match="already loads the rstd"):
        c.keep_rstd(sources["rms_norm"], {})
    piped = c.pipelined_rows(sources["rms_norm"], {"stages": 2})
    assert piped.count("tl.range(") == 2
    with pytest.raises(c.NotApplicable, match="tl.range already"):
        c.pipelined_rows(piped, {"stages": 3})
    with pytest.raises(c.NotApplicable, match="sm_count"):
        c.programs_per_sm("import triton\n\n\n@triton.jit\ndef k(x):\n    pass\n", {"k": 2})


def test_unused_gradients_become_none_and_the_launcher_copes(sources):
    text = c.unused_grad_none(sources["fused_add_rms_norm"], {})
    assert "ctx.set_materialize_grads(False)" in text
    assert "dS_out = dS_out.view(-1, dim) if dS_out is not None else None" in text
    assert "dS_out if dS_out is not None else dY," in text and "if dY is None:" in text
    with pytest.raises(c.NotApplicable, match="already"):
        c.unused_grad_none(text, {})


def stacked(text: str) -> str:
    """Every entry that applies, one on top of the other (as the loop builds on its best), after a launch table."""
    text = c.launch_table(text, {"table": {"forward": {64: (4, 1)}, "backward": {64: (4, 2), 128: (8, None)}}})
    for entry in c.CATALOGUE:
        try:
            text = entry.rewrite(text, entry.params)
        except c.NotApplicable:
            pass
    return text


INTERPRETER_TESTS = (
    "dtype0 and (9-7-41 or (test_correctness and False-False-LlamaRMSNorm and 5-123-123) "
    "or (test_correctness and False-GemmaAddRMSNorm and 5-123-123))"
)

ONLY_Y_USED = textwrap.dedent(
    """
    import torch
    from liger_kernel.ops import LigerFusedAddRMSNormFunction
    torch.manual_seed(0)
    x = torch.randn(37, 64, requires_grad=True)
    r = torch.randn(37, 64, requires_grad=True)
    w = torch.randn(64, requires_grad=True)
    y, s = LigerFusedAddRMSNormFunction.apply(x, r, w, 1e-6, 0.0, "llama", False)
    (y * y).sum().backward()  # the residual output s is not used: its gradient arrives as None
    xs, rs, ws = (t.detach().clone().requires_grad_() for t in (x, r, w))
    h = xs + rs
    ref = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * ws
    (ref * ref).sum().backward()
    for got, want in ((x.grad, xs.grad), (r.grad, rs.grad), (w.grad, ws.grad)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    print("only-y ok")
    """
)


ONLY_Y_TEST = "test/transformers/test_liger_bot_only_y.py"  # ONLY_Y_USED, run as a test of the same pytest run
ONLY_Y_FILE = textwrap.dedent(
    """
    from pipelines.perf import interpret


    def test_only_y_used(capsys):
        interpret.install()
        exec(compile(SCRIPT, "only_y.py", "exec"), {"__name__": "__main__"})
        assert "only-y ok" in capsys.readouterr().out
    """
)


@pytest.fixture(scope="module")
def interpreter_run(tmp_path_factory, liger_template):
    """Both interpreter tests' rewritten kernels (KERNELS and ISSUE_12_KERNELS) in one checkout, their unit tests and
    ONLY_Y_USED in ONE pytest child (the child's torch + transformers + Liger start was most of each test's time):
    each test below reads its own files' cases from the JUnit report, each selected by its own -k as before."""
    from xml.etree import ElementTree

    from pipelines import target

    checkout = target.fetch(tmp_path_factory.mktemp("interpreter") / "liger-kernel")
    for kernel in (*KERNELS, *ISSUE_12_KERNELS):
        path = checkout.path(f"src/liger_kernel/ops/{kernel}.py")
        path.write_text(stacked(path.read_text()))
    checkout.path(ONLY_Y_TEST).write_text(f"SCRIPT = {ONLY_Y_USED!r}\n{ONLY_Y_FILE}")
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONPATH": os.pathsep.join([str(checkout.root / "src"), str(checkout.root), str(ROOT)]),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    # -k sees each case's file name among its keywords: each file's cases are selected by its own test's expression
    first = " or ".join(f"test_{k}.py" for k in KERNELS)
    issue_12 = " or ".join(f"test_{k}.py" for k in ISSUE_12_KERNELS)
    select = f"(({first}) and ({INTERPRETER_TESTS})) or (({issue_12}) and ({ISSUE_12_TESTS})) or test_only_y_used"
    tests = [f"test/transformers/test_{k}.py" for k in (*KERNELS, *ISSUE_12_KERNELS)] + [ONLY_Y_TEST]
    junit = tmp_path_factory.mktemp("junit") / "interpreter.xml"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pipelines.perf.interpret"]
    proc = subprocess.run(
        [*argv, f"--junitxml={junit}", *tests, "-k", select],
        cwd=checkout.root,
        env=env,
        capture_output=True,
        text=True,
    )
    cases: dict[str, list[str]] = {}  # file stem -> each case's outcome
    for case in ElementTree.parse(junit).getroot().iter("testcase") if junit.is_file() else ():
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        cases.setdefault(case.get("classname", "").rsplit(".", 1)[-1], []).append(outcome)
    return checkout, proc, cases


def outcomes(cases: dict[str, list[str]], stems) -> list[str]:
    return [outcome for stem in stems for outcome in cases.get(stem, [])]


@pytest.mark.slow
def test_the_rewritten_kernels_pass_the_targets_unit_tests_under_the_interpreter(interpreter_run):
    checkout, proc, cases = interpreter_run
    fused = checkout.path("src/liger_kernel/ops/fused_add_rms_norm.py").read_text()
    assert "set_materialize_grads(False)" in fused and "tl.range(" in fused and "n_programs" in fused
    assert "W_row reloaded per row" in fused
    assert outcomes(cases, [f"test_{k}" for k in KERNELS]) == ["passed"] * 10, proc.stdout[-3000:]
    assert cases.get("test_liger_bot_only_y") == ["passed"], proc.stdout[-3000:]


def test_reload_weight_moves_the_weight_load_into_every_backward_row_loop(sources):
    text = c.reload_weight(sources["rms_norm"], {})
    tree = ast.parse(text)
    for kernel in (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.endswith("backward_kernel")):
        loop = next(n for n in kernel.body if isinstance(n, ast.For))
        assert not any(c._assigns(n, "W_row") for n in kernel.body if n.lineno < loop.lineno), kernel.name
        assert c._assigns(loop.body[0], "W_row"), kernel.name
    forward = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_rms_norm_forward_kernel")
    assert ast.unparse(forward) in ast.unparse(ast.parse(sources["rms_norm"]))  # forwards untouched
    with pytest.raises(c.NotApplicable, match="W_row"):
        c.reload_weight(text, {})


ISSUE_12_KERNELS = ("layer_norm", "poly_norm", "softmax")  # benchmarks/perf_gpu.sh's default run
APPLIES = {  # what the catalogue can do to each, read from the kernel's structure
    "layer_norm": {"launch_table", "programs_per_sm", "pipelined_rows", "looped_forward"},
    "poly_norm": {"launch_table", "programs_per_sm", "pipelined_rows", "empty_dx", "looped_forward"},
    "softmax": {"launch_table"},
}


def applying(text: str) -> set[str]:
    keys = set()
    entries = [*c.CATALOGUE, c.Entry("launch_table", "", "", "", c.launch_table, {"table": {}})]
    for entry in entries:
        try:
            entry.rewrite(text, entry.params)
        except c.NotApplicable:
            continue
        keys.add(entry.key)
    return keys


@pytest.fixture(scope="module")
def issue_12_sources(liger_template) -> dict[str, str]:
    return {k: (liger_template / f"src/liger_kernel/ops/{k}.py").read_text() for k in ISSUE_12_KERNELS}


def test_the_catalogue_reaches_layer_norm_poly_norm_and_softmax_by_their_structure(issue_12_sources):
    assert {k: applying(text) for k, text in issue_12_sources.items()} == APPLIES
    poly = c.programs_per_sm(issue_12_sources["poly_norm"], {"k": 2})
    wrapper = poly.split("def poly_norm_backward")[1].split("\nclass ")[0]
    assert "(n_programs, 3)" in wrapper and "(n_programs,)" in wrapper and "n_rows / n_programs" in wrapper
    assert "dX = torch.empty_like(dY)" in c.empty_dx(issue_12_sources["poly_norm"], {})
    softmax = c.launch_table(issue_12_sources["softmax"], {"table": {}})
    keywords = launch_keywords(softmax)  # all four launches, single- and multi-block, take the table's settings
    assert len(keywords) == 4 and all("num_warps" not in k and "**" in k for ks in keywords.values() for k in ks)


# fp32 cases of each file: layer_norm's non-power-of-two 1500 columns, poly_norm's odd 123 and 41, softmax's
# single-block 2x8 and multi-block 1x4096 rows
ISSUE_12_TESTS = "dtype0 and (2-8-64 or 1-1-1500 or 5-123-123 or 9-7-41 or shape0 or shape4)"


@pytest.mark.slow
def test_the_rewritten_layer_norm_poly_norm_and_softmax_pass_their_unit_tests_under_the_interpreter(interpreter_run):
    checkout, proc, cases = interpreter_run
    for kernel in ISSUE_12_KERNELS:  # the stacked rewrites are what ran
        text = checkout.path(f"src/liger_kernel/ops/{kernel}.py").read_text()
        assert "_PERF_LAUNCH = " in text, kernel
    assert outcomes(cases, [f"test_{k}" for k in ISSUE_12_KERNELS]) == ["passed"] * 9, proc.stdout[-1500:]
