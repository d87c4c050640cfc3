"""The kernel leave-one-out's cases: what a case's reference makes the engine write, run under TRITON_INTERPRET=1."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks import kernel_leave_one_out as kloo

# one process with TRITON_INTERPRET=1 from its start (triton.language's own jit functions are made at import): the
# engine writes the case's ops file, then Liger's test_correctness_silumul_with_multipliers runs on it in bf16
# (`_torch_silu_mul_ref` against LigerSiLUMulFunction.apply(a, b, gate, down); assert_close checks the dtype)
_RUN = """
import importlib.util, sys
from pathlib import Path
import pytest
import torch
from pipelines.kernel import act, spec, understand
text, root, name, tmp = sys.argv[1], Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
u = understand.understand(spec.resolve(text, root, name), root)
assert u.output_dtypes == ["input"], u.output_dtypes
assert u.runtime_floats == ["gate_multiplier", "down_multiplier"], u.runtime_floats
(tmp / "gen_ops.py").write_text(act.render_files(u)[str(act.KernelFiles.of(name).ops)])
loaded = importlib.util.spec_from_file_location("gen_ops", tmp / "gen_ops.py")
gen_ops = importlib.util.module_from_spec(loaded)
loaded.loader.exec_module(gen_ops)
function = next(getattr(gen_ops, n) for n in dir(gen_ops) if n.endswith("Function"))
torch.manual_seed(0)
a, b = (torch.randn(9, 7, 41, dtype=torch.bfloat16) for _ in range(2))
a1, b1, a2, b2 = (t.clone().requires_grad_(True) for t in (a, b, a, b))
y_ref = torch.nn.functional.silu(a1 * 0.7) * b1 * 1.3
y = function.apply(a2, b2, 0.7, 1.3)
torch.testing.assert_close(y_ref, y, atol=1e-1, rtol=1e-2)
grad = torch.randn_like(y_ref)
y_ref.backward(grad.clone())
y.backward(grad.clone())
torch.testing.assert_close(a1.grad, a2.grad, atol=1e-1, rtol=1e-2)
torch.testing.assert_close(b1.grad, b2.grad, atol=1e-1, rtol=1e-2)
print("ok")
"""


def test_the_swiglu_case_gives_liger_s_dtype_bf16_out_for_bf16_in_with_multipliers(liger_checkout, tmp_path):
    """The first H200 run: 6 bf16 cases of Liger's multipliers test failed on `bfloat16 != float32`, the case then
    pointing at the test file's `_ref_silu_mul`, an fp32 oracle (`a.float()`) the engine followed faithfully. The
    case's reference now returns the inputs' dtype, as LigerSiLUMulFunction does."""
    case = next(c for c in kloo.CASES if c.name == "loo_swiglu")
    text = str(kloo.ROOT / case.spec) if case.spec.startswith("benchmarks/") else case.spec
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join([str(kloo.ROOT), *sys.path])}
    argv = [sys.executable, "-c", _RUN, text, str(liger_checkout.root), case.name, str(tmp_path)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=kloo.ROOT, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


# dX into dY's storage (the H200's peak memory, RMSNorm 0.81x and SwiGLU 0.71x of Liger's, measured with the caller
# holding dy): with dy handed over as a model's next layer hands it (bench.HandedOver), in_place=True writes the first
# input's gradient into dy's buffer, in_place=False and a caller-held dy do not; every gradient against torch's
# both scripts below: the generated ops module of argv's reference loaded, with torch 2.11's use counts when asked
_GENERATED_OPS = """
import importlib.util, sys
from pathlib import Path
import pytest
import torch
from pipelines.kernel import act, bench, spec, understand
text, root, name, tmp, extra_refs = sys.argv[1], Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), int(sys.argv[5])
if extra_refs:  # torch 2.11 (the H200's): PyNode::apply keeps its own list of the gradients through the Python call
    counted = torch.Tensor._use_count
    torch.Tensor._use_count = lambda self: counted(self) + extra_refs
u = understand.understand(spec.resolve(text, root, name), root)
(tmp / "gen_ops.py").write_text(act.render_files(u)[str(act.KernelFiles.of(name).ops)])
loaded = importlib.util.spec_from_file_location("gen_ops", tmp / "gen_ops.py")
gen_ops = importlib.util.module_from_spec(loaded)
loaded.loader.exec_module(gen_ops)
function = next(getattr(gen_ops, n) for n in dir(gen_ops) if n.endswith("Function"))
"""
_IN_PLACE = (
    _GENERATED_OPS
    + """
torch.manual_seed(0)
shape = (3, 5, 64)
n_inputs = len(u.inputs)
weights = [torch.randn(shape[-1]).requires_grad_(True) for _ in u.weights]
def reference(xs, ws):
    if n_inputs == 2:
        return torch.nn.functional.silu(xs[0]) * xs[1]
    x = xs[0]
    return ws[0] * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
def call(xs, ws, in_place):
    extra = [1e-6] if ws else [1.0, 1.0]
    return function.apply(*xs, *ws, *extra, *([0.0, "llama"] if ws else []), in_place)
templates = [torch.randn(shape) for _ in range(n_inputs)]
dy = torch.randn(shape)
ref_xs = [t.clone().requires_grad_(True) for t in templates]
ref_ws = [w.detach().clone().requires_grad_(True) for w in weights]
reference(ref_xs, ref_ws).backward(dy)
for mode in ("handed over, in place", "handed over, not in place", "caller-held, in place"):
    xs = [t.clone().requires_grad_(True) for t in templates]
    ws = [w.detach().clone().requires_grad_(True) for w in weights]
    y = call(xs, ws, in_place=mode.endswith(", in place"))
    given = dy.clone()
    pointer = given.data_ptr()
    if mode.startswith("handed over"):
        box = [given]
        del given
        bench.HandedOver.apply(y, box).sum().backward()
    else:
        y.backward(given)
        assert torch.equal(given, dy), "the caller's dy was overwritten"
    for x, r in zip(xs + ws, ref_xs + ref_ws):
        torch.testing.assert_close(x.grad, r.grad, atol=1e-4, rtol=1e-4)
    print(mode, "shares dy:", xs[0].grad.data_ptr() == pointer)
"""
)


def _in_place_run(case_name: str, liger_checkout, tmp_path, extra_refs: int = 0) -> list[str]:
    case = next(c for c in kloo.CASES if c.name == case_name)
    text = str(kloo.ROOT / case.spec) if case.spec.startswith("benchmarks/") else case.spec
    path = [str(kloo.ROOT), str(liger_checkout.root / "src"), *sys.path]  # the row-wise ops import liger_kernel
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(path)}
    argv = [sys.executable, "-c", _IN_PLACE, text, str(liger_checkout.root), case.name, str(tmp_path), str(extra_refs)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=kloo.ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.splitlines()


_SHARED = ["handed over, in place shares dy: True", "handed over, not in place shares dy: False"]


def test_generated_rms_norm_writes_dx_into_a_handed_over_dy_in_place_only(liger_checkout, tmp_path):
    assert _in_place_run("loo_rms_norm_llama", liger_checkout, tmp_path) == [
        *_SHARED,
        "caller-held, in place shares dy: False",
    ]


def test_generated_swiglu_writes_da_into_a_handed_over_dy_in_place_only(liger_checkout, tmp_path):
    assert _in_place_run("loo_swiglu", liger_checkout, tmp_path) == [*_SHARED, "caller-held, in place shares dy: False"]


# The tenth H200 run (torch 2.11): peak memory unchanged although dy was handed over. torch 2.11's PyNode::apply keeps
# its C++ list of the incoming gradients alive through the Python backward (torch 2.13, here, clears it first), so a
# gradient autograd alone holds counts 2 there, and `use_count() == 1` never held on the GPU host. The kernels now
# compare with the count autograd itself holds, measured at import (_AUTOGRAD_REFS). Simulated here: every tensor
# counts one reference more, as every gradient handed to a Python backward does under torch 2.11.


def test_generated_rms_norm_reuses_a_handed_over_dy_when_autograd_holds_two_references(liger_checkout, tmp_path):
    assert _in_place_run("loo_rms_norm_llama", liger_checkout, tmp_path, extra_refs=1) == [
        *_SHARED,
        "caller-held, in place shares dy: False",
    ]


def test_generated_swiglu_reuses_a_handed_over_dy_when_autograd_holds_two_references(liger_checkout, tmp_path):
    assert _in_place_run("loo_swiglu", liger_checkout, tmp_path, extra_refs=1) == [
        *_SHARED,
        "caller-held, in place shares dy: False",
    ]


# In a model the activations are (batch, seq, hidden): dY then comes from the next Linear's backward as a view of its
# 2-D mm result, which `dY._base is None` refused. A view is overwritten where its base counts no more than when the
# view alone holds it (measured at import, _AUTOGRAD_BASE_REFS); a residual, or another view of the base (a hook's),
# keeps it. Not seen by any use count: a Python name holding dY itself or its base (one Python object counts once,
# however many names hold it), for 2-D dY as before; Liger's norms overwrite dY whoever holds it.
_THROUGH_LINEAR = (
    _GENERATED_OPS
    + """
decided, can_overwrite = [], gen_ops._can_overwrite
gen_ops._can_overwrite = lambda *args: decided.append(can_overwrite(*args)) or decided[-1]
torch.manual_seed(0)
shape, two = (3, 5, 64), len(u.inputs) == 2
def op(xs, ws, kernel):
    if not kernel:
        if two:
            return torch.nn.functional.silu(xs[0]) * xs[1]
        x = xs[0]
        return ws[0] * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    extra = [1e-6, 0.0, "llama"] if ws else [1.0, 1.0]
    return function.apply(*xs, *ws, *extra, True)
linear = torch.nn.Linear(64, 64)
templates = [torch.randn(shape) for _ in u.inputs]
weights = [torch.randn(64) for _ in u.weights]
for mode in ("after a Linear", "residual after a Linear", "a hook keeps another view of dY"):
    grads = []
    for kernel in (False, True):
        xs = [t.clone().requires_grad_(True) for t in templates]
        ws = [w.clone().requires_grad_(True) for w in weights]
        y = op(xs, ws, kernel)
        kept = []
        if mode == "a hook keeps another view of dY":
            y.register_hook(lambda g: kept.append((g.view(-1), g.clone().view(-1))))
        linear(xs[0] + y if mode.startswith("residual") else y).sum().backward()
        if kept:
            assert torch.equal(*kept[0]), "the view a hook keeps was overwritten"
        grads.append([x.grad for x in xs + ws])
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    print(mode, "overwrites dY:", decided[-1])
    decided.clear()
"""
)


def _through_linear(case_name: str, liger_checkout, tmp_path, extra_refs: int) -> list[str]:
    case = next(c for c in kloo.CASES if c.name == case_name)
    text = str(kloo.ROOT / case.spec) if case.spec.startswith("benchmarks/") else case.spec
    path = [str(kloo.ROOT), str(liger_checkout.root / "src"), *sys.path]
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(path)}
    argv = [sys.executable, "-c", _THROUGH_LINEAR, text, str(liger_checkout.root), case.name, str(tmp_path)]
    proc = subprocess.run([*argv, str(extra_refs)], capture_output=True, text=True, env=env, cwd=kloo.ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.splitlines()


_LINEAR = [
    "after a Linear overwrites dY: True",
    "residual after a Linear overwrites dY: False",
    "a hook keeps another view of dY overwrites dY: False",
]


@pytest.mark.parametrize("extra_refs", [0, 1], ids=["torch 2.13", "torch 2.11's engine"])
@pytest.mark.parametrize("case_name", ["loo_rms_norm_llama", "loo_swiglu"])
def test_generated_kernels_overwrite_a_3d_dy_from_the_next_linear_unless_shared(
    case_name, extra_refs, liger_checkout, tmp_path
):
    assert _through_linear(case_name, liger_checkout, tmp_path, extra_refs) == _LINEAR


def test_prepare_with_skip_tests_still_leaves_the_swapped_test_the_combined_branch_carries(
    liger_checkout, tmp_path, monkeypatch
):
    # the eleventh session's restricted rerun (`prepare DEST CASE ... --skip-tests`) died in combine: the swapped
    # file was written only when Liger's test ran on the CPU
    dest = tmp_path / "kloo"
    (dest / "work").mkdir(parents=True)
    liger_checkout.root.rename(dest / "work" / "lk")
    made = []
    monkeypatch.setattr(kloo, "generate", lambda case, *a: made.append(case.name) or {"branch": "main", "tier": 2})
    monkeypatch.setattr(kloo, "liger_test", lambda *a, **k: pytest.fail("--skip-tests ran Liger's test"))
    combined = []
    monkeypatch.setattr(kloo, "combine", lambda checkout, rows, d: combined.append(sorted(rows)) or [])
    kloo.prepare(dest, ["loo_rms_norm_llama", "loo_swiglu"], ["liger-bot"], skip_tests=True)
    assert made == ["loo_rms_norm_llama", "loo_swiglu"] and combined == [["loo_rms_norm_llama", "loo_swiglu"]]
    for name, op in (("loo_rms_norm_llama", "rms_norm"), ("loo_swiglu", "swiglu")):
        text = (dest / "swapped" / name / f"test_{op}_loo.py").read_text()
        assert f"from liger_kernel.transformers.{name} import" in text or f"liger_kernel.ops.{name} import" in text
