"""The masked rewrite on its own: boolean selections followed by reductions become masks, run equal to the original
(outputs and gradients, every label True / False / mixed, chunk sizes 1 and more), and anything the masked form
would not reproduce exactly is left as it is, with the reason."""

from __future__ import annotations

import ast
import itertools

import pytest
import torch

from pipelines.chunked_loss import masked
from pipelines.chunked_loss.understand import load

# the unpaired per-chunk function's shape (the generator's prologue, then HFKTOLoss's body)
KTO_LIKE = """def f(x, m, r, kl=None, beta=0.1):
    chosen = x[m]
    rejected = x[~m]
    ref_chosen = r[m]
    ref_rejected = r[~m]
    if kl is None:
        kl = torch.zeros(1).to(chosen.device)
    chosen_ratio = chosen - ref_chosen
    if chosen.shape[0] != 0 or ref_chosen.shape[0] != 0:
        chosen_losses = 1 - F.sigmoid(beta * (chosen_ratio - kl))
    else:
        chosen_losses = torch.Tensor([]).to(chosen.device)
    rejected_ratio = rejected - ref_rejected
    if rejected.shape[0] != 0 or ref_rejected.shape[0] != 0:
        rejected_losses = 1 - F.sigmoid(beta * (kl - rejected_ratio))
    else:
        rejected_losses = torch.Tensor([]).to(rejected.device)
    losses = torch.cat((chosen_losses, rejected_losses), 0)
    return losses.sum() / 7, (beta * chosen_ratio).sum(), (beta * rejected_ratio).sum()
"""

REDUCTIONS = """def f(x, m, r, beta=0.1):
    chosen = F.logsigmoid(beta * x[m]) * r[m]
    rejected = torch.exp(x[~m]).clamp(min=0.01)
    count = len(chosen)
    return (
        chosen.mean(),
        torch.sum(rejected) / rejected.numel(),
        chosen.sum() / (count + 1),
        torch.mean(rejected) + x.sum() / x.shape[0],
        (chosen > -0.1).sum(),
        chosen.sum() / rejected.size(0),
    )
"""

# a mask the loss computes itself, as a paired reference might
COMPUTED_MASK = """def f(x, m, r, beta=0.1):
    better = x > r
    margin = x - r
    kept = margin[better]
    if kept.numel() > 0:
        hinge = torch.relu(1 - beta * kept)
    else:
        hinge = torch.empty(0)
    return hinge.sum() / x.shape[0], margin[~better].mean()
"""


def _rewritten(source: str) -> masked.Rewritten:
    return masked.rewrite(ast.parse(source).body[0], {"x", "r"}, {"m"})


def _label_patterns():
    for size in (1, 2, 5):
        for labels in itertools.product((True, False), repeat=size):
            if size < 5 or len(set(labels)) == 1 or labels == (True, False, True, True, False):
                yield torch.tensor(labels)


def _outputs_and_grads(fn, x, m, r):
    x, r = x.clone().requires_grad_(), r.clone().requires_grad_()
    outputs = [torch.as_tensor(o).double() for o in fn(x, m, r)]
    found = [o.detach() for o in outputs]
    for output in outputs:  # an output with no graph (an empty selection's sum) has zero gradients
        grads = (
            torch.autograd.grad(output, (x, r), retain_graph=True, allow_unused=True)
            if output.requires_grad
            else (None, None)
        )
        found += [torch.zeros_like(x) if g is None else g for g in grads]
    return found


def _assert_same(original: str, rewritten: ast.FunctionDef):
    before, after = load(original, "original"), load(ast.unparse(rewritten), "rewritten")
    generator = torch.Generator().manual_seed(0)
    for m in _label_patterns():
        x = -6 * torch.rand(len(m), dtype=torch.float64, generator=generator)
        r = -6 * torch.rand(len(m), dtype=torch.float64, generator=generator)
        want, got = _outputs_and_grads(before, x, m, r), _outputs_and_grads(after, x, m, r)
        assert len(want) == len(got)
        for a, b in zip(want, got, strict=True):
            torch.testing.assert_close(b, a, atol=1e-12, rtol=0, equal_nan=True, msg=f"labels {m.tolist()}")


def _selects_or_branches_on_sizes(fn: ast.FunctionDef) -> bool:
    subscripts = any(isinstance(n, ast.Subscript) and ast.unparse(n.slice) in ("m", "~m") for n in ast.walk(fn))
    size_tests = any(isinstance(n, ast.If) and "shape" in ast.unparse(n.test) for n in ast.walk(fn))
    return subscripts or size_tests


def test_a_kto_like_loss_becomes_masks_with_no_size_branch_and_runs_equal():
    result = _rewritten(KTO_LIKE)
    assert result.fn is not None, result.reason
    assert result.selections == ["x[m]", "x[~m]", "r[m]", "r[~m]"]
    assert not _selects_or_branches_on_sizes(result.fn)
    source = ast.unparse(result.fn)
    assert "losses = torch.where(m, chosen_losses, rejected_losses)" in source
    assert "torch.where(m, beta * chosen_ratio, 0).sum()" in source
    assert "torch.where(~m, beta * rejected_ratio, 0).sum()" in source
    _assert_same(KTO_LIKE, result.fn)


def test_sums_means_and_sizes_of_selections_become_masked_reductions_and_run_equal():
    result = _rewritten(REDUCTIONS)
    assert result.fn is not None, result.reason
    source = ast.unparse(result.fn)
    assert "count = m.sum()" in source  # len(chosen): the mask's count, a tensor
    assert "torch.where(~m, rejected, 0).sum() / (~m).sum()" in source  # torch.sum(rejected) / rejected.numel()
    assert "x.sum() / x.shape[0]" in source  # a whole vector's reduction and size stay as they are
    _assert_same(REDUCTIONS, result.fn)  # a mean of an empty selection is nan in both


def test_a_mask_the_loss_computes_is_rewritten_too_and_runs_equal():
    result = _rewritten(COMPUTED_MASK)
    assert result.fn is not None, result.reason
    assert "torch.where(better, hinge, 0).sum()" in ast.unparse(result.fn)
    assert not any(isinstance(n, ast.If) for n in ast.walk(result.fn))
    _assert_same(COMPUTED_MASK, result.fn)


@pytest.mark.parametrize(
    "body, reason",
    [
        ("return x[m]", "returned as a selection"),
        ("return x[m].max()", "not an element-wise function"),
        ("return x[m] + x", "beside values of other sequences"),
        ("return x[m].shape[0]", "returned as a selection or its size"),
        ("return torch.zeros(x[m].shape[0])", "not an element-wise function"),
        ("return x[m + 1].sum()", "an indexing of a per-sequence value"),  # an integer index, not a mask
        ("c = x[m]\n    if c > -1:\n        return c.sum()\n    return c.mean()", "a branch on per-sequence values"),
        ("c = x[m]\n    for _ in range(2):\n        c = c * 2\n    return c.sum()", "a For statement"),
        ("return torch.cat((x[m], r[m])).sum()", "not a concatenation of a selection and its complement"),
        ("return torch.cat((x[m], r[~m])).cumsum(0)", "not an element-wise function"),
        ("return x[m][0]", "an indexing of a per-sequence value"),
        ("c = x[m]\n    m = ~m\n    return c.sum()", "reassigned while a mask reads it"),
        (
            "c = x[m]\n    if c.shape[0] > 0:\n        s = c * 2\n    else:\n        s = torch.zeros(1)\n    return s.sum()",
            "does more than make empty tensors",
        ),
        (
            "c = x[m]\n    if c.shape[0] > 0:\n        s = c * 2\n        t = c\n    else:\n        s = torch.Tensor([])\n"
            "    return s.sum()",
            "assign different names",
        ),
        (
            "c = x[m]\n    if c.shape[0] > 0:\n        s = r * 2\n    else:\n        s = torch.Tensor([])\n    return s.sum()",
            "not selected by its mask",
        ),
    ],
)
def test_what_the_masked_form_would_not_reproduce_exactly_is_left_as_it_is(body, reason):
    result = _rewritten(f"def f(x, m, r):\n    {body}\n")
    assert result.fn is None
    assert reason in result.reason


def test_a_function_without_a_boolean_selection_is_left_as_it_is():
    result = _rewritten("def f(x, m, r, beta=0.1):\n    return (x.sum() * beta + r).sum(), torch.where(m, x, r)\n")
    assert result.fn is None and result.reason == "no boolean selection"
