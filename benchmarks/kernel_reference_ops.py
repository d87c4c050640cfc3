"""Row-wise reference ops the kernel pipeline is exercised on (FILE specs: `liger-bot kernel this.py:NAME`).

Plain PyTorch, one function each; nothing here was written with the kernel engine in mind.
"""

import torch


def layer_norm_no_bias(x, weight: torch.nn.Parameter, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    centered = x - mean
    variance = (centered * centered).mean(-1, keepdim=True)
    return centered * torch.rsqrt(variance + eps) * weight


def l2_normalize(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def softmax(x):
    shifted = x.float() - x.float().amax(-1, keepdim=True)
    exp = torch.exp(shifted)
    return (exp / exp.sum(-1, keepdim=True)).to(x.dtype)


def mean_abs_norm(x, weight: torch.nn.Parameter, bias: torch.nn.Parameter, eps=1e-6):
    # a norm the pipeline had not seen: scale by the mean absolute value, then an affine map
    scale = x.abs().mean(-1, keepdim=True) + eps
    return x / scale * weight + bias
