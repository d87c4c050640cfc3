"""End to end on a real Liger-Kernel checkout: generated files pass the target's ruff and their own tests (CPU,
TRITON_INTERPRET=1); the GPU gates SKIP here; bad input leaves the checkout untouched."""

import ast
import io

import pytest
import torch

from bot.cli import program
from pipelines import render
from pipelines.kernel import act
from pipelines.kernel import pipeline
from pipelines.kernel import spec
from pipelines.kernel import understand
from pipelines.outcome import ExitStatus
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError

GEMMA_RMS_NORM = """import torch
import torch.nn as nn


class GemmaRMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)
"""


def _statuses(run):
    return {g.name: g.status for g in run.gates}


@pytest.mark.slow
def test_a_kernel_the_target_has_under_another_name_is_refused_by_running_both(liger_checkout):
    """relu2 is Liger's LigerReLUSquared: found by running the two side by side, not by their names."""
    head = liger_checkout.git.head()
    lines = []
    with pytest.raises(PipelineError) as error:
        pipeline.run("relu2", liger_checkout.root, progress=lines.append)
    assert "liger_kernel.transformers.relu_squared.LigerReLUSquared" in error.value.message
    assert "--force" in error.value.hint
    assert any(line.startswith("compared with ") for line in lines)
    assert liger_checkout.git.head() == head and liger_checkout.git.dirty_paths() == []
    assert liger_checkout.git.current_branch() == "main"


@pytest.mark.slow
def test_xielu_with_learnable_scalars_and_buffers_end_to_end(liger_checkout):
    run = pipeline.run("xielu", liger_checkout.root, progress=lambda _: None)  # the default out: beside the checkout
    assert liger_checkout.git.dirty_paths() == []  # before, out/kernel/xielu/pr_body.md made the next command refuse
    assert "| checkstyle |" in liger_checkout.beside("kernel-xielu").joinpath("pr_body.md").read_text()
    statuses = _statuses(run)
    assert statuses["checkstyle"] is GateStatus.PASS, run.gates
    assert statuses["unit tests (CPU, TRITON_INTERPRET=1)"] is GateStatus.PASS, run.gates
    module = liger_checkout.path("src/liger_kernel/transformers/xielu.py").read_text()
    assert "self.alpha_p = nn.Parameter(torch.full((1,)," in module
    assert 'self.register_buffer("beta", torch.full((), 0.5))' in module
    ops = liger_checkout.path("src/liger_kernel/ops/xielu.py").read_text()
    assert "_xielu_scalar_grads_kernel" in ops


def test_tier_3_is_refused_and_the_target_untouched(liger_checkout):
    op = liger_checkout.root.parent / "centered.py"
    op.write_text("import torch\n\n\ndef centered(x):\n    return x - x.mean(0, keepdim=True)\n")
    head = liger_checkout.git.head()
    err = io.StringIO()
    status = program(["kernel", f"{op}:centered", "--repo", str(liger_checkout.root)], {}, out=io.StringIO(), err=err)
    assert status is ExitStatus.REFUSED
    assert "tier 3" in err.getvalue() and "only the last dimension is row-wise" in err.getvalue()
    assert liger_checkout.git.head() == head
    assert liger_checkout.git.dirty_paths() == []


@pytest.mark.slow
def test_rowwise_norm_from_a_repo_file(liger_checkout, tmp_path):
    # the Gemma RMSNorm of the target's test_rms_norm.py (offset 1, fp32 compute), committed as a repo file:
    # importing that test module inside this pytest run trips our --strict-markers on its flaky marks
    liger_checkout.path("src/liger_kernel/reference_norms.py").write_text(GEMMA_RMS_NORM)
    liger_checkout.git.commit_all("a reference norm")
    run = pipeline.run(
        "src/liger_kernel/reference_norms.py:GemmaRMSNorm",
        liger_checkout.root,
        out_dir=tmp_path,
        progress=lambda _: None,
    )
    assert _statuses(run)["unit tests (CPU, TRITON_INTERPRET=1)"] is GateStatus.PASS, run.gates
    ops = liger_checkout.path("src/liger_kernel/ops/gemma_rms_norm.py").read_text()
    assert "dweight_acc +=" in ops and "ctx.save_for_backward(X, weight, rsqrt_rows)" in ops
    assert "rsqrt = tl.load(rsqrt_rows_ptr + row_idx)" in ops  # the forward's rstd, as Liger's RSTD, not recomputed


def test_every_kernel_template_renders_and_parses(liger_checkout):
    used = set()
    op = liger_checkout.root.parent / "norm.py"
    op.write_text(
        "import torch\n\n\ndef norm(x, weight: torch.nn.Parameter, eps=1e-6):\n    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight\n"
    )
    for text in ("relu2", f"{op}:norm"):
        u = understand.understand(spec.resolve(text, liger_checkout.root), liger_checkout.root)
        for path, source in act.render_files(u).items():
            ast.parse(source, filename=path)
            if "/ops/" in path:  # both ops templates include kernel/_can_overwrite.py.j2
                assert "def _can_overwrite(" in source and "_AUTOGRAD_REFS, _AUTOGRAD_BASE_REFS = " in source
        for path, source in act.edit_existing(liger_checkout, u).items():
            ast.parse(source, filename=path)
        used |= {"kernel/ops_elementwise.py.j2" if u.tier == 1 else "kernel/ops_rowwise.py.j2"}
    used |= {"kernel/module.py.j2", "kernel/unit_test.py.j2", "kernel/benchmark.py.j2", "kernel/exports.py.j2"}
    used |= {"kernel/functional_fn.py.j2", "kernel/_scalar_grads_kernel.py.j2"}  # included by both ops templates
    used |= {"kernel/_can_overwrite.py.j2"}
    used |= {"kernel/tier3_test.py.j2"}  # the provider's tier-3 drafts: rendered by tests/bot/test_tier3_flow.py
    assert {t for t in render.template_names() if t.startswith("kernel/")} == used


def test_a_benchmark_whose_reference_comes_from_the_targets_tests_turns_determinism_back_off(liger_checkout):
    # Liger's test_rms_norm.py calls torch.use_deterministic_algorithms(True) at import; in that mode every
    # torch.empty the kernel makes fills its memory first, and the benchmark would time that write
    before = torch.are_deterministic_algorithms_enabled()
    benchmarks = {}
    for text in ("test/transformers/test_rms_norm.py:LlamaRMSNorm", "relu2"):
        u = understand.understand(spec.resolve(text, liger_checkout.root, "norm_probe"), liger_checkout.root)
        benchmarks[text] = next(src for path, src in act.render_files(u).items() if "benchmark/scripts" in path)
    assert torch.are_deterministic_algorithms_enabled() == before
    from_tests = benchmarks["test/transformers/test_rms_norm.py:LlamaRMSNorm"]
    assert "from test.transformers.test_rms_norm import LlamaRMSNorm" in from_tests
    assert "device = infer_device()\n\n# the reference's test module" in from_tests
    assert "torch.use_deterministic_algorithms(False)" in from_tests
    assert "use_deterministic_algorithms" not in benchmarks["relu2"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["does_not_exist"], "not a transformers activation"),
        (["relu2", "--name", "relu_squared"], "exists already"),
        (["relu2", "--name", "Bad-Name"], "not a valid kernel name"),
        (["src/liger_kernel/ops/utils.py:calculate_settings"], "fails on a"),
    ],
)
def test_bad_input_is_refused_and_the_target_untouched(liger_checkout, argv, message):
    head = liger_checkout.git.head()
    err = io.StringIO()
    status = program(["kernel", *argv, "--repo", str(liger_checkout.root)], {}, out=io.StringIO(), err=err)
    assert status is ExitStatus.REFUSED
    assert message in err.getvalue()
    assert liger_checkout.git.head() == head
    assert liger_checkout.git.current_branch() == "main"
    assert liger_checkout.git.dirty_paths() == []


@pytest.mark.slow
def test_dyt_a_row_wise_op_with_a_scalar_parameter_end_to_end(liger_checkout):
    """Liger's own DyT reference (test_dyt.py:TorchDyT): a scalar alpha beside (hidden,) gamma and beta. Before, tier 3
    ("one-element parameters in a row-wise op"); now alpha's gradient is a whole-tensor sum of per-program partials."""
    run = pipeline.run(
        "test/transformers/test_dyt.py:TorchDyT",
        liger_checkout.root,
        "dyt_generated",
        progress=lambda _: None,
        force=True,
    )
    statuses = _statuses(run)
    assert statuses["checkstyle"] is GateStatus.PASS, run.gates
    assert statuses["unit tests (CPU, TRITON_INTERPRET=1)"] is GateStatus.PASS, run.gates
    ops = liger_checkout.path("src/liger_kernel/ops/dyt_generated.py").read_text()
    assert "_dyt_generated_scalar_grads_kernel" in ops and "alpha = tl.load(alpha_ptr)" in ops
    assert "return dX.detach(), dalpha, _dgamma.sum(dim=0)" in ops


def test_an_out_folder_inside_the_checkout_is_refused_before_anything_is_written(liger_checkout):
    head = liger_checkout.git.head()
    with pytest.raises(PipelineError, match="inside the target checkout"):
        pipeline.run("relu6", liger_checkout.root, out_dir=liger_checkout.root / "out", progress=lambda _: None)
    assert liger_checkout.git.head() == head and liger_checkout.git.dirty_paths() == []


SILU_GATE_MUL = "import torch\n\n\ndef silu_gate_mul(a, b):\n    return torch.nn.functional.silu(a) * b\n"


@pytest.mark.slow
def test_a_two_input_op_the_target_has_as_a_function_is_refused_by_running_both(liger_checkout):
    """silu(a) * b is Liger's liger_swiglu(a, b): found among the functional API by running both on two inputs."""
    op = liger_checkout.root.parent / "gate.py"
    op.write_text(SILU_GATE_MUL)
    lines = []
    with pytest.raises(PipelineError) as error:
        pipeline.run(f"{op}:silu_gate_mul", liger_checkout.root, progress=lines.append)
    assert "liger_kernel.transformers.functional.liger_swiglu" in error.value.message
    assert any("on 2-input calls" in line for line in lines)
    assert liger_checkout.git.dirty_paths() == [] and liger_checkout.git.current_branch() == "main"


@pytest.mark.slow
def test_fused_add_rms_norm_from_ligers_own_reference_end_to_end(liger_checkout):
    """Liger's test_fused_add_rms_norm.py:LlamaAddRMSNorm: two inputs, two outputs (the norm and the sum), a (hidden,)
    weight whose gradient is a column sum; the module takes LigerFusedAddRMSNorm's constructor (drop-in)."""
    # --force: LigerFusedAddRMSNorm's kernel (libdevice rsqrt) does not run under this interpreter, so the duplicate
    # check could not compare the two here anyway (it says so); skipping it keeps this test's time down
    run = pipeline.run(
        "test/transformers/test_fused_add_rms_norm.py:LlamaAddRMSNorm",
        liger_checkout.root,
        progress=lambda _: None,
        force=True,
    )
    statuses = _statuses(run)
    assert statuses["checkstyle"] is GateStatus.PASS, run.gates
    assert statuses["unit tests (CPU, TRITON_INTERPRET=1)"] is GateStatus.PASS, run.gates
    module = liger_checkout.path("src/liger_kernel/transformers/llama_add_rms_norm.py").read_text()
    assert "def __init__(self, hidden_size, eps=1e-06, offset=0.0, casting_mode=" in module
    assert "def forward(self, hidden_states, residual):" in module
    ops = liger_checkout.path("src/liger_kernel/ops/llama_add_rms_norm.py").read_text()
    assert "return Y0.view(*shape), Y1.view(*shape)" in ops and "dweight_acc +=" in ops
    functional = liger_checkout.path("src/liger_kernel/transformers/functional.py").read_text()
    # liger_fused_add_rms_norm's arguments: Liger's own test of the op runs against this kernel by swapping imports
    assert 'def liger_llama_add_rms_norm(X, R, W, eps, offset=0.0, casting_mode="llama", in_place=True):' in functional
    assert 'if [offset, casting_mode] != [0.0, "llama"]:' in ops


@pytest.mark.slow
def test_poly_norm_a_small_weight_read_element_by_element_end_to_end(liger_checkout):
    """Liger's test_poly_norm.py:NaivePolyNorm: a (3,) weight used as weight[0], weight[1], weight[2] (before,
    refused: "weight has shape (3,)"); its gradient is three whole-tensor sums stored element by element."""
    run = pipeline.run(
        "test/transformers/test_poly_norm.py:NaivePolyNorm", liger_checkout.root, progress=lambda _: None, force=True
    )
    statuses = _statuses(run)
    assert statuses["checkstyle"] is GateStatus.PASS, run.gates
    assert statuses["unit tests (CPU, TRITON_INTERPRET=1)"] is GateStatus.PASS, run.gates
    ops = liger_checkout.path("src/liger_kernel/ops/naive_poly_norm.py").read_text()
    assert "tl.load(weight_ptr + 2).to(tl.float32)" in ops and "tl.store(dweight_ptr + 2, " in ops
    module = liger_checkout.path("src/liger_kernel/transformers/naive_poly_norm.py").read_text()
    assert "self.weight = nn.Parameter(torch.full((3,), 0.3333333432674408))" in module
    functional = liger_checkout.path("src/liger_kernel/transformers/functional.py").read_text()
    assert "def liger_naive_poly_norm(X, W, B, eps=1e-06, in_place=True):" in functional  # liger_poly_norm's
