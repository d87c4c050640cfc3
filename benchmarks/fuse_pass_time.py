"""Time liger_fuse's graph pass alone (CPU) on Dynamo graphs: an HF-style stack of RMSNorm + SwiGLU blocks and the
index_add pooling form. Usage: PYTHONPATH=<checkout> python benchmarks/fuse_pass_time.py"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before the runtime imports triton

import copy
import time

import torch
import torch.nn.functional as F

from pipelines.fuse.runtime.families import default_registry
from pipelines.fuse.runtime.graph_pass import fuse_pass

LAYERS = 24


def rms(x, w):
    xf = x.to(torch.float32)
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


def blocks(x, ws, ups, downs):
    for w, up, down in zip(ws, ups, downs, strict=True):
        h = rms(x, w)
        x = x + (F.silu(h @ up) * (h @ up)) @ down
    return x


def pooling(v, lengths):
    seg = torch.repeat_interleave(torch.arange(lengths.shape[0]), lengths, output_size=v.shape[0])
    return torch.zeros(lengths.shape[0], v.shape[1]).index_add_(0, seg, v) / lengths.clamp(min=1).unsqueeze(1)


def graph_of(fn, *args):
    torch._dynamo.reset()
    got = []

    def keep(gm, example_inputs):
        got.append(gm)
        return gm.forward

    torch.compile(fn, backend=keep)(*args)
    return got[0]


def one_pass(gm):
    registry = default_registry()
    copied = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    start = time.perf_counter()
    fuse_pass(copied, registry)
    return (time.perf_counter() - start) * 1e3, registry


def main():
    weights = [torch.randn(16) for _ in range(LAYERS)]
    ups = [torch.randn(16, 32) for _ in range(LAYERS)]
    downs = [torch.randn(32, 16) for _ in range(LAYERS)]
    stack = graph_of(blocks, torch.randn(4, 16), weights, ups, downs)
    small = graph_of(pooling, torch.randn(10, 4), torch.tensor([3, 1, 6]))
    print(f"first pass (pattern tracing included): {one_pass(small)[0]:.1f} ms")
    for name, gm in ((f"{LAYERS}-layer rms_norm+swiglu", stack), ("index_add pooling", small)):
        runs = [one_pass(gm) for _ in range(5)]
        median = sorted(ms for ms, _ in runs)[2]
        registry = runs[0][1]
        print(
            f"{name}: {len(gm.graph.nodes)} nodes, pass median {median:.1f} ms, "
            f"replaced {dict(registry.replaced)}, declined {dict(registry.declined)}"
        )


if __name__ == "__main__":
    main()
