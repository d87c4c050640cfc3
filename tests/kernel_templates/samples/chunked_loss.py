"""Sample contexts for kernel_templates/chunked_loss/*.j2, built by the chunked-loss pipeline itself: `understand`
on a paired loss with reference log-probs and a batch-mean metric, and on an unpaired loss with an extra tensor
input (both plain functions), then `act.context`, the dict act renders every chunked-loss template with."""

from __future__ import annotations

import tempfile
from pathlib import Path

from pipelines.chunked_loss import act
from pipelines.chunked_loss import spec
from pipelines.chunked_loss import understand

LOSSES = """import torch
import torch.nn.functional as F


def sample_paired_loss(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta=0.1, gamma=0.3):
    logits = beta * ((chosen_logps - ref_chosen_logps) - (rejected_logps - ref_rejected_logps)) - gamma
    losses = -F.logsigmoid(logits)
    return losses, beta * chosen_logps, torch.mean(logits)


def sample_unpaired_loss(chosen_logps, rejected_logps, kl=None, beta=0.1):
    if kl is None:
        kl = torch.zeros(1)
    chosen = 1 - torch.sigmoid(beta * (chosen_logps - kl))
    rejected = 1 - torch.sigmoid(beta * (kl - rejected_logps))
    return torch.cat((chosen, rejected), 0), (beta * chosen_logps).sum()
"""


def samples() -> list[tuple[str, dict]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "losses.py").write_text(LOSSES)
        out = []
        for label, name, settings in (
            ("paired with reference", "sample_paired_loss", {}),
            ("unpaired with an extra tensor", "sample_unpaired_loss", {"pairing": "unpaired"}),
        ):
            u = understand.understand(spec.resolve(f"{root / 'losses.py'}:{name}", root), root, settings)
            out.append((label, act.context(u)))
    return out
