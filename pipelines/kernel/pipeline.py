"""The kernel pipeline end to end: spec -> understand -> profile -> act (on a branch) -> verify -> PR body."""

from __future__ import annotations

from pathlib import Path

from pipelines import pull_request
from pipelines.changeset import format_with_target_style
from pipelines.contract import branch_name
from pipelines.kernel import act as act_mod
from pipelines.kernel import duplicates
from pipelines.kernel import profile as profile_mod
from pipelines.kernel import spec as spec_mod
from pipelines.kernel import understand as understand_mod
from pipelines.kernel import verify as verify_mod
from pipelines.kernel.understand import Tier
from pipelines.outcome import GateResult
from pipelines.outcome import PipelineError
from pipelines.outcome import PipelineRun
from pipelines.outcome import Report
from pipelines.target import Checkout
from pipelines.target import open_checkout

KernelRun = PipelineRun  # the name its callers and type hints read


def understand(spec_text: str, repo: str | Path, name: str | None = None):
    checkout = open_checkout(repo)
    spec = spec_mod.resolve(spec_text, checkout.root, name)
    act_mod.check_no_clash(checkout, spec.name)
    u = understand_mod.understand(spec, checkout.root)
    return checkout, u, profile_mod.build(u)


def run(
    spec_text: str,
    repo: str | Path,
    name: str | None = None,
    out_dir: Path | None = None,
    progress=print,
    force: bool = False,
) -> KernelRun:
    checkout, u, profile = understand(spec_text, repo, name)
    out_dir = checkout.output_dir(out_dir, f"kernel-{u.spec.name}")
    progress(f"understood {spec_text}: tier {u.tier} ({profile.tier_description}), kernel {u.spec.name}")
    if u.tier == Tier.COMPLEX:
        raise PipelineError(f"{spec_text}: {u.refusal}", hint="the default engine refuses tier-3 ops")
    if not force:  # before anything is written: a copy of an existing kernel is refused with a pointer to it
        duplicate = duplicates.same_function(checkout, u.reference)
        progress(duplicate.note)
        if duplicate.matches:
            raise duplicate.refusal(spec_text)
    changeset = act_mod.build_changeset(checkout, u)  # everything in memory first: a refusal writes nothing
    git = checkout.git
    branch = branch_name("kernel", u.spec.name)
    git.checkout(branch, create_from="HEAD")
    changeset.write(checkout.root)
    format_with_target_style(checkout, changeset.paths)
    git.commit_all(
        f"Add {profile.module_class_name}: Triton kernel generated from {spec_text}\n\nliger-bot kernel {spec_text}"
    )
    progress(f"wrote {len(changeset.paths)} files on branch {branch}")
    out_dir.mkdir(parents=True, exist_ok=True)
    gates = verify_mod.verify(checkout, u.spec.name, changeset.paths, out_dir)
    parts = pr_parts(checkout, profile, out_dir, spec_text, force)
    body = pull_request.render(parts, Report(tuple(gates)))
    (out_dir / "pr_body.md").write_text(body)
    progress(pull_request.handoff(title(profile, spec_text), branch, out_dir / "pr_body.md"))
    return KernelRun(profile, branch, changeset.paths, gates, body, parts, title(profile, spec_text))


def title(profile: profile_mod.KernelProfile, spec_text: str) -> str:
    return f"Add {profile.module_class_name}: a Triton kernel generated from {spec_text}"


def pr_body(
    checkout: Checkout,
    profile: profile_mod.KernelProfile,
    gates: list[GateResult],
    out_dir: Path,
    spec_text: str,
    force: bool = False,
) -> str:
    """The rendered body (what `run` writes to pr_body.md)."""
    return pull_request.render(pr_parts(checkout, profile, out_dir, spec_text, force), Report(tuple(gates)))


def pr_parts(
    checkout: Checkout,
    profile: profile_mod.KernelProfile,
    out_dir: Path,
    spec_text: str,
    force: bool = False,
) -> pull_request.BodyParts:
    """What the PR says, for the target's own PR template where it has one (`pipelines.pull_request`)."""
    summary = (
        f"Adds `{profile.module_class_name}`, a Triton kernel generated from `{profile.source}`: tier {profile.tier} "
        f"({profile.tier_description}), forward and backward lowered from the ATen graph of the reference and of its "
        "autograd backward. Only the inputs are saved; the backward recomputes."
    )
    testing = []
    table = out_dir / "benchmark.md"
    if table.exists():
        testing += [f"### Benchmark\n{table.read_text()}"]
        if (out_dir / "benchmark.png").is_file():  # relative: pr_body.md sits beside it; the App links its forge's copy
            testing += ["![benchmark](benchmark.png)"]
    details = "\n".join(["<details><summary>Kernel profile</summary>", "", profile.to_markdown(), "", "</details>"])
    parts = pull_request.BodyParts(
        summary=summary,
        details=details,
        testing="\n\n".join(testing),
        make_targets={"checkstyle": ("checkstyle",)},
        reproduce=f"liger-bot kernel {spec_text} --repo DIR --name {profile.operation_name}" + " --force" * force,
    )
    return pull_request.for_target(checkout, parts)
