"""The kernel registry: per pattern, the kernels that can replace it, their conditions and measured timings.

`pick` returns the fastest kernel whose condition holds for the operands at hand (timings are per GPU name
and size bucket; a kernel with no timing for this GPU ranks after the timed ones, in registration order), or
None, and then the pass leaves the original ops in place.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

import torch

log = logging.getLogger("liger_fuse")

SIZE_BUCKETS = ((1 << 20, "small"), (1 << 26, "medium"))  # elements of the main operand; above: "large"


def size_bucket(elements: int) -> str:
    for limit, name in SIZE_BUCKETS:
        if elements < limit:
            return name
    return "large"


@dataclass(frozen=True)
class OperandSpec:
    """What a condition can see of the main operand: read from the traced graph's fake tensors."""

    device: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def elements(self) -> int:
        total = 1
        for size in self.shape:
            total *= int(size) if isinstance(size, int) else 1 << 16  # a symbolic size counts as mid-sized
        return total

    @classmethod
    def of(cls, tensor: torch.Tensor) -> OperandSpec:
        return cls(tensor.device.type, tensor.dtype, tuple(tensor.shape))


@dataclass(frozen=True)
class Condition:
    devices: tuple[str, ...]
    dtypes: tuple[torch.dtype, ...]
    ranks: tuple[int, ...] = ()
    available: Callable[[OperandSpec], bool] | None = None  # e.g. "the interpreter is on" or "liger imports"
    why_unavailable: str = ""

    def reason_against(self, spec: OperandSpec) -> str | None:
        """None when the condition holds, else the reason it does not (for the log line)."""
        if spec.device not in self.devices:
            return f"device {spec.device} not in {self.devices}"
        if spec.dtype not in self.dtypes:
            return f"dtype {spec.dtype} not in {tuple(str(d) for d in self.dtypes)}"
        if self.ranks and len(spec.shape) not in self.ranks:
            return f"rank {len(spec.shape)} not in {self.ranks}"
        if self.available is not None and not self.available(spec):
            return self.why_unavailable or "kernel unavailable here"
        return None


@dataclass
class Kernel:
    """One implementation of a pattern family. `replacement` is a `*_replacement`-shaped callable."""

    name: str
    family: str
    condition: Condition
    timings_ms: dict[tuple[str, str], float] = field(default_factory=dict)  # (gpu name, size bucket) -> ms
    function: Callable | None = None  # what the replacement calls as `pool`

    def timing(self, gpu: str, bucket: str) -> float:
        return self.timings_ms.get((gpu, bucket), float("inf"))


class Registry:
    def __init__(self):
        self.kernels: dict[str, list[Kernel]] = {}  # family -> kernels, registration order
        self.patterns: list = []  # Pair / HandForm entries (pairs.py, patterns.py), tried in order
        self.replaced: Counter[str] = Counter()  # pattern name -> times replaced
        self.replaced_by: Counter[str] = Counter()  # "pattern -> kernel" -> times
        self.declined: Counter[str] = Counter()  # pattern name -> times matched but left alone
        self.declined_reasons: Counter[str] = Counter()  # "pattern: reason" -> times

    def register_kernel(self, kernel: Kernel) -> Kernel:
        self.kernels.setdefault(kernel.family, []).append(kernel)
        return kernel

    def register_pattern(self, pattern) -> None:
        if any(p.name == pattern.name for p in self.patterns):
            raise ValueError(f"pattern {pattern.name!r} is registered twice")
        self.patterns.append(pattern)

    def register_chain(self, name: str, ops, pattern, replacement, function, devices=("cuda", "cpu"), dtypes=()):
        """A linear chain of ops (a pass written by `liger-bot fuse`) and the kernel that replaces it, in one call:
        a generated pass needs nothing of this package but the registry it is handed."""
        from .chains import chain_pair

        dtypes = tuple(dtypes) or (torch.float32, torch.bfloat16, torch.float16)
        kernel = Kernel(f"{name}_kernel", name, Condition(tuple(devices), dtypes), function=function)
        self.register_kernel(kernel)
        self.register_pattern(chain_pair(name, tuple(ops), pattern, replacement, name))
        return kernel

    def pick(self, family: str, spec: OperandSpec, gpu: str | None = None) -> tuple[Kernel | None, str]:
        """The fastest applicable kernel and why: ("", kernel) or (None, every candidate's reason)."""
        gpu = gpu if gpu is not None else current_gpu(spec.device)
        bucket = size_bucket(spec.elements)
        reasons = []
        applicable = []
        for order, kernel in enumerate(self.kernels.get(family, [])):
            reason = kernel.condition.reason_against(spec)
            if reason is None:
                applicable.append((kernel.timing(gpu, bucket), order, kernel))
            else:
                reasons.append(f"{kernel.name}: {reason}")
        if not applicable:
            return None, "; ".join(reasons) or f"no kernel registered for {family}"
        return min(applicable, key=lambda item: item[:2])[2], ""

    def note_replaced(self, pattern: str, kernel: str, where: str) -> None:
        self.replaced[pattern] += 1
        self.replaced_by[f"{pattern} -> {kernel}"] += 1
        log.info("liger_fuse: replaced %s with %s at %s", pattern, kernel, where)

    def note_declined(self, pattern: str, reason: str, where: str) -> None:
        self.declined[pattern] += 1
        self.declined_reasons[f"{pattern}: {reason}"] += 1
        log.info("liger_fuse: left %s alone at %s (%s)", pattern, where, reason)


def current_gpu(device: str) -> str:
    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return device
