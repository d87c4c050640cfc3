"""Sample contexts for kernel_templates/kernel/*.j2, built by the kernel pipeline itself: `understand` on one
elementwise op (transformers' relu2) and one row-wise op with a learnable weight (an RMSNorm written as a plain
function), then `act.context`, the dict act renders every kernel template with."""

from __future__ import annotations

import tempfile
from pathlib import Path

from pipelines.kernel import act
from pipelines.kernel import spec
from pipelines.kernel import understand

ROWWISE_OP = """import torch


def sample_norm(x, weight: torch.nn.Parameter, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
"""


def samples() -> list[tuple[str, dict]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "sample_norm.py").write_text(ROWWISE_OP)
        out = []
        for label, text in (("elementwise relu2", "relu2"), ("rowwise norm", f"{root / 'sample_norm.py'}:sample_norm")):
            u = understand.understand(spec.resolve(text, root), root)
            out.append((label, act.context(u)))
    return out
