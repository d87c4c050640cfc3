"""Preference losses Liger-Kernel 0.8.5 has no chunked version of, written the plain way (per-sequence log-probs in,
per-sequence losses out, as TRL writes them), for `liger-bot chunked-loss benchmarks/chunked_losses.py:NAME`.
"""

import torch
import torch.nn.functional as F


def slic(chosen_logps, rejected_logps, beta=1.0, delta=1.0):
    """SLiC-HF's calibration loss (https://huggingface.co/papers/2305.10425, Eq. 2): a hinge on the policy's own
    chosen-over-rejected margin, no reference model."""
    return torch.relu(delta - beta * (chosen_logps - rejected_logps))


def apo_zero_unpaired(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta=0.1):
    """TRL KTOTrainer's loss_type="apo_zero_unpaired" (trl/trainer/kto_trainer.py, TRL 1.16): the unpaired variant
    of the APO paper's Eq. 7, over the chosen and the rejected groups of an unpaired batch. Generate it with
    `--set pairing=unpaired`."""
    chosen_losses = 1 - F.sigmoid(beta * (chosen_logps - ref_chosen_logps))
    rejected_losses = F.sigmoid(beta * (rejected_logps - ref_rejected_logps))
    losses = torch.cat((chosen_losses, rejected_losses), 0)
    chosen_rewards = beta * (chosen_logps - ref_chosen_logps)
    rejected_rewards = beta * (rejected_logps - ref_rejected_logps)
    return losses, chosen_rewards.sum(), rejected_rewards.sum()
