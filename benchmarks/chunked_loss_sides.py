"""Liger's own chunked-loss heads as `pipelines.chunked_loss.bench --against` calls a side: `head(x, ref_x, y)`.

bench gives every side the reference model's input. Liger's DPO head takes it, so a leave-one-out run passes it
as is (`--against test.chunked_loss.test_dpo_loss:LigerLMHeadDPO`); Liger's ORPO head has no reference model
(`forward(x, y, nll_target=None)`), so this one drops `ref_x` (and bench's zero tensor never lands in nll_target).
Imported by bench after it has put the Liger checkout on sys.path: `--against benchmarks.chunked_loss_sides:...`.
"""

from test.chunked_loss.test_orpo_loss import LigerLMHeadORPO as _LigerLMHeadORPO


class LigerLMHeadORPO(_LigerLMHeadORPO):
    def forward(self, x, ref_x, y):
        return super().forward(x, y)
