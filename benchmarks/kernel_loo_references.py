"""PyTorch references that Liger 0.8.5's own unit tests write inline (no class or function of the test file to point
`liger-bot kernel` at), spelled as the test spells them, for benchmarks/kernel_leave_one_out.py.

Each names the test line it stands for. Nothing else: no weights chosen here that the test does not choose.
"""

import torch


class TorchSoftmax(torch.nn.Softmax):
    """test/transformers/test_softmax.py: `torch.nn.Softmax(dim=-1)`."""

    def __init__(self):
        super().__init__(dim=-1)


def silu_mul(a, b, gate_multiplier=1.0, down_multiplier=1.0):
    """test/transformers/test_swiglu.py:_torch_silu_mul_ref (`silu(a * gate_multiplier) * b * down_multiplier`, in the
    inputs' dtype), the reference test_correctness_silumul_with_multipliers holds LigerSiLUMulFunction to, with the
    Function's defaults (1.0, 1.0; the test file's own function has none). Not the file's `_ref_silu_mul`: that one is
    an fp32 oracle (`a.float()`, `b.float()`), so a kernel generated from it is, faithfully, fp32 out for bf16 in,
    where LigerSiLUMulFunction returns the inputs' dtype."""
    return torch.nn.functional.silu(a * gate_multiplier) * b * down_multiplier


def gelu_gate_mul(a, b):
    """test/transformers/test_geglu.py tests LigerGELUMulFunction inside transformers' LlamaMLP with
    hidden_act="gelu_pytorch_tanh" (`down_proj(act_fn(gate_proj(x)) * up_proj(x))`): the element-wise part."""
    return torch.nn.functional.gelu(a, approximate="tanh") * b


class TorchKLDivLoss(torch.nn.KLDivLoss):
    """test/transformers/test_kl_div.py: `torch.nn.KLDivLoss(reduction="batchmean", log_target=False)`."""

    def __init__(self):
        super().__init__(reduction="batchmean", log_target=False)


class TorchCrossEntropyLoss(torch.nn.CrossEntropyLoss):
    """test/transformers/test_cross_entropy.py: `torch.nn.CrossEntropyLoss(ignore_index=-100, reduction="mean")`."""

    def __init__(self):
        super().__init__(ignore_index=-100, reduction="mean")
