"""test/transformers/test_layer_norm.py's inline reference, `torch.nn.LayerNorm(hidden_size, eps=1e-6)`, spelled out
for benchmarks/kernel_leave_one_out.py. The file imports the Liger module the test pairs it with, so `liger-bot
kernel` gives the generated module, functional and Function that module's signatures (pipelines/kernel/dropin.py)."""

import torch
from liger_kernel.transformers.layer_norm import LigerLayerNorm

LIGER_MODULE = LigerLayerNorm  # the module this reference stands for


class TorchLayerNorm(torch.nn.LayerNorm):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__(hidden_size, eps=eps)
