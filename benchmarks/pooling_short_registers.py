"""Registers and spills of the short-partition kernels (pipelines/fuse/runtime/pooling_short_kernels.py) at every
launch the pooling grid's short cells take (B x mean length 1 / 4 / 16 x D, fp32 and bf16), compiled for sm_90a on
a host without a GPU (triton.compile + the ptxas that ships with triton, -v). An estimate of the H200's build
(triton there may differ). Each distinct launch once:

    PYTHONPATH=. python benchmarks/pooling_short_registers.py WORK_DIR
"""

import os
import subprocess
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from pipelines.fuse.runtime import pooling
from pipelines.fuse.runtime import pooling_short_kernels

BIN = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")
PTXAS = next(
    (os.path.join(BIN, n) for n in ("ptxas-blackwell", "ptxas") if os.path.exists(os.path.join(BIN, n))), "ptxas"
)
KERNELS = {
    "fwd": (pooling_short_kernels.short_mean_fwd_kernel, ("values_ptr", "offsets_ptr", "out_ptr"), ("B", "D")),
    "bwd": (
        pooling_short_kernels.short_mean_bwd_kernel,
        ("grad_out_ptr", "offsets_ptr", "grad_values_ptr"),
        ("B", "N", "D"),
    ),
}


def facts(work: str, kernel, signature: dict, constants: dict, warps: int) -> str:
    compiled = triton.compile(
        ASTSource(kernel, signature, constants), target=GPUTarget("cuda", 90, 32), options={"num_warps": warps}
    )
    ptx, cubin = os.path.join(work, "k.ptx"), os.path.join(work, "k.cubin")
    with open(ptx, "w") as f:
        f.write(compiled.asm["ptx"])
    out = subprocess.run([PTXAS, "-v", "--gpu-name", "sm_90a", ptx, "-o", cubin], capture_output=True, text=True)
    return " ".join(x.split(":", 2)[-1].strip() for x in out.stderr.splitlines() if "Used" in x or "spill" in x)


def main(work: str) -> None:
    os.makedirs(work, exist_ok=True)
    seen = set()
    for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        for b in (1, 64, 1024, 16384, 262144):
            for length in (1, 4, 16):
                for d in (16, 64, 128, 256, 1024):
                    config = pooling.short_config(b, b * length, d, dtype, torch.device("cuda"))
                    if (name, tuple(sorted(config.items()))) in seen:
                        continue
                    seen.add((name, tuple(sorted(config.items()))))
                    warps = config.pop("num_warps")
                    for pass_name, (kernel, pointers, sizes) in KERNELS.items():
                        signature = {p: f"*{name}" for p in pointers} | {"offsets_ptr": "*i64"}
                        signature |= {s: "i32" for s in sizes} | {c: "constexpr" for c in config}
                        info = facts(work, kernel, signature, config, warps)
                        print(f"{name} B={b} L={length} D={d} {config} warps={warps} {pass_name}: {info}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
