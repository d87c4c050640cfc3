"""Drop-in signatures for the target's own references: switches that leave a parameter out, and the values the
target's test pairs with each reference (so Liger's own unit test runs against the generated kernel)."""

import ast

from pipelines.kernel import act
from pipelines.kernel import dropin
from pipelines.kernel import spec
from pipelines.kernel import understand


def _understand(checkout, text: str, name: str):
    return understand.understand(spec.resolve(text, checkout.root, name), checkout.root)


def test_dyt_beta_is_optional_at_zero_and_the_drop_in_takes_the_switch(liger_checkout):
    dyt = _understand(liger_checkout, "test/transformers/test_dyt.py:TorchDyT", "dyt2")
    assert [(w.name, w.optional, w.neutral) for w in dyt.weights] == [
        ("alpha", "", 0.0),
        ("gamma", "", 0.0),
        ("beta", "beta", 0.0),  # gamma * tanh(alpha x) + beta: without beta is beta = 0
    ]
    assert "beta" not in dict(dyt.dropin.fixed) and "beta=True" in dyt.dropin.signature()


def test_gemma_rms_norm_weight_is_optional_at_zero_and_fixed_parameters_take_the_tests_pairing(liger_checkout):
    u = _understand(liger_checkout, "test/transformers/test_rms_norm.py:GemmaRMSNorm", "gemma2")
    # x * (1 + w): without the weight is w = 0, not its init (ones); Llama's w * x would be w = 1
    assert [(w.name, w.optional, w.neutral) for w in u.weights] == [("weight", "elementwise_affine", 0.0)]
    # the test's ("reference, offset, casting_mode", [..., (GemmaRMSNorm, 1.0, "gemma"), ...]), not Liger's defaults
    assert dict(u.dropin.fixed)["offset"] == "1.0" and dict(u.dropin.fixed)["casting_mode"] == "'gemma'"
    assert "offset=1.0" in u.dropin.signature() and "elementwise_affine=True" in u.dropin.signature()
    assert dict(u.dropin.functional.fixed) == {"offset": "1.0", "casting_mode": "'gemma'"}
    files = act.render_files(u)
    module = files["src/liger_kernel/transformers/gemma2.py"]
    ops = files["src/liger_kernel/ops/gemma2.py"]
    assert 'self.register_parameter("weight", None)' in module and "if elementwise_affine:" in module
    assert "if weight is None:" in ops and "dweight = dweight if ctx.given_weight else None" in ops
    # the runtime floats keep the reference's defaults: Liger's tests call LigerSiLUMulFunction.apply(a, b)
    assert "def forward(ctx, X, weight, eps=1e-06, offset=1.0, casting_mode='gemma', in_place=True):" in ops
    assert "def test_liger_gemma2_without_elementwise_affine" in files["test/transformers/test_gemma2.py"]
    for text in files.values():
        ast.parse(text)


def test_paired_values_read_tuples_and_pytest_params_and_leave_out_a_name_paired_twice():
    tree = ast.parse(
        "import pytest\n"
        '@pytest.mark.parametrize("reference, offset, mode", [(A, 0.0, "a"), pytest.param(B, 1.0, "b", marks=m)])\n'
        '@pytest.mark.parametrize("reference, flag", [(B, True), (B, False)])\n'
        "def test_x(reference, offset, mode, flag): pass\n"
    )
    assert dropin.paired_values(tree, "B") == {"offset": "1.0", "mode": "'b'"}
    assert dropin.paired_values(tree, "A") == {"offset": "0.0", "mode": "'a'"}
    assert dropin.paired_values(tree, "C") == {}


def test_a_switch_that_changes_the_op_otherwise_is_not_an_optional_parameter(tmp_path):
    (tmp_path / "op.py").write_text(
        "import torch\n\n\n"
        "class Shifted(torch.nn.Module):\n"
        "    def __init__(self, hidden_size, shift=True):\n"
        "        super().__init__()\n"
        "        self.bias = torch.nn.Parameter(torch.zeros(hidden_size)) if shift else None\n\n"
        "    def forward(self, x):\n"
        "        return torch.sigmoid(x) * 2.0 + self.bias if self.bias is not None else torch.sigmoid(x)\n"
    )
    u = understand.understand(spec.resolve(f"{tmp_path / 'op.py'}:Shifted", tmp_path), tmp_path)
    assert [(w.name, w.optional) for w in u.weights] == [("bias", "")]  # no constant bias gives sigmoid(x)


def test_a_functional_whose_arguments_are_ordered_otherwise_is_no_drop_in(tmp_path):
    source = tmp_path / "functional.py"
    source.write_text(
        "def liger_modulated(X, W, scale, shift=None, eps=1e-6, offset=0.0, casting_mode='llama', in_place=True):\n"
        "    return F.apply(X, W, scale, shift, eps, offset, casting_mode, in_place)\n\n\n"
        "def liger_norm(X, W, eps, offset=0.0, casting_mode='llama', in_place=True):\n"
        "    return G.apply(X, W, eps, offset, casting_mode, in_place)\n"
    )
    # inputs (hidden_states, scale), the weight, then eps and offset at run time: offset would be taken twice
    assert dropin._functional(source, "F", 5, ["eps", "offset"]) is None
    norm = dropin._functional(source, "G", 3, ["eps"])
    assert norm.name == "liger_norm" and dict(norm.fixed) == {"offset": "0.0", "casting_mode": "'llama'"}


def test_an_inherited_forward_gives_its_inputs_so_a_loss_is_refused_for_its_output_not_a_missing_argument(tmp_path):
    import pytest

    from pipelines.outcome import PipelineError

    (tmp_path / "op.py").write_text(
        "import torch\n\n\nclass Loss(torch.nn.KLDivLoss):\n    def __init__(self):\n"
        '        super().__init__(reduction="batchmean")\n'
    )
    with pytest.raises(PipelineError, match=r"maps shape \(4, 33\) to \(\)"):
        understand.understand(spec.resolve(f"{tmp_path / 'op.py'}:Loss", tmp_path), tmp_path)


def test_a_file_standing_for_a_liger_module_gets_its_signatures_and_the_functional_named_after_it(
    liger_checkout, tmp_path
):
    # Liger's test_layer_norm.py writes torch.nn.LayerNorm inline; LigerLayerNorm dispatches among backends, so its
    # forward applies no Function: the functional is liger_layer_norm, by its name
    path = tmp_path / "ln.py"
    path.write_text(
        "import torch\n\nfrom liger_kernel.transformers.layer_norm import LigerLayerNorm\n\n"
        "LIGER_MODULE = LigerLayerNorm\n\n\n"
        "class TorchLayerNorm(torch.nn.LayerNorm):\n"
        "    def __init__(self, hidden_size, eps=1e-6):\n"
        "        super().__init__(hidden_size, eps=eps)\n"
    )
    u = understand.understand(spec.resolve(f"{path}:TorchLayerNorm", liger_checkout.root, "ln2"), liger_checkout.root)
    assert u.dropin.liger_class == "liger_kernel.transformers.layer_norm.LigerLayerNorm"
    assert u.dropin.functional.signature() == "X, W, B, eps"  # liger_layer_norm(X=..., W=..., B=..., eps=...)
    # CUDA's LayerNorm keeps mean and rstd in fp32 for the backward: no round to the input dtype there
    assert not any(".to(X_ptr.dtype.element_ty)" in s.expr for s in u.backward.stmts)
