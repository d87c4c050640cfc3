"""A model file for the fuse pipeline's tests: a chain of fusable ops (linear, scale, add, tanh, sum) that no
registered pattern matches, plus its factory. Tests write SOURCE into a target checkout."""

SOURCE = """import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x, bias):
        return torch.tanh(self.lin(x) * 0.5 + bias).sum(-1)


def make():
    torch.manual_seed(0)
    return Tiny(), (torch.randn(4, 8), torch.randn(8))
"""
