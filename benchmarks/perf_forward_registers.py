import importlib.util, subprocess, sys, re, os
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas-blackwell")
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m
def facts(fn, sig, consts, warps, tag):
    src = ASTSource(fn, sig, consts)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    open("/tmp/pf/k.ptx", "w").write(k.asm["ptx"])
    out = subprocess.run([PTXAS, "-v", "--gpu-name", "sm_90a", "/tmp/pf/k.ptx", "-o", "/tmp/pf/k.cubin"], capture_output=True, text=True)
    info = " ".join(l.split(":", 2)[-1].strip() for l in out.stderr.splitlines() if "Used" in l or "spill" in l)
    print(f"{tag}: warps {warps}: {info}")
variant = sys.argv[1]
for kernel in ("layer_norm", "poly_norm"):
    orig = load("o_" + kernel, f"/root/.cache/liger-bot/checkouts/liger-kernel-0.8.5/src/liger_kernel/ops/{kernel}.py")
    var = load("v_" + kernel, f"{variant}/{kernel}.py")
    if kernel == "layer_norm":
        sig = {n: "*bf16" if n.endswith("ptr") and n[0] in "XYWB" else "*fp32" if n.endswith("ptr") else "i32" for n in ["Y_ptr","Y_row_stride","X_ptr","X_row_stride","W_ptr","W_row_stride","B_ptr","B_row_stride","Mean_ptr","Mean_row_stride","RSTD_ptr","RSTD_row_stride","n_cols"]}
        sig["eps"] = "fp32"
    else:
        sig = {"Y_ptr": "*bf16", "Y_row_stride": "i32", "X_ptr": "*bf16", "X_row_stride": "i32", "W_ptr": "*bf16", "B_ptr": "*bf16", "RSTD_ptr": "*fp32", "RSTD_row_stride": "i32", "n_cols": "i32", "eps": "fp32"}
    sig["BLOCK_SIZE"] = "constexpr"
    name = f"_{kernel}_forward_kernel"
    facts(getattr(orig, name), sig, {"BLOCK_SIZE": 16384}, 16, f"{kernel} original BLOCK 16384")
    facts(getattr(var, name + "_looped"), sig, {"BLOCK_SIZE": 2048}, 8, f"{kernel} looped chunk 2048")
    facts(getattr(var, name + "_looped"), sig, {"BLOCK_SIZE": 4096}, 8, f"{kernel} looped chunk 4096")
