"""The row-wise backward's column split: a backward that reduces nothing along a row (DyT: element-wise, with
column-sum and whole-tensor-sum parameter gradients) takes blocks of columns on a second grid axis, so an SM holds
several programs; a backward with a row reduction (RMSNorm) keeps whole rows. Run under TRITON_INTERPRET=1 with a
column block smaller than the row, so several blocks and a ragged last one are exercised on the CPU."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from pipelines.kernel import act
from pipelines.kernel import spec
from pipelines.kernel import understand

# the generated DyT module against float64 autograd of Liger's own reference, over shapes and column blocks
CHECK = textwrap.dedent(
    """
    import json, sys
    import torch
    from liger_kernel.ops import split_dyt as ops
    sys.path.insert(0, ".")
    from test.transformers.test_dyt import TorchDyT

    ops.BACKWARD_COL_BLOCK = int(sys.argv[1])
    rows, cols, programs_per_sm = (int(v) for v in sys.argv[2:5])
    ops.BACKWARD_PROGRAMS_PER_SM = programs_per_sm
    torch.manual_seed(0)
    x = torch.randn(rows, cols, dtype=torch.float64)
    ref = TorchDyT(cols, beta=True).double()
    with torch.no_grad():
        ref.alpha.fill_(0.7)
        ref.gamma.copy_(torch.randn(cols, dtype=torch.float64))
        ref.beta.copy_(torch.randn(cols, dtype=torch.float64))
    dy = torch.randn(rows, cols, dtype=torch.float64)
    leaf = x.clone().requires_grad_(True)
    ref(leaf).backward(dy)
    want = [leaf.grad, ref.alpha.grad, ref.gamma.grad, ref.beta.grad]
    f = lambda t: t.detach().float()
    got = ops.split_dyt_backward(f(dy).clone(), f(x), f(ref.alpha), f(ref.gamma), f(ref.beta), in_place=False)
    err = [((g.double() - w).abs().max() / w.abs().max()).item() for g, w in zip(got, want)]
    print(json.dumps(err))
    """
)


@pytest.fixture(scope="module")
def dyt_checkout(tmp_path_factory):
    from pipelines import target

    checkout = target.fetch(tmp_path_factory.mktemp("split") / "liger-kernel")
    dyt = spec.resolve("test/transformers/test_dyt.py:TorchDyT", checkout.root, name="split_dyt")
    files = act.render_files(understand.understand(dyt, checkout.root))
    ops = next(text for path, text in files.items() if str(path).endswith("ops/split_dyt.py"))
    checkout.path("src/liger_kernel/ops/split_dyt.py").write_text(ops)
    return checkout, ops


def _errors(checkout, col_block: int, rows: int, cols: int, programs_per_sm: int = 4) -> list[float]:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(checkout.path("src"))}
    argv = [sys.executable, "-c", CHECK, str(col_block), str(rows), str(cols), str(programs_per_sm)]
    done = subprocess.run(argv, cwd=checkout.root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_dyt_backward_splits_its_columns_and_rmsnorm_keeps_whole_rows(dyt_checkout, tmp_path):
    _, ops = dyt_checkout
    assert "(col_blocks, n_programs)," in ops and "partial_id = program_id * tl.num_programs(0)" in ops
    norm = understand.understand(
        spec.resolve("test/transformers/test_rms_norm.py:LlamaRMSNorm", dyt_checkout[0].root), dyt_checkout[0].root
    )
    assert act.context(norm)["column_split"] is False  # its backward sums each row: the row stays in one program


@pytest.mark.slow
@pytest.mark.parametrize(
    "col_block, rows, cols, programs_per_sm",
    [
        (16, 37, 40, 4),  # three blocks a row, the last ragged; one row program a row (sm_count is 1 on the CPU)
        (16, 9, 64, 1),  # four blocks a row, one row program for all nine rows
        (64, 5, 40, 4),  # one block wider than the row
    ],
)
def test_split_backward_matches_float64_autograd(dyt_checkout, col_block, rows, cols, programs_per_sm):
    errors = _errors(dyt_checkout[0], col_block, rows, cols, programs_per_sm)
    assert max(errors) < 1e-5, dict(zip(["dx", "dalpha", "dgamma", "dbeta"], errors, strict=True))
