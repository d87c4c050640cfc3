"""Liger's own chunked-loss heads as `pipelines.chunked_loss.bench --against` calls a side: `head(x, ref_x, y)`.

bench gives every side the reference model's input. Liger's DPO head takes it, so a leave-one-out run passes it
as is (`--against test.chunked_loss.test_dpo_loss:LigerLMHeadDPO`), as KTO's; Liger's ORPO, CPO and SimPO heads
have no reference model (`forward(x, y)`), so these drop `ref_x` (and bench's zero tensor never lands in nll_target).
Imported by bench after it has put the Liger checkout on sys.path: `--against benchmarks.chunked_loss_sides:...`.
"""

from test.chunked_loss.test_cpo_loss import LigerLMHeadCPO as _LigerLMHeadCPO
from test.chunked_loss.test_orpo_loss import LigerLMHeadORPO as _LigerLMHeadORPO
from test.chunked_loss.test_simpo_loss import LigerLMHeadSimPO as _LigerLMHeadSimPO


class LigerLMHeadCPO(_LigerLMHeadCPO):
    def forward(self, x, ref_x, y):
        return super().forward(x, y)


class LigerLMHeadORPO(_LigerLMHeadORPO):
    def forward(self, x, ref_x, y):
        return super().forward(x, y)


class LigerLMHeadSimPO(_LigerLMHeadSimPO):
    def forward(self, x, ref_x, y):
        return super().forward(x, y)
