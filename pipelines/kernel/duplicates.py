"""Is the op already a kernel of the target? Settled by running both, never by name (`relu2` is Liger's
`LigerReLUSquared` under another name): the reference and every one-input module the target exports are run on
the same random rows, with the reference's weights (set away from their initial values) copied into the candidate
wherever the two hold tensors of the same shapes. The target's code runs in a child under Triton's interpreter, as
its unit tests do here.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from pipelines.commands import run_command
from pipelines.kernel.reference import ReferenceCode
from pipelines.kernel.understand import PROBE_SHAPE
from pipelines.kernel.verify import cuda_available
from pipelines.outcome import PipelineError
from pipelines.target import Checkout

CHECK_TIMEOUT_S = 300

_CHILD = r"""
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
inputs = [torch.randn(rows, hidden, device=device) for _ in range(2)]
expected = [reference(x.clone()) for x in inputs]
import liger_kernel.transformers as exported

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
    if candidate is None:
        continue
    theirs, ours = candidate.state_dict(), list(reference.state_dict().values())
    if [tuple(t.shape) for t in theirs.values()] != [tuple(t.shape) for t in ours]:
        continue
    try:
        candidate.load_state_dict(dict(zip(theirs, ours)))
        candidate.to(device)
        with torch.no_grad():
            got = [candidate(x.clone()) for x in inputs]
    except Exception:
        unrunnable.append(name)  # takes other arguments, or its kernel does not run here (the interpreter)
        continue
    checked += 1
    same = all(
        isinstance(g, torch.Tensor) and g.shape == e.shape and torch.allclose(g.float(), e.float(), rtol=1e-4, atol=1e-5)
        for g, e in zip(got, expected)
    )
    if same:
        matches.append(f"{cls.__module__}.{name}")
print("MATCHES " + json.dumps({"matches": matches, "checked": checked, "unrunnable": unrunnable}))
"""


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
    note = f"compared with {found['checked']} of the target's one-input modules by running them" + (
        f"; {len(skipped)} could not run on this input here ({', '.join(skipped[:8])}{' ...' if len(skipped) > 8 else ''})"
        if skipped
        else ""
    )
    return DuplicateCheck(found["matches"], note)
