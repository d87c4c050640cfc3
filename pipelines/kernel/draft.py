"""Tier 3 with the optional provider: the model drafts the ops file from the reference and the refusal's reason;
liger-bot writes the test (the reference it traced, forward and backward) and the same gates judge the draft.

`attempt` is one try: the draft and the bot's test written into the checkout, then checkstyle and the unit tests,
each a subprocess with the allow-listed environment (`pipelines.commands`: no key, no token). `run` is the whole
bounded loop on the bot's branch, committing only a draft that passed. Only ops without weights are drafted (the
test calls `Liger{Name}Function.apply(x)`); the module, functional API, exports and benchmark are not written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipelines import render
from pipelines.changeset import checkstyle_gate
from pipelines.changeset import format_with_target_style
from pipelines.kernel import verify as verify_mod
from pipelines.kernel.act import KernelFiles
from pipelines.kernel.act import context
from pipelines.kernel.spec import pascal
from pipelines.kernel.understand import Tier
from pipelines.kernel.understand import Understanding
from pipelines.llm import prompts
from pipelines.llm.repair import RepairRun
from pipelines.llm.repair import repair_loop
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError
from pipelines.target import Checkout


@dataclass(frozen=True)
class Tier3:
    u: Understanding

    @property
    def name(self) -> str:
        return self.u.spec.name

    @property
    def files(self) -> KernelFiles:
        return KernelFiles.of(self.name)

    @property
    def paths(self) -> list[str]:
        return [str(self.files.ops), str(self.files.test)]

    def check(self) -> None:
        if self.u.tier != Tier.COMPLEX:
            raise PipelineError(f"{self.u.spec.text} is tier {self.u.tier}: the deterministic engine writes it")
        if self.u.weights or self.u.reference.has_weights or self.u.reference.float_params:
            raise PipelineError(
                f"{self.u.spec.text}: the provider drafts tier-3 ops of one tensor only (no weights or parameters)",
                hint="write it with the liger-kernel-dev skill's tier-3 template",
            )

    def test_source(self) -> str:
        ctx = context_without_bodies(self.u)
        return render.render("kernel/tier3_test.py.j2", **ctx)

    def first_prompt(self) -> str:
        ref = self.u.reference
        source = "\n".join(ref.imports + ["import torch", "", ref.code])
        return prompts.draft_first(source, self.u.refusal, self.name)


def context_without_bodies(u: Understanding) -> dict:
    """act.context's names the tier-3 test needs (a tier-3 op has no lowered forward or backward)."""
    if u.forward is not None and u.backward is not None:
        return context(u)
    ref = u.reference
    return {
        "name": u.spec.name,
        "pascal": pascal(u.spec.name),
        "spec": u.spec.text,
        "source": ref.source_note,
        "reference_imports": ref.imports,
        "reference_code": ref.code.rstrip() + "\n",
        "reference_class": ref.class_name,
    }


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


def run(checkout: Checkout, u: Understanding, provider, attempts: int, progress=print) -> tuple[RepairRun, str]:
    """The loop on `liger-bot/kernel-<name>`: a passing draft is committed; a failed loop leaves the branch clean."""
    task = Tier3(u)
    task.check()
    branch = f"liger-bot/kernel-{task.name}"
    checkout.git.checkout(branch, create_from="HEAD")
    system = prompts.draft_system(task.name, pascal(u.spec.name))

    def try_draft(code: str) -> list[GateResult]:
        gates = attempt(checkout, task, code)
        for gate in gates:
            progress(gate.said())
        return gates

    result = repair_loop(provider, system, task.first_prompt(), try_draft, attempts)
    if result.ok:
        checkout.git.commit_all(
            f"Add Liger{pascal(u.spec.name)}Function: a tier-3 kernel drafted by the anthropic "
            f"provider for {u.spec.text}\n\nliger-bot kernel {u.spec.text} (provider: {provider.settings.model})"
        )
    else:
        for path in task.paths:
            Path(checkout.path(path)).unlink(missing_ok=True)
    return result, branch
