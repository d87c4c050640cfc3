"""The generated ops' relaunch cache key (`_key`, DIRECT_LAUNCH): two launches share a key exactly when Triton
specializes them alike. A coarser key would relaunch a kernel compiled for another alignment, `== 1` or integer
width; a finer one would miss the cache."""

import ast
import itertools

import pytest
import torch
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import BaseBackend

from pipelines import render
from tests.kernel_templates.samples import kernel as kernel_samples

INTS = [1, 2, 16, 17, 4096, 2**31 - 1, 2**31, 2**31 + 16]
FLOATS = [1e-6, 1.0]


def _tensors():
    out = []
    for dtype in (torch.float32, torch.bfloat16):
        buffer = torch.zeros(64, dtype=dtype)
        out += [buffer, buffer[1:]]  # 16-byte aligned, then one element off
    return out


@pytest.fixture(scope="module")
def contexts():
    return dict(kernel_samples.samples())


def _key_function(template: str, context: dict):
    """`_key` and the helpers it calls, taken from the rendered ops file (the rest needs a liger checkout)."""
    tree = ast.parse(render.render(template, **context))
    helpers = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in ("_key", "_specialization")]
    namespace = {"torch": torch}
    exec(compile(ast.Module(helpers, type_ignores=[]), template, "exec"), namespace)
    return namespace["_key"]


def _triton_specialization(args) -> tuple:
    return tuple(native_specialize_impl(BaseBackend, arg, False, True, True) for arg in args)


def _assert_same_partition(pairs):
    by_key, by_triton = {}, {}
    for key, triton_spec in pairs:
        assert by_key.setdefault(key, triton_spec) == triton_spec, f"one key, two Triton specializations: {key}"
        assert by_triton.setdefault(triton_spec, key) == key, f"one Triton specialization, two keys: {triton_spec}"


def test_rowwise_key_follows_every_argument_triton_specializes_on(contexts):
    key = _key_function("kernel/ops_rowwise.py.j2", contexts["rowwise norm"])
    pairs = []
    # the shape of a row-wise launch: pointers, strides and sizes, a runtime float
    for y, stride, x, eps, n_rows in itertools.product(_tensors(), INTS, _tensors(), FLOATS, INTS):
        args = (y, stride, x, eps, n_rows)
        pairs.append((key("forward", (1024, 4), 4, *args), _triton_specialization(args)))
    _assert_same_partition(pairs)


def test_rowwise_key_holds_the_constexprs_and_warps_by_value(contexts):
    key = _key_function("kernel/ops_rowwise.py.j2", contexts["rowwise norm"])
    args = (torch.zeros(8), 16)
    keys = {
        key("forward", constexprs, warps, *args) for constexprs in ((1024, 4), (1024, 2), (512, 4)) for warps in (4, 8)
    }
    assert len(keys) == 6
    assert key("forward", (1024, 4), 4, *args) != key("backward", (1024, 4), 4, *args)


def test_elementwise_key_follows_every_argument_triton_specializes_on(contexts):
    key = _key_function("kernel/ops_elementwise.py.j2", contexts["elementwise relu2"])
    pairs = []
    for y, x, n_elements in itertools.product(_tensors(), _tensors(), INTS):
        pairs.append((key("forward", n_elements, x, y), _triton_specialization((y, x, n_elements))))
    _assert_same_partition(pairs)
