"""Tier 3 with the optional provider: the model drafts the ops file from the reference and the refusal's reason;
liger-bot writes the test (the reference it traced, forward and backward) and the same gates judge the draft.

`attempt` is one try: the draft and the bot's test written into the checkout, then checkstyle and the unit tests,
each a subprocess with the allow-listed environment (`pipelines.subprocesses`: no key, no token). The App runs it in
the stage child (pipelines.kernel.job.draft_attempt), one call per draft of the repair loop (pipelines.llm.repair,
driven by bot.tier3). Only ops without weights are drafted (the test calls `Liger{Name}Function.apply(x)`); the
module, functional API, exports and benchmark are not written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipelines import render
from pipelines.changeset import checkstyle_gate
from pipelines.changeset import format_with_target_style
from pipelines.kernel import reference as reference_mod
from pipelines.kernel import spec as spec_mod
from pipelines.kernel import verify as verify_mod
from pipelines.kernel.act import KernelFiles
from pipelines.kernel.reference import ReferenceCode
from pipelines.kernel.spec import Spec
from pipelines.kernel.spec import pascal
from pipelines.kernel.understand import Tier
from pipelines.kernel.understand import Understanding
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError
from pipelines.target import Checkout


@dataclass(frozen=True)
class Tier3:
    """What a draft is asked for and judged against: the spec, the reference liger-bot traced, the refusal."""

    spec: Spec
    reference: ReferenceCode
    refusal: str

    @classmethod
    def of(cls, u: Understanding) -> Tier3:
        if u.tier != Tier.COMPLEX:
            raise PipelineError(f"{u.spec.text} is tier {u.tier}: the deterministic engine writes it")
        if u.weights or u.reference.has_weights or u.reference.float_params:
            raise PipelineError(
                f"{u.spec.text}: the provider drafts tier-3 ops of one tensor only (no weights or parameters)",
                hint="write it with the liger-kernel-dev skill's tier-3 template",
            )
        return cls(u.spec, u.reference, u.refusal)

    @classmethod
    def again(cls, spec_text: str, root: Path, name: str | None, refusal: str) -> Tier3:
        """The task of an approved profile, rebuilt without tracing again (the reference is read, not run)."""
        spec = spec_mod.resolve(spec_text, root, name)
        return cls(spec, reference_mod.build(spec, root), refusal)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def files(self) -> KernelFiles:
        return KernelFiles.of(self.name)

    @property
    def paths(self) -> list[str]:
        return [str(self.files.ops), str(self.files.test)]

    def reference_source(self) -> str:
        return "\n".join([*self.reference.imports, "import torch", "", self.reference.code])

    def test_source(self) -> str:
        ref = self.reference
        return render.render(
            "kernel/tier3_test.py.j2",
            name=self.name,
            pascal=pascal(self.name),
            spec=self.spec.text,
            source=ref.source_note,
            reference_imports=ref.imports,
            reference_code=ref.code.rstrip() + "\n",
            reference_class=ref.class_name,
        )


def attempt(checkout: Checkout, task: Tier3, code: str) -> list[GateResult]:
    """Write one draft (replacing the last) and run the gates; the GPU gate SKIPs on a host without CUDA."""
    checkout.path(task.files.ops).parent.mkdir(parents=True, exist_ok=True)
    checkout.path(task.files.ops).write_text(code if code.endswith("\n") else code + "\n")
    checkout.path(task.files.test).write_text(task.test_source())
    format_with_target_style(checkout, [str(task.files.test)])  # the bot's own file; the draft is judged as written
    gates = [checkstyle_gate(checkout, task.paths)]
    for on_gpu in (False, True):
        failed = next((g for g in gates if g.status is GateStatus.FAIL and g.hard), None)
        label = "unit tests (GPU)" if on_gpu else "unit tests (CPU, TRITON_INTERPRET=1)"
        gates.append(
            verify_mod.skipped_after(failed, label) if failed else verify_mod.unit_tests(checkout, task.name, on_gpu)
        )
    return gates
