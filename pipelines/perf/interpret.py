"""A pytest plugin that lets Liger's own kernels run under TRITON_INTERPRET=1: the interpreter hands a Python float
argument (eps, offset) to the kernel as a bare float, so Liger's `eps.to(tl.float32)` fails there (compiled Triton
passes an fp32 scalar: this converts it the same way), and libdevice's `rsqrt`, which Liger imports, has no
interpreter implementation (it returns None): it becomes `tl.math.rsqrt`, looked up while the interpreter has
triton.language patched. Nothing changes unless TRITON_INTERPRET=1. Used by the CPU tests of the variant rewrites:

    TRITON_INTERPRET=1 PYTHONPATH=src:.:LIGER_BOT pytest -p pipelines.perf.interpret test/transformers/test_rms_norm.py
"""

from __future__ import annotations


def install() -> None:
    import os

    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    original = interpreter._implicit_cvt
    if getattr(original, "_liger_bot_floats", False):
        return

    def implicit_cvt(arg):
        if isinstance(arg, float):
            return tl.tensor(interpreter.TensorHandle(np.array([arg], dtype=np.float32), tl.float32), tl.float32)
        return original(arg)

    implicit_cvt._liger_bot_floats = True
    interpreter._implicit_cvt = implicit_cvt
    _patch_libdevice_rsqrt(tl)


def _patch_libdevice_rsqrt(tl) -> None:
    import importlib

    def rsqrt(x, **_):
        return tl.math.rsqrt(x)  # the interpreter's patched builtin, resolved at call time

    for name in ("triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        module.rsqrt = rsqrt


def pytest_configure(config) -> None:
    install()
