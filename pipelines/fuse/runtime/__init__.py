"""liger_fuse runtime: kernel selection inside torch.compile. Training code imports this package only; it
needs torch and triton, nothing from the bot or its server dependencies.

    from pipelines.fuse.runtime import compile
    model = compile(model)                    # torch.compile + loop capture + pattern -> kernel pass
    model.liger_fuse_stats.replaced           # {"loop_slice_mean_stack": 1, ...}

To run the Triton kernels on CPU tensors, set TRITON_INTERPRET=1 before this package is imported (importing it
imports triton, whose own jit functions are built for the interpreter or the GPU at that moment); set later, the
kernels count as unavailable on CPU and the original ops run.
"""

from .backend import FuseStats
from .backend import compile
from .backend import make_backend
from .embedding_pool import embedding_partitioned_mean
from .families import default_registry
from .grouped_embedding_pool import grouped_embedding_partitioned_mean
from .padded import padded_masked_mean
from .pooling import grouped_partitioned_mean
from .pooling import partitioned_mean
from .registry import Registry

__all__ = [
    "FuseStats",
    "Registry",
    "compile",
    "default_registry",
    "embedding_partitioned_mean",
    "grouped_embedding_partitioned_mean",
    "grouped_partitioned_mean",
    "make_backend",
    "padded_masked_mean",
    "partitioned_mean",
]
