"""The chunked-loss pipeline end to end: spec -> understand -> profile -> act (on a branch) -> verify -> PR body."""

from __future__ import annotations

from pathlib import Path

from pipelines import contract
from pipelines import pull_request
from pipelines.changeset import format_with_target_style
from pipelines.chunked_loss import act as act_mod
from pipelines.chunked_loss import profile as profile_mod
from pipelines.chunked_loss import spec as spec_mod
from pipelines.chunked_loss import understand as understand_mod
from pipelines.chunked_loss import verify as verify_mod
from pipelines.outcome import PipelineError
from pipelines.outcome import PipelineRun
from pipelines.outcome import Report
from pipelines.target import Checkout
from pipelines.target import open_checkout

ChunkedLossRun = PipelineRun  # the name its callers and type hints read


def parse_settings(settings: list[str] | tuple[str, ...]) -> dict[str, str]:
    parsed = {}
    for setting in settings:
        key, equals, value = setting.partition("=")
        if not equals or not key:
            raise PipelineError(f"--set {setting!r} is not field=value", hint="e.g. --set loss_type=simpo")
        parsed[key.strip()] = value.strip()
    return parsed


def understand(spec_text: str, repo: str | Path, name: str | None = None, settings=()):
    checkout = open_checkout(repo)
    spec = spec_mod.resolve(spec_text, checkout.root, name)
    act_mod.check_no_clash(checkout, spec.name)
    u = understand_mod.understand(spec, checkout.root, parse_settings(settings))
    return checkout, u, profile_mod.build(u)


def branch_name(name: str) -> str:
    return contract.branch_name("chunked-loss", name)


def run(
    spec_text: str,
    repo: str | Path,
    name: str | None = None,
    out_dir: Path | None = None,
    progress=print,
    settings=(),
) -> ChunkedLossRun:
    checkout, u, profile = understand(spec_text, repo, name, settings)
    out_dir = checkout.output_dir(out_dir, f"chunked-loss-{u.spec.name}")
    progress(
        f"understood {spec_text}: {profile.kind}, per-chunk loss proven to decompose over chunks "
        f"{profile.decomposition['chunks']}; writing {profile.module_class_name}"
    )
    changeset = act_mod.build_changeset(checkout, u)  # everything in memory first: a refusal writes nothing
    branch = branch_name(u.spec.name)
    checkout.git.checkout(branch, create_from="HEAD")
    changeset.write(checkout.root)
    format_with_target_style(checkout, changeset.paths)
    checkout.git.commit_all(
        f"Add {profile.module_class_name}: chunked loss generated from {spec_text}\n\n{reproduce(spec_text, u.spec.name, settings)}"
    )
    progress(f"wrote {len(changeset.paths)} files on branch {branch}")
    out_dir.mkdir(parents=True, exist_ok=True)
    gates = verify_mod.verify(checkout, u.spec.name, changeset.paths, out_dir, progress)
    parts = pr_parts(checkout, profile, out_dir, spec_text, settings)
    body = pull_request.render(parts, Report(tuple(gates)))
    (out_dir / "pr_body.md").write_text(body)
    title = f"Add {profile.module_class_name}: a chunked loss generated from {spec_text}"
    progress(pull_request.handoff(title, branch, out_dir / "pr_body.md"))
    return ChunkedLossRun(profile, branch, changeset.paths, gates, body, parts, title)


def reproduce(spec_text: str, name: str, settings=()) -> str:
    return f"liger-bot chunked-loss {spec_text} --repo DIR --name {name}" + "".join(f" --set {s}" for s in settings)


def pr_parts(
    checkout: Checkout,
    profile: profile_mod.ChunkedLossProfile,
    out_dir: Path,
    spec_text: str,
    settings=(),
) -> pull_request.BodyParts:
    """What the PR says, for the target's own PR template where it has one (`pipelines.pull_request`)."""
    summary = (
        f"Adds `{profile.module_class_name}` ({profile.kind}), a chunked loss on `{profile.base_class}` generated from "
        f"`{profile.source}`: the hidden states are projected chunk by chunk and the `[B*T, V]` logits are never held. "
        f"The per-chunk loss was proven to decompose over chunks by running the reference on a whole batch against "
        f"the per-chunk function on chunks {profile.decomposition['chunks']}."
    )
    testing = []
    table = out_dir / "benchmark.md"
    if table.exists():
        testing += [f"### Benchmark\n{table.read_text()}"]
    details = "\n".join(
        ["<details><summary>Chunked-loss profile</summary>", "", profile.to_markdown(), "", "</details>"]
    )
    parts = pull_request.BodyParts(
        summary=summary,
        details=details,
        testing="\n\n".join(testing),
        make_targets={"checkstyle": ("checkstyle",)},
        reproduce=reproduce(spec_text, profile.loss_name, settings),
    )
    return pull_request.for_target(checkout, parts)
