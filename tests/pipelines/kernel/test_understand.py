"""Understanding real ops: the tier, the lowered statements, and every bad input refused with its reason."""

import pytest
import torch

from pipelines.kernel import reference
from pipelines.kernel import spec
from pipelines.kernel import understand
from pipelines.kernel.understand import Tier
from pipelines.outcome import PipelineError


def _understand_source(tmp_path, source: str, qual: str):
    path = tmp_path / "op.py"
    path.write_text("import torch\n\n\n" + source)
    return understand.understand(spec.resolve(f"{path}:{qual}", tmp_path / "repo"), tmp_path / "repo")


def test_relu2_is_elementwise_and_backward_recomputes_from_x(tmp_path):
    u = understand.understand(spec.resolve("relu2", tmp_path), tmp_path)
    assert u.tier == Tier.ELEMENTWISE
    assert u.forward.loads == ["x"]
    assert set(u.backward.loads) == {"x", "dy"}  # only the input is saved: relu(x) is recomputed
    exprs = " ".join(s.expr for s in u.forward.stmts)
    assert "tl.maximum(x, 0.0)" in exprs
    assert "tl.log" not in exprs  # x**2 lowers to a product, not exp(2 log x)


def test_norm_with_weight_is_rowwise_with_runtime_eps_and_a_weight_gradient(tmp_path):
    u = _understand_source(
        tmp_path,
        "def my_norm(x, weight: torch.nn.Parameter, eps=1e-5):\n    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight\n",
        "my_norm",
    )
    assert u.tier == Tier.ROWWISE
    assert u.runtime_floats == ["eps"]
    assert [(w.name, w.init, w.scalar, w.learnable) for w in u.weights] == [("weight", "ones", False, True)]
    assert "dweight" in u.backward.col_sums
    assert any("n_cols" in s.expr for s in u.forward.stmts)  # the mean divides by the runtime width


def test_a_parameter_only_the_backward_shape_refers_to_is_not_loaded(tmp_path):
    # dbias = dy summed over rows, viewed to bias's size: the size is n_cols, bias itself is never read
    u = _understand_source(
        tmp_path,
        "def affine(x, weight: torch.nn.Parameter, bias: torch.nn.Parameter):\n    return x * weight + bias\n",
        "affine",
    )
    assert u.backward.col_sums["dbias"] == "dy"
    assert set(u.backward.loads) == {"x", "weight", "dy"}


def test_prelu_scalar_weight_gradient_is_a_whole_tensor_sum(tmp_path):
    u = understand.understand(spec.resolve("prelu", tmp_path), tmp_path)
    assert u.tier == Tier.ELEMENTWISE
    (weight,) = u.weights
    assert (weight.name, weight.state_key, weight.shape, weight.init, weight.learnable) == (
        "weight",
        "act.weight",
        (1,),
        "0.25",
        True,
    )
    assert "weight" in u.forward.loads
    (source,) = u.backward.totals.values()  # x * dy where x <= 0, summed over every element
    assert u.backward.scalar_stores == {"dweight": next(iter(u.backward.totals))}
    assert source in {s.var for s in u.backward.stmts}
    assert u.backward.epilogue == []


def test_xielu_buffers_are_runtime_scalars_and_softplus_backward_runs_after_the_sum(tmp_path):
    u = understand.understand(spec.resolve("xielu", tmp_path), tmp_path)
    assert u.tier == Tier.ELEMENTWISE
    assert [(w.name, w.learnable) for w in u.weights] == [
        ("alpha_p", True),
        ("alpha_n", True),
        ("beta", False),
        ("eps", False),
    ]
    assert set(u.backward.scalar_stores) == {"dalpha_p", "dalpha_n"}  # buffers get no gradient
    assert len(u.backward.totals) == 2
    epilogue = " ".join(s.expr for s in u.backward.epilogue)
    assert "tl.exp(" in epilogue and all(t in epilogue for t in u.backward.totals)
    assert set(u.backward.epilogue_loads) == {"alpha_p", "alpha_n"}


def test_a_whole_tensor_sum_feeding_an_elementwise_value_is_tier_3(tmp_path):
    u = _understand_source(tmp_path, "def f(x):\n    return x * x.sum()\n", "f")
    assert u.tier == Tier.COMPLEX
    assert "whole-tensor sum first" in u.refusal


def test_a_buffer_of_another_shape_is_refused(tmp_path):
    source = (
        "class Shifted(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.register_buffer('table', torch.zeros(3, 3))\n\n"
        "    def forward(self, x):\n        return x * 2 + self.table.sum()\n"
    )
    with pytest.raises(PipelineError, match=r"buffer table has shape \(3, 3\)"):
        _understand_source(tmp_path, source, "Shifted")


def test_cross_row_reduction_is_tier_3_with_the_reason(tmp_path):
    u = _understand_source(tmp_path, "def f(x):\n    return x - x.mean(0, keepdim=True)\n", "f")
    assert u.tier == Tier.COMPLEX
    assert "only the last dimension is row-wise" in u.refusal
    assert "tier-3 template" in u.refusal


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f(x):\n    if x.sum() > 0:\n        return x * 2\n    return x\n", "data-dependent Python control flow"),
        ("def f(x):\n    return (x > 0).long()\n", "integer/boolean"),
        ("def f(x):\n    return x.detach() * 2\n", "not differentiable"),
        ("def f(x):\n    return torch.round(x * 3)\n", "gradient is zero everywhere"),
        ("def f(x):\n    return x.sum(-1)\n", "tier 3"),
    ],
)
def test_bad_ops_are_refused_with_a_reason(tmp_path, source, message):
    with pytest.raises(PipelineError, match=message):
        _understand_source(tmp_path, source, "f")


def test_determinism_kept_restores_both_flags_a_target_test_module_changes():
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    with reference.determinism_kept():
        torch.use_deterministic_algorithms(not before[0], warn_only=not before[1])  # what test_rms_norm.py does
    assert (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    ) == before


@pytest.mark.parametrize("gate", ["b", "g", "weight"])
def test_a_functions_further_tensor_arguments_are_inputs_never_guessed_weights(tmp_path, gate):
    """`silu(a) * b` is Liger's SwiGLU core, two inputs: no name of the second one makes it a learnable (hidden,)
    weight (before, `b` started at zero and was refused as "not differentiable"; `g` was generated as a weight)."""
    source = f"def silu_gate_mul(a, {gate}):\n    return torch.nn.functional.silu(a) * {gate}\n"
    u = _understand_source(tmp_path, source, "silu_gate_mul")
    assert u.tier == Tier.ELEMENTWISE and u.weights == []
    assert [i.name for i in u.inputs] == ["a", gate] == u.reference.inputs
    assert set(u.forward.loads) == {"a", gate} and list(u.forward.stores) == ["Y"]
    assert set(u.backward.stores) == {"da", f"d{gate}"}  # each input's gradient, from dy and both saved inputs
    assert set(u.backward.loads) == {"a", gate, "dy"}
    assert u.backward.stores[f"d{gate}"] == next(s.var for s in u.backward.stmts if s.expr.startswith("(dy * "))


def test_an_input_spelled_like_a_template_variable_is_renamed_in_the_kernel(tmp_path):
    u = _understand_source(tmp_path, "def gate(x, mask):\n    return x * torch.sigmoid(mask)\n", "gate")
    assert [(i.name, i.var, i.grad_arg) for i in u.inputs] == [("x", "x0", "dx0"), ("mask", "x1", "dx1")]


def test_an_argument_the_code_declares_a_parameter_is_a_learnable_weight(tmp_path):
    source = "def silu_gate_mul(a, g: torch.nn.Parameter):\n    return torch.nn.functional.silu(a) * g\n"
    u = _understand_source(tmp_path, source, "silu_gate_mul")
    assert [(w.name, w.learnable) for w in u.weights] == [("g", True)]
    assert "dg" in u.backward.col_sums


def test_add_rms_norm_has_two_inputs_two_outputs_and_one_gradient_for_both(liger_checkout):
    text = "test/transformers/test_fused_add_rms_norm.py:LlamaAddRMSNorm"
    u = understand.understand(spec.resolve(text, liger_checkout.root), liger_checkout.root)
    assert u.tier == Tier.ROWWISE
    assert [i.name for i in u.inputs] == ["hidden_states", "residual"] and [o.arg for o in u.outputs] == ["Y0", "Y1"]
    assert u.forward.stores["Y1"] == next(s.var for s in u.forward.stmts if s.expr == "(hidden_states + residual)")
    # the sum feeds both inputs: one value, stored as each one's gradient
    assert u.backward.stores["dhidden_states"] == u.backward.stores["dresidual"]
    assert {"dy0", "dy1"} <= set(u.backward.loads) and "dweight" in u.backward.col_sums
    assert u.dropin.liger_class == "liger_kernel.transformers.fused_add_rms_norm.LigerFusedAddRMSNorm"
    assert dict(u.dropin.fixed) == {"offset": "0.0", "casting_mode": "'llama'", "init_fn": "'ones'"}
    assert u.dropin.functional.name == "liger_fused_add_rms_norm"
    assert u.dropin.functional.call() == "X, R, W, eps, offset, casting_mode, in_place"


def test_a_cross_row_sum_of_an_input_is_tier_3_and_not_called_a_parameter_gradient(tmp_path):
    u = _understand_source(tmp_path, "def f(a, b):\n    return torch.sigmoid(a) * b.sum(0, keepdim=True)\n", "f")
    assert u.tier == Tier.COMPLEX
    assert "a sum over the rows (dimension 0) is used inside the computation" in u.refusal
    assert "parameter gradient" not in u.refusal and "differentiable" not in u.refusal


def test_layer_norm_lowers_its_row_variance_and_reads_the_width_it_holds_as_n_cols(tmp_path):
    # torch.nn.LayerNorm holds normalized_shape, so the trace is specialised to the traced width (7): that number
    # is the runtime width, never a constant 7 in the kernel
    source = (
        "class TorchLayerNorm(torch.nn.LayerNorm):\n"
        "    def __init__(self, hidden_size, eps=1e-6):\n"
        "        super().__init__(hidden_size, eps=eps)\n"
    )
    u = _understand_source(tmp_path, source, "TorchLayerNorm")
    assert u.tier == Tier.ROWWISE and u.runtime_floats == ["eps"]
    statements = [s.expr for s in u.forward.stmts + u.backward.stmts]
    assert any(e.startswith("tl.sum(tl.where(mask, x - ") and e.endswith("/ n_cols") for e in statements)  # var
    assert not any("7.0" in e for e in statements)
    assert {"dweight", "dbias"} <= set(u.backward.col_sums)


def test_modulated_rms_norm_is_refused_for_its_broadcast_scale_and_shift(liger_checkout):
    # its scale / shift come in (hidden,), (B, hidden) and (B, T, hidden); at the probe's same shape the reference
    # takes its same-shape branch, so only the other shapes show the `modulation[:, None, :]` reshape
    text = "test/transformers/test_modulated_rms_norm.py:ModulatedRMSNormReference"
    u = understand.understand(spec.resolve(text, liger_checkout.root), liger_checkout.root)
    assert u.tier == Tier.COMPLEX and u.forward is None
    assert "broadcasts scale and shift to the shape of hidden_states" in u.refusal
    assert "scale given as (2, 33) gets `unsqueeze` ((2, 33) -> (2, 1, 33)) before `mul`" in u.refusal
    assert "shift (optional, default None) given as (2, 33) gets `unsqueeze`" in u.refusal
    assert "reads each broadcast input at its own shape" in u.refusal and "matmul" not in u.refusal


def test_an_input_reshaped_before_a_broadcast_is_refused_for_that_not_for_its_output_shape(tmp_path):
    # at the probe's same shape `scale.unsqueeze(1)` makes a (4, 4, 33) output: the reason is the unsqueeze
    u = _understand_source(tmp_path, "def f(x, scale):\n    return x * (1 + scale.unsqueeze(1))\n", "f")
    assert u.tier == Tier.COMPLEX
    assert "broadcasts scale to the shape of x" in u.refusal
    assert "scale given as (2, 33) gets `unsqueeze` ((2, 33) -> (2, 1, 33))" in u.refusal
    assert "(at the shape of x: it fails or changes the output's shape)" in u.refusal
    assert "maps shape" not in u.refusal


def test_a_shape_dependent_branch_on_an_optional_input_is_refused_naming_it(tmp_path):
    source = (
        "class Shifted(torch.nn.Module):\n"
        "    def forward(self, x, shift=None):\n"
        "        if shift is None:\n            return torch.sigmoid(x)\n"
        "        if shift.dim() == 2 and x.dim() == 3:\n            shift = shift[:, None, :]\n"
        "        return torch.sigmoid(x) + shift\n"
    )
    u = _understand_source(tmp_path, source, "Shifted")
    assert u.tier == Tier.COMPLEX
    assert "broadcasts shift to the shape of x" in u.refusal
    assert "shift (optional, default None) given as (2, 33) gets `unsqueeze`" in u.refusal
    assert "(at the shape of x: no reshape)" in u.refusal


@pytest.mark.parametrize(
    "source",
    [
        "def f(a, b):\n    return torch.sigmoid(a) * b\n",  # a (hidden,) b broadcasts implicitly: nothing reshaped
        # every input flattened the same way at every shape: a reshape, but not one a broadcast input gets
        "def f(a, b):\n    h = a.shape[-1]\n    return (torch.sigmoid(a.reshape(-1, h)) * b.reshape(-1, h)).reshape(a.shape)\n",
    ],
)
def test_an_input_the_reference_does_not_reshape_for_a_broadcast_is_not_refused_for_one(tmp_path, source):
    from pipelines.kernel import broadcast

    path = tmp_path / "op.py"
    path.write_text("import torch\n\n\n" + source)
    ref = reference.build(spec.resolve(f"{path}:f", tmp_path), tmp_path)
    module = reference.load_class(ref)()
    assert broadcast.find(module, ref, 33) == ""


def test_a_forwards_none_default_arguments_are_its_optional_inputs(tmp_path):
    path = tmp_path / "op.py"
    path.write_text(
        "import torch\n\n\nclass M(torch.nn.Module):\n"
        "    def forward(self, x, scale, shift=None, eps=1e-6):\n        return x * scale\n"
    )
    ref = reference.build(spec.resolve(f"{path}:M", tmp_path), tmp_path)
    assert ref.inputs == ["x", "scale"] and ref.optional_inputs == ["shift"]


RMS_NORM = "def my_norm(x, weight: torch.nn.Parameter, eps=1e-5):\n    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight\n"


def test_the_backward_loads_the_forwards_row_statistic_instead_of_reducing_again(tmp_path):
    # Liger's RMSNorm caches RSTD: a second reduction per row costs the backward's loop a cross-warp exchange
    u = _understand_source(tmp_path, RMS_NORM, "my_norm")
    [rstd] = u.backward.cached
    assert u.forward.cached == [rstd] and "tl.rsqrt" in next(s.expr for s in u.forward.stmts if s.var == rstd)
    assert all(s.var != rstd for s in u.backward.stmts)  # loaded, not computed
    assert not any("tl.sum(tl.where(mask, pow_1" in s.expr for s in u.backward.stmts)  # the mean of x*x is gone
    assert any("tl.sum(" in s.expr for s in u.backward.stmts)  # the gradient's own row sum stays


def test_layer_norm_caches_both_of_its_row_statistics(tmp_path):
    source = (
        "class TorchLayerNorm(torch.nn.LayerNorm):\n"
        "    def __init__(self, hidden_size, eps=1e-6):\n"
        "        super().__init__(hidden_size, eps=eps)\n"
    )
    u = _understand_source(tmp_path, source, "TorchLayerNorm")
    assert len(u.backward.cached) == 2 and u.forward.cached == u.backward.cached
    assert not any("tl.sum(tl.where(mask, x - " in s.expr for s in u.backward.stmts)  # no variance recomputed


def test_an_elementwise_op_caches_nothing(tmp_path):
    u = understand.understand(spec.resolve("relu2", tmp_path), tmp_path)
    assert u.backward.cached == [] and u.forward.cached == []
