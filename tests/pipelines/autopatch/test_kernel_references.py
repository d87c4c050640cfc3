"""The references stand in for Liger's kernels on a CPU host, so they must compute what the kernels compute: where
Triton's interpreter can run a kernel (RoPE, the cross entropies) the two are compared, forward and backward."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from pipelines.autopatch import kernel_references

COMPARE = r"""
import json, torch
import liger_kernel.ops as ops
from pipelines.autopatch import kernel_references as ref
torch.manual_seed(0)
found = {}

def grads(fn, *tensors):
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in tensors]
    out = fn(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    total = sum((o.float() * torch.randn_like(o.float(), generator=torch.Generator().manual_seed(1))).sum()
                for o in outs if isinstance(o, torch.Tensor) and o.requires_grad)
    total.backward()
    return [o for o in outs if isinstance(o, torch.Tensor)], [l.grad for l in leaves if l.grad is not None]

def diff(a, b):
    return max(float((x.float() - y.float()).abs().max()) for x, y in zip(a, b, strict=True))

half_cos, half_sin = torch.randn(1, 8, 8), torch.randn(1, 8, 8)
cos, sin = torch.cat((half_cos, half_cos), -1), torch.cat((half_sin, half_sin), -1)  # HF's tables repeat a half

def rope_grads(f):
    q = torch.randn(2, 4, 8, 16, generator=torch.Generator().manual_seed(3)).requires_grad_()
    k = torch.randn(2, 2, 8, 16, generator=torch.Generator().manual_seed(4)).requires_grad_()
    out_q, out_k = f(q, k, cos, sin)
    (out_q * torch.arange(out_q.numel()).reshape(out_q.shape).sin()).sum().add((out_k * 2).sum()).backward()
    return [out_q.detach(), out_k.detach()], [q.grad, k.grad]

(o1, g1), (o2, g2) = rope_grads(ops.LigerRopeFunction.apply), rope_grads(ref._plain(ref.rope))
found["rope"] = max(diff(o1, o2), diff(g1, g2))

logits, target = torch.randn(12, 50), torch.randint(0, 50, (12,))
target[3] = -100
args = (None, -100, 0.0, 0.1, "mean")  # softcap: `.to` on a float fails under the interpreter
run = lambda f: grads(lambda x: f(x, target, *args), logits)
(o1, g1), (o2, g2) = run(ops.LigerCrossEntropyFunction.apply), run(ref._plain(ref.cross_entropy))
found["cross_entropy"] = max(diff(o1[:1], o2[:1]), diff(g1, g2))

hidden, weight = torch.randn(12, 32), torch.randn(50, 32)
run = lambda f: grads(lambda h, w: f(h, w, target, None, None, -100, 0.0, 0.0, "mean"), hidden, weight)
(o1, g1), (o2, g2) = run(ops.LigerFusedLinearCrossEntropyFunction.apply), run(ref._plain(ref.fused_linear_cross_entropy))
found["fused_linear_cross_entropy"] = max(diff(o1[:1], o2[:1]), diff(g1, g2))
print(json.dumps(found))
"""


def test_references_match_the_interpreted_kernels(liger_checkout):
    env = {"PYTHONPATH": f"{liger_checkout.root / 'src'}:{sys.path[0]}", "TRITON_INTERPRET": "1", "PATH": "/usr/bin"}
    proc = subprocess.run([sys.executable, "-c", COMPARE], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(found) == {"rope", "cross_entropy", "fused_linear_cross_entropy"}
    assert all(value < 1e-4 for value in found.values()), found


def test_rms_norm_in_place_writes_dx_into_dy_only_when_asked():
    x = torch.randn(3, 8, requires_grad=True)
    w = torch.randn(8, requires_grad=True)
    for in_place in (True, False):
        y = kernel_references._rms_norm_apply(x, w, 1e-6, 1.0, "gemma", in_place)
        dy = torch.randn(3, 8)
        kept = dy.clone()
        (dx,) = torch.autograd.grad(y, x, dy)
        expected = torch.autograd.grad(kernel_references.rms_norm(x, w, 1e-6, 1.0, "gemma"), x, kept)[0]
        assert torch.allclose(dx, expected, atol=1e-6)
        assert torch.equal(dy, dx) is in_place and torch.equal(dy, kept) is not in_place


def test_casting_modes_differ_in_bf16_only():
    x, w = torch.randn(4, 64) * 3, torch.randn(64)
    fp32 = [kernel_references.rms_norm(x, w, 1e-6, 1.0, mode) for mode in ("llama", "gemma")]
    assert torch.allclose(fp32[0], fp32[1])
    bf16 = [kernel_references.rms_norm(x.bfloat16(), w.bfloat16(), 1e-6, 1.0, mode) for mode in ("llama", "gemma")]
    assert not torch.equal(bf16[0], bf16[1])
