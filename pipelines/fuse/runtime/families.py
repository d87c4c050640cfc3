"""The kernels the default registry holds, by family, with their conditions and measured timings, and the forms
(PATTERNS) it tries, in order: the hand-written unrolled forms, then each family's pattern / replacement pairs, then
the masked means over padded rows (padded_forms.py), then embedding -> partitioned mean (it rewrites what the
partitioned-mean entries left, the split padded form's replacement included: embedding_forms.py), then K of those
meeting in one torch.cat -> one grouped launch (grouped_embedding_forms.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch

from .embedding_forms import EMBEDDING_FORMS
from .embedding_pool import pass_embedding_partitioned_mean
from .grouped_embedding_forms import GROUPED_EMBEDDING_FORMS
from .grouped_embedding_pool import pass_grouped_embedding_partitioned_mean
from .liger_pairs import LIGER_PAIRS
from .padded_forms import PADDED_FORMS
from .pooling import interpreter_active
from .pooling_pairs import POOLING_PAIRS
from .registry import Condition
from .registry import Kernel
from .registry import Registry
from .unrolled_forms import UNROLLED_FORMS

TIMINGS = Path(__file__).with_name("timings.json")  # written from benchmarks/pooling_h200.py's JSON


def triton_partitioned_mean(values, offsets):
    return torch.ops.liger_fuse.partitioned_mean(values, offsets)


def triton_padded_masked_mean(padded, lengths, mode, out_dtype):
    return torch.ops.liger_fuse.padded_masked_mean(padded, lengths, mode, out_dtype)


def triton_embedding_partitioned_mean(table, ids, offsets):
    return pass_embedding_partitioned_mean(table, ids, offsets)  # off the CPU the offsets check is in the graph


def triton_grouped_embedding_partitioned_mean(tables, ids, offsets):
    return pass_grouped_embedding_partitioned_mean(tables, ids, offsets)  # one launch for the K features


def liger_rms_norm(x, weight, eps):
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    return LigerRMSNormFunction.apply(x, weight, eps, 0.0, "llama", False)


def liger_swiglu(gate, up):
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    return LigerSiLUMulFunction.apply(gate, up)


def _liger_importable(spec) -> bool:
    return importlib.util.find_spec("liger_kernel") is not None


def _triton_runs(spec) -> bool:
    return spec.device == "cuda" or interpreter_active()


KERNEL_FUNCTIONS = {
    "triton_partitioned_mean": triton_partitioned_mean,
    "triton_embedding_partitioned_mean": triton_embedding_partitioned_mean,
    "triton_grouped_embedding_partitioned_mean": triton_grouped_embedding_partitioned_mean,
    "triton_padded_masked_mean": triton_padded_masked_mean,
    "liger_rms_norm": liger_rms_norm,
    "liger_swiglu": liger_swiglu,
}


PATTERNS = (*UNROLLED_FORMS, *POOLING_PAIRS, *PADDED_FORMS, *EMBEDDING_FORMS, *GROUPED_EMBEDDING_FORMS, *LIGER_PAIRS)


def default_kernels() -> list[Kernel]:
    float_types = (torch.float32, torch.bfloat16)
    no_liger = "liger_kernel is not importable (pip install -e the target checkout)"
    return [
        Kernel(
            "triton_partitioned_mean",
            "partitioned_mean",
            Condition(
                ("cuda", "cpu"), (*float_types, torch.float16), (2,), _triton_runs, "CPU without TRITON_INTERPRET=1"
            ),
            function=triton_partitioned_mean,
        ),
        # the masked mean over a padded [B, L, D] tensor (padded.py); the operand is the padded tensor
        Kernel(
            "triton_padded_masked_mean",
            "padded_masked_mean",
            Condition(
                ("cuda", "cpu"), (*float_types, torch.float16), (3,), _triton_runs, "CPU without TRITON_INTERPRET=1"
            ),
            function=triton_padded_masked_mean,
        ),
        # the fused gather + pool (embedding_pool.py); the operand is the table [V, D]
        Kernel(
            "triton_embedding_partitioned_mean",
            "embedding_partitioned_mean",
            Condition(
                ("cuda", "cpu"), (*float_types, torch.float16), (2,), _triton_runs, "CPU without TRITON_INTERPRET=1"
            ),
            function=triton_embedding_partitioned_mean,
        ),
        # K fused gathers meeting in one cat, one launch (grouped_embedding_pool.py); the operand is the first table
        Kernel(
            "triton_grouped_embedding_partitioned_mean",
            "grouped_embedding_partitioned_mean",
            Condition(
                ("cuda", "cpu"), (*float_types, torch.float16), (2,), _triton_runs, "CPU without TRITON_INTERPRET=1"
            ),
            function=triton_grouped_embedding_partitioned_mean,
        ),
        # Liger's Triton kernels do not run under the interpreter on CPU: CUDA only
        Kernel(
            "liger_rms_norm",
            "rms_norm",
            Condition(("cuda",), (*float_types, torch.float16), (), _liger_importable, no_liger),
            function=liger_rms_norm,
        ),
        Kernel(
            "liger_swiglu",
            "swiglu",
            Condition(("cuda",), (*float_types, torch.float16), (), _liger_importable, no_liger),
            function=liger_swiglu,
        ),
    ]


def load_timings(kernels: list[Kernel], path: Path = TIMINGS) -> None:
    """timings.json: {kernel: {gpu: {bucket: ms}}}; absent file or kernel = untimed (ranked last)."""
    if not path.is_file():
        return
    table = json.loads(path.read_text())
    for kernel in kernels:
        for gpu, buckets in table.get(kernel.name, {}).items():
            for bucket, ms in buckets.items():
                kernel.timings_ms[(gpu, bucket)] = float(ms)


def default_registry() -> Registry:
    registry = Registry()
    kernels = default_kernels()
    load_timings(kernels)
    for kernel in kernels:
        registry.register_kernel(kernel)
    for pattern in PATTERNS:
        registry.register_pattern(pattern)
    return registry
