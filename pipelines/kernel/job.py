"""The kernel pipeline's row of the contract (pipelines.contract): a PyTorch op in, its Triton kernel, module,
tests and benchmark out; a tier-3 op is refused, or (with the provider on) drafted in the stage child."""

from __future__ import annotations

import tempfile
from pathlib import Path

from pipelines import pull_request
from pipelines.contract import BRANCH_PREFIX
from pipelines.contract import DRAFT
from pipelines.contract import TIER3_DRAFTS
from pipelines.contract import Outcome
from pipelines.contract import Pipeline
from pipelines.contract import Progress
from pipelines.contract import Request
from pipelines.contract import Understood
from pipelines.contract import Usage
from pipelines.contract import branch_name
from pipelines.contract import field_table
from pipelines.contract import file_in_checkout
from pipelines.contract import run_outcome
from pipelines.outcome import GateResult
from pipelines.outcome import PipelineError
from pipelines.outcome import hard_failure

USAGE = Usage(
    "SPEC [--name NAME] [--force]",
    "turn a PyTorch op (a transformers activation such as `relu2`, or `path/in/repo.py:function`) into a "
    "Triton kernel with its module, tests and benchmark; verify it and open a draft PR",
    target="kernel spec",
    options=("name", "force"),
)
FIELDS = (
    "operation_name",
    "module_class_name",
    "functional_name",
    "tier",
    "tier_description",
    "closest_existing_kernel",
    "forward_computation",
    "gradient_formulas",
    "backward_recompute",
    "source",
    "drafted_by",  # tier 3 with the provider on: who drafts it, and why the engine did not
    "refusal",
)
# what the engine derives by lowering, which a tier-3 op has none of (its draft is the model's)
LOWERED_FIELDS = ("closest_existing_kernel", "forward_computation", "gradient_formulas", "backward_recompute")


def profile_table(profile: dict) -> str:
    return field_table(profile, FIELDS)


def _spec(request: Request) -> str:
    if ":" in request.target or request.target.endswith(".py"):
        file_in_checkout(request.checkout, request.target)  # never a file outside the repository
    return request.target


def understand(request: Request) -> Understood:
    from pipelines.kernel import pipeline
    from pipelines.kernel.understand import Tier

    _, understanding, profile = pipeline.understand(_spec(request), request.checkout.root, request.options.get("name"))
    if understanding.tier == Tier.COMPLEX and request.options.get(TIER3_DRAFTS) != "on":
        raise PipelineError(f"{request.target}: {understanding.refusal}", hint="the default engine refuses tier-3 ops")
    branch = branch_name("kernel", understanding.spec.name)
    if understanding.tier == Tier.COMPLEX:  # the provider is on: its draft waits for a person's approval
        from pipelines.kernel.draft import Tier3

        task = Tier3.of(understanding)
        drafted = {
            **{k: v for k, v in profile.to_json().items() if k not in LOWERED_FIELDS},
            "drafted_by": "the anthropic provider (tier 3)",
            "refusal": task.refusal,
            "reference_code": task.reference_source(),
        }
        return Understood(drafted, branch, needs_review=("drafted_by",))
    return Understood(profile.to_json(), branch)


def act_verify(request: Request, progress: Progress) -> Outcome:
    from pipelines.kernel import pipeline

    if DRAFT in request.options:
        return draft_attempt(request, progress)

    run = pipeline.run(
        _spec(request),
        request.checkout.root,
        request.options.get("name"),
        request.out_dir,
        progress=progress,
        force=request.options.get("force") == "yes",
    )
    return run_outcome(
        run, pipeline.title(run.profile, request.target), run.branch.removeprefix(f"{BRANCH_PREFIX}kernel-")
    )


def draft_attempt(request: Request, progress: Progress) -> Outcome:
    """One tier-3 draft (the provider's text, from the worker) written and judged here, in the stage child: the
    model's code runs only where every stage runs the target's code. A passing draft is committed on the branch."""
    from pipelines.kernel import draft
    from pipelines.kernel.spec import pascal

    checkout = request.checkout
    task = draft.Tier3.again(_spec(request), checkout.root, request.options.get("name"), refusal="")
    branch = branch_name("kernel", task.name)
    if checkout.git.current_branch() != branch:
        checkout.git.checkout(branch, create_from="HEAD")
    gates = draft.attempt(checkout, task, request.options[DRAFT])
    for gate in gates:
        progress(gate.said())
    ok = not hard_failure(gates)
    if not ok:  # the next draft starts from a clean checkout again (understand refuses a dirty one)
        for path in task.paths:
            checkout.path(path).unlink(missing_ok=True)
    else:
        checkout.git.commit_all(
            f"Add Liger{pascal(task.name)}Function: a tier-3 kernel drafted by the anthropic provider\n\n"
            f"liger-bot kernel {request.target} (tier 3; the test is liger-bot's, the ops file the provider's)"
        )
    title = f"Add Liger{pascal(task.name)}Function: a tier-3 kernel drafted for {request.target}"
    # the worker writes the summary (bot.tier3): it holds the refusal, the drafts and their cost
    parts = pull_request.BodyParts(
        summary="",
        details=profile_table(request.profile or {}),
        make_targets={"checkstyle": ("checkstyle",)},
        reproduce=f"/liger kernel {request.target}  # tier 3, with the provider on",
    )
    return Outcome(branch, gates, task.paths, title, pull_request.for_target(checkout, parts), ok)


def verify_branch(request: Request, progress: Progress) -> list[GateResult]:
    """The kernel's gates on the bot's branch; `target` is the kernel's name (the branch's suffix)."""
    from pipelines.kernel import verify
    from pipelines.kernel.act import FUNCTIONAL
    from pipelines.kernel.act import OPS_INIT
    from pipelines.kernel.act import TRANSFORMERS_INIT
    from pipelines.kernel.act import KernelFiles
    from pipelines.kernel.spec import validate_name

    name = validate_name(request.target)
    files = KernelFiles.of(name)
    own = [files.ops, files.module, files.test, files.benchmark]
    if not any(request.checkout.path(p).exists() for p in own):
        raise PipelineError(f"this checkout holds no kernel named {name!r}", hint="check out the bot's branch first")
    paths = [str(p) for p in (*own, OPS_INIT, TRANSFORMERS_INIT, FUNCTIONAL) if request.checkout.path(p).exists()]
    out_dir = request.out_dir or Path(tempfile.mkdtemp(prefix=f"liger-bot-verify-{name}-"))
    progress(f"verify: kernel {name} ({len(paths)} files)")
    return verify.verify(request.checkout, name, paths, out_dir)


PIPELINE = Pipeline(understand, act_verify, profile_table, USAGE, verify_branch=verify_branch)
