"""Is the op already a kernel of the target? Settled by running both, never by name (`relu2` is Liger's
`LigerReLUSquared` under another name, `silu(a) * b` is `liger_swiglu`): the reference and every module the target
exports are run on the same random rows (as many tensors as the reference takes), with the reference's weights (set
away from their initial values) copied into the candidate wherever the two hold tensors of the same shapes; a
weightless reference is also compared with every `liger_*` function of the target's functional API that takes
exactly its inputs. The target's code runs in a child under Triton's interpreter, as its unit tests do here.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from pipelines.kernel.reference import ReferenceCode
from pipelines.kernel.understand import PROBE_SHAPE
from pipelines.kernel.verify import cuda_available
from pipelines.outcome import PipelineError
from pipelines.subprocesses import run_command
from pipelines.target import Checkout

CHECK_TIMEOUT_S = 300

# Triton 3.9's interpreter passes a float kernel argument as a Python float (its `_implicit_cvt` has no float case),
# so Liger's kernels that call `eps.to(tl.float32)` (swiglu, geglu, fused add + RMSNorm, RMSNorm, DyT) raise there;
# the child hands them a one-element fp32 tensor instead, as the compiled kernel sees one
_INTERPRETER_FLOATS = r"""
import os
if os.environ.get("TRITON_INTERPRET") == "1":
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    _convert = interpreter._implicit_cvt

    def _float_as_tensor(arg):
        if isinstance(arg, float):
            return tl.tensor(interpreter.TensorHandle(np.array([arg], dtype=np.float32), tl.float32), tl.float32)
        return _convert(arg)

    interpreter._implicit_cvt = _float_as_tensor
"""

_CHILD = (
    _INTERPRETER_FLOATS
    + r"""
import json, sys
import torch
job = json.loads(sys.stdin.read())
namespace = {"torch": torch, "__name__": "liger_bot_reference"}
exec(compile(job["source"], "<reference>", "exec"), namespace)
rows, hidden = job["shape"]
torch.manual_seed(0)
reference = namespace[job["class_name"]](*([hidden] if job["has_weights"] else []))
with torch.no_grad():
    for tensor in reference.state_dict().values():
        tensor.copy_(torch.rand_like(tensor) + 0.5)  # not ones or zeros: a weightless kernel cannot match by chance
device = "cuda" if torch.cuda.is_available() else "cpu"
reference.to(device)
n_inputs = job["n_inputs"]
trials = [[torch.randn(rows, hidden, device=device) for _ in range(n_inputs)] for _ in range(2)]

def outputs(fn, xs):
    result = fn(*[x.clone() for x in xs])
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)

def same(got, expected):
    return len(got) == len(expected) and all(
        isinstance(g, torch.Tensor) and g.shape == e.shape and torch.allclose(g.float(), e.float(), rtol=1e-4, atol=1e-5)
        for g, e in zip(got, expected)
    )

expected = [outputs(reference, xs) for xs in trials]
import inspect
import liger_kernel.transformers as exported
import liger_kernel.transformers.functional as functional

def required(fn):
    # how many positional tensors a call needs (-1: it takes any number, or says nothing)
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return -1
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return -1
    return sum(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)

def built(cls):
    for args in ((), (hidden,)):
        try:
            return cls(*args)
        except Exception:
            continue
    return None

matches, checked, unrunnable = [], 0, []
for name in sorted(n for n in dir(exported) if n.startswith("Liger")):
    cls = getattr(exported, name)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        continue
    candidate = built(cls)
    if candidate is None or required(candidate.forward) not in (n_inputs, -1):
        continue
    theirs, ours = candidate.state_dict(), list(reference.state_dict().values())
    if [tuple(t.shape) for t in theirs.values()] != [tuple(t.shape) for t in ours]:
        continue
    try:
        candidate.load_state_dict(dict(zip(theirs, ours)))
        candidate.to(device)
        with torch.no_grad():
            got = [outputs(candidate, xs) for xs in trials]
    except Exception:
        unrunnable.append(name)  # takes other arguments, or its kernel does not run here (the interpreter)
        continue
    checked += 1
    if all(same(g, e) for g, e in zip(got, expected)):
        matches.append(f"{cls.__module__}.{name}")

functions = 0
if not job["has_weights"]:  # a functional takes its weights as arguments: only a weightless op maps onto one alone
    for name in sorted(n for n in dir(functional) if n.startswith("liger_")):
        fn = getattr(functional, name)
        if not callable(fn) or required(fn) != n_inputs:
            continue
        try:
            with torch.no_grad():
                got = [outputs(fn, xs) for xs in trials]
        except Exception:
            unrunnable.append(name)
            continue
        checked += 1
        functions += 1
        if all(same(g, e) for g, e in zip(got, expected)):
            matches.append(f"liger_kernel.transformers.functional.{name}")
print("MATCHES " + json.dumps({"matches": matches, "checked": checked, "functions": functions, "unrunnable": unrunnable}))
"""
)


@dataclass(frozen=True)
class DuplicateCheck:
    matches: list[str]  # the target's modules computing what the reference computes
    note: str  # what was compared, and what could not be

    def refusal(self, spec_text: str) -> PipelineError:
        return PipelineError(
            f"{spec_text} computes what the target's {', '.join(self.matches)} computes (run side by side on the same "
            "random inputs and weights); a second copy of a kernel is not a contribution",
            hint="use the existing kernel, or pass --force to write this one anyway",
        )


def same_function(checkout: Checkout, ref: ReferenceCode) -> DuplicateCheck:
    job = {
        "source": "\n".join(ref.imports) + "\n" + ref.code,
        "class_name": ref.class_name,
        "has_weights": ref.has_weights,
        "n_inputs": len(ref.inputs),
        "shape": list(PROBE_SHAPE),
    }
    env = {"PYTHONPATH": f"{checkout.src.parent}:{checkout.root}"}
    if not cuda_available():
        env |= {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    result = run_command(
        [sys.executable, "-c", _CHILD], cwd=checkout.root, env=env, timeout=CHECK_TIMEOUT_S, stdin=json.dumps(job)
    )
    line = next((ln for ln in result.output.splitlines() if ln.startswith("MATCHES ")), None)
    if not result.ok or line is None:
        return DuplicateCheck([], f"the comparison with the target's kernels did not run: {result.tail(3)}")
    found = json.loads(line.removeprefix("MATCHES "))
    skipped = found["unrunnable"]
    inputs = "one-input" if len(ref.inputs) == 1 else f"{len(ref.inputs)}-input"
    modules = found["checked"] - found["functions"]
    functions = f" and {found['functions']} of its liger_* functions" if found["functions"] else ""
    note = f"compared with {modules} of the target's modules{functions} on {inputs} calls, by running them" + (
        f"; {len(skipped)} could not run on this input here ({', '.join(skipped[:8])}{' ...' if len(skipped) > 8 else ''})"
        if skipped
        else ""
    )
    return DuplicateCheck(found["matches"], note)
