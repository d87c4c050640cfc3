"""Registers and spills of Liger's layer_norm / poly_norm forward (BLOCK 16384, 16 warps) against the looped forward
(chunks of 2048 / 4096 on 8 warps), compiled for sm_90a on a host without a GPU (triton.compile + the ptxas that
ships with triton, -v). VARIANT_DIR holds layer_norm.py / poly_norm.py rewritten by catalogue.looped_forward:

    PYTHONPATH=.:LIGER/src python benchmarks/perf_forward_registers.py VARIANT_DIR LIGER/src/liger_kernel/ops
"""

import importlib.util
import os
import subprocess
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas-blackwell")


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def facts(fn, sig, consts, warps, tag):
    src = ASTSource(fn, sig, consts)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    open(f"{sys.argv[1]}/k.ptx", "w").write(k.asm["ptx"])
    out = subprocess.run(
        [PTXAS, "-v", "--gpu-name", "sm_90a", f"{sys.argv[1]}/k.ptx", "-o", f"{sys.argv[1]}/k.cubin"],
        capture_output=True,
        text=True,
    )
    info = " ".join(x.split(":", 2)[-1].strip() for x in out.stderr.splitlines() if "Used" in x or "spill" in x)
    print(f"{tag}: warps {warps}: {info}")


variant = sys.argv[1]
for kernel in ("layer_norm", "poly_norm"):
    orig = load("o_" + kernel, f"{sys.argv[2]}/{kernel}.py")
    var = load("v_" + kernel, f"{variant}/{kernel}.py")
    if kernel == "layer_norm":
        sig = {
            n: "*bf16" if n.endswith("ptr") and n[0] in "XYWB" else "*fp32" if n.endswith("ptr") else "i32"
            for n in [
                "Y_ptr",
                "Y_row_stride",
                "X_ptr",
                "X_row_stride",
                "W_ptr",
                "W_row_stride",
                "B_ptr",
                "B_row_stride",
                "Mean_ptr",
                "Mean_row_stride",
                "RSTD_ptr",
                "RSTD_row_stride",
                "n_cols",
            ]
        }
        sig["eps"] = "fp32"
    else:
        sig = {
            "Y_ptr": "*bf16",
            "Y_row_stride": "i32",
            "X_ptr": "*bf16",
            "X_row_stride": "i32",
            "W_ptr": "*bf16",
            "B_ptr": "*bf16",
            "RSTD_ptr": "*fp32",
            "RSTD_row_stride": "i32",
            "n_cols": "i32",
            "eps": "fp32",
        }
    sig["BLOCK_SIZE"] = "constexpr"
    name = f"_{kernel}_forward_kernel"
    facts(getattr(orig, name), sig, {"BLOCK_SIZE": 16384}, 16, f"{kernel} original BLOCK 16384")
    facts(getattr(var, name + "_looped"), sig, {"BLOCK_SIZE": 2048}, 8, f"{kernel} looped chunk 2048")
    facts(getattr(var, name + "_looped"), sig, {"BLOCK_SIZE": 4096}, 8, f"{kernel} looped chunk 4096")
