"""Liger's fp32 convergence protocol (test_mini_models.py) on the CPU, gemma4_unified_text's generated entry
(thirteenth session): 32 AdamW steps, batch 16 x 128 of tiny_shakespeare, the eval step.

    .venv/bin/python benchmarks/gemma4_unified_protocol_cpu.py g4u|g3 hf|flce|control STEPS [LR] [h128]
    .venv/bin/python benchmarks/gemma4_unified_protocol_cpu.py compare A.pt B.pt   (as test_mini_model compares)

Modes: hf; control (lm_head in float64, rounded back); flce (a PyTorch emulation of Liger's chunked FLCE: 64-row
chunks at BT 2048 / V 32000 / H 1024, fp32 softmax gradients, addmm accumulation). `g3` is Liger's mini_gemma3_text;
`h128` sets head_dim / global_head_dim 128. Writes /tmp/fp32x/<model>_<mode>_<steps>_<lr>[_h128].pt; 10-30 s a step
on 2 shared cores. Needs /tmp/lk (Liger's checkout: its tokenized dataset).
"""

import sys
import time

import torch
import torch.nn.functional as F
from datasets import load_from_disk
from torch.utils.data import DataLoader
from transformers import BatchEncoding
from transformers import set_seed


def simple_collate_fn(data):
    ids = torch.stack([torch.tensor(d["input_ids"]) for d in data])
    am = torch.stack([torch.tensor(d["attention_mask"]) for d in data])
    sl = F.pad(ids.clone(), (0, 1), value=-100)[..., 1:].contiguous()
    return BatchEncoding({"input_ids": ids, "attention_mask": am, "labels": ids.clone(), "shift_labels": sl})


torch.set_num_threads(1)


def compare(expected_path: str, actual_path: str) -> None:
    """The fp32 entry's tolerances: loss 1e-8 / 1e-4, top-k 5e-3 / 1e-5, params 5e-3 / 1e-5."""
    a, b = torch.load(expected_path), torch.load(actual_path)
    la, lb = torch.tensor(a["loss"]), torch.tensor(b["loss"])
    d = (la - lb).abs()
    outside = d > 1e-8 + 1e-4 * lb.abs()
    print("loss diff by step", [f"{x:.1e}" for x in d.tolist()])
    print(f"loss max {d.max():.2e}, outside: {int(outside.sum())} at {outside.nonzero().flatten().tolist()}")
    t = (a["topk"] - b["topk"]).abs()
    print(f"topk max {t.max():.2e}, outside 5e-3: {int((t > 5e-3 + 1e-5 * b['topk'].abs()).sum())}")
    pa, pb = a["params"], b["params"]
    print("params outside", sum(int(((pa[k] - pb[k]).abs() > 5e-3 + 1e-5 * pb[k].abs()).sum()) for k in pa))


if sys.argv[1] == "compare":
    compare(sys.argv[2], sys.argv[3])
    sys.exit()
model_kind, mode, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
lr = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-5


def build():
    if model_kind == "g4u":
        from transformers.models.gemma4_unified.configuration_gemma4_unified import Gemma4UnifiedTextConfig
        from transformers.models.gemma4_unified.modeling_gemma4_unified import Gemma4UnifiedForCausalLM

        cfg = Gemma4UnifiedTextConfig(
            attention_dropout=0.0,
            bos_token_id=1,
            eos_token_id=2,
            hidden_size=1024,
            initializer_range=0.02,
            intermediate_size=2048,
            max_position_embeddings=8192,
            num_attention_heads=8,
            num_hidden_layers=4,
            num_key_value_heads=2,
            pad_token_id=2,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            use_cache=True,
            vocab_size=32000,
            attn_implementation="sdpa",
            **({"head_dim": 128, "global_head_dim": 128} if len(sys.argv) > 5 and sys.argv[5] == "h128" else {}),
        )
        return Gemma4UnifiedForCausalLM(cfg)
    from transformers import Gemma3ForCausalLM
    from transformers import Gemma3TextConfig

    cfg = Gemma3TextConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2048,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=256,
        hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=8192,
        initializer_range=0.02,
        rms_norm_eps=1e-06,
        use_cache=True,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=1,
        tie_word_embeddings=True,
        attention_bias=False,
        attention_dropout=0.0,
        attn_implementation="eager",
    )
    return Gemma3ForCausalLM(cfg)


class FLCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, y):
        BT, H = x.shape
        V = w.shape[0]
        n = (y != -100).sum().item()
        inc = -(-V // H)
        c = -(-BT // inc)
        chunk = min(BT, 1 << (c - 1).bit_length())
        gx = torch.zeros_like(x)
        gw = torch.zeros_like(w)
        loss = torch.zeros(BT)
        for s in range(0, BT, chunk):
            xc, yc = x[s : s + chunk], y[s : s + chunk]
            lg = xc @ w.t()
            m = lg.max(-1, keepdim=True).values
            lse = m.squeeze(-1) + torch.log(torch.exp(lg - m).sum(-1))
            valid = yc != -100
            tgt = lg.gather(-1, yc.clamp(min=0)[:, None]).squeeze(-1)
            loss[s : s + chunk] = torch.where(valid, lse - tgt, 0.0) / n
            g = torch.exp(lg - lse[:, None]) / n
            g[torch.arange(len(yc))[valid], yc[valid]] -= 1.0 / n
            g[~valid] = 0
            gx[s : s + chunk] = g @ w
            torch.addmm(gw, g.t(), xc, out=gw)
        ctx.save_for_backward(gx, gw)
        return loss.sum()

    @staticmethod
    def backward(ctx, go):
        gx, gw = ctx.saved_tensors
        return gx * go, gw * go, None


def run():
    set_seed(42)
    model = build().to(torch.float32)
    if mode == "control":
        head = model.lm_head
        head.forward = lambda x: F.linear(x.double(), head.weight.double()).to(x.dtype)
    ds = load_from_disk("/tmp/lk/test/resources/tiny_shakespeare_tokenized")
    it = iter(DataLoader(ds, batch_size=16, shuffle=False, collate_fn=simple_collate_fn))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for i in range(steps):
        b = next(it)
        opt.zero_grad()
        t = time.time()
        if mode == "flce":
            h = model.model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).last_hidden_state
            loss = FLCE.apply(h.reshape(-1, h.shape[-1]), model.lm_head.weight, b["shift_labels"].reshape(-1))
        else:
            loss = model(**b).loss
        loss.backward()
        opt.step()
        losses.append(loss.item())
        print(i, losses[-1], f"{time.time() - t:.1f}s", flush=True)
    model.eval()
    b = next(it)
    with torch.no_grad():
        out = model(**b)
    losses.append(out.loss.item())
    lp = torch.log_softmax(out.logits, -1).topk(20, -1).values
    torch.save(
        {"loss": losses, "topk": lp, "params": {k: v.detach().clone() for k, v in model.named_parameters()}},
        f"/tmp/fp32x/{model_kind}_{mode}_{steps}_{lr}{'_' + sys.argv[5] if len(sys.argv) > 5 else ''}.pt",
    )


run()
