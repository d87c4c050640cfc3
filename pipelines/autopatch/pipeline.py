"""The autopatch pipeline on a local checkout: act, verify, and one commit on `liger-bot/autopatch-<model_type>`.

Nothing is written before the changeset has been built in memory, so refusals (an already-supported model, a
decision that needs review, a target of another shape) leave the checkout exactly as it was. The work happens
on the branch, made from the checkout's HEAD; the user's branch is checked out again at the end either way.
On success the branch keeps one commit. On a hard gate failure or an error the branch is deleted and the
working tree is clean; the report (PR body with the failing gates) is still written beside the checkout, at
`<checkout>/../<checkout name>.liger-bot/autopatch-<model_type>.md`, outside the target's tree.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import replace
from pathlib import Path

from pipelines import contract
from pipelines import pull_request
from pipelines.autopatch import act
from pipelines.autopatch import supported
from pipelines.autopatch import verify
from pipelines.autopatch.profile import DECISION_KEYS
from pipelines.autopatch.profile import Profile
from pipelines.changeset import format_with_target_style
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError
from pipelines.outcome import Report
from pipelines.outcome import gates_table
from pipelines.outcome import hard_failure
from pipelines.outcome import result_json
from pipelines.target import Checkout


@dataclass(frozen=True)
class PipelineResult:
    profile: Profile
    branch: str
    files: list[str]
    gates: list[GateResult]
    pr_title: str
    pr_body: str
    commit: str | None
    ok: bool
    report_path: Path | None = None
    pr: pull_request.BodyParts | None = None  # what the body was rendered from (the App renders it again)

    def to_json(self) -> dict:
        return result_json(
            self.profile,
            self.branch,
            self.files,
            self.gates,
            pr_body=self.pr_body,
            pr_title=self.pr_title,
            commit=self.commit,
            ok=self.ok,
            report_path=str(self.report_path) if self.report_path else None,
        )

    def summary(self) -> str:
        width = max(len(g.name) for g in self.gates) if self.gates else 0
        lines = [f"autopatch {self.profile.model_type}: {'OK' if self.ok else 'FAILED'}"]
        lines += [f"  {g.name.ljust(width)}  {g.status.value}  {g.headline}" for g in self.gates]
        if self.ok:
            lines.append(f"branch {self.branch} (commit {self.commit[:12]}), {len(self.files)} files")
        else:
            lines.append(f"branch {self.branch} was removed; the working tree is unchanged")
        if self.report_path:
            lines.append(f"PR body: {self.report_path}")
        return "\n".join(lines)


def branch_name(model_type: str) -> str:
    return contract.branch_name("autopatch", act.validate_model_type(model_type))


def report_path(checkout: Checkout, model_type: str) -> Path:
    return checkout.beside(f"autopatch-{model_type}.md")


def refuse_supported(checkout: Checkout, profile: Profile) -> None:
    """The checkout's own registry decides (the profile's `supported_by` may describe another Liger tree)."""
    registered = supported.supported_models(checkout.monkey_patch)
    if key := next((k for k in (profile.model_type, *profile.registry_keys) if k in registered), None):
        raise PipelineError(
            f"{key} is already supported by the target ({supported.REGISTRY_NAME}[{key!r}]); autopatch creates support"
            " for new models",
            hint="to change an existing patch, edit it by hand (modify mode is not automated yet)",
        )


def understand_model(model: str, checkout: Checkout) -> Profile:
    """`understand` from pipelines.autopatch.understand, imported lazily (it loads transformers and torch), with the
    digest of the modeling source it read, so a profile approved later is applied only to that same source."""
    import inspect

    from pipelines.autopatch.understand import understand

    takes_checkout = len(inspect.signature(understand).parameters) > 1
    profile = understand(model, checkout) if takes_checkout else understand(model)
    digest = modeling_source_digest(profile.identity.modeling_module)
    return replace(profile, identity=replace(profile.identity, source_sha256=digest))


def modeling_source_digest(modeling_module: str) -> str | None:
    spec = importlib.util.find_spec(modeling_module)
    if spec is None or not spec.origin:
        return None
    return hashlib.sha256(Path(spec.origin).read_bytes()).hexdigest()


def approved_profile(data: dict, settings: list[str]) -> Profile:
    """The profile a reviewer approved (its JSON), with the job's overrides, refused when the modeling source it was
    derived from has changed since: what is applied is what was shown."""
    from pipelines.autopatch.profile import parse_overrides

    profile = Profile.from_json(data)
    approved = profile.identity.source_sha256
    current = modeling_source_digest(profile.identity.modeling_module)
    if approved and current != approved:
        raise PipelineError(
            f"{profile.identity.modeling_file} changed since this profile was approved "
            f"(sha256 {approved[:12]} then, {str(current)[:12]} now)",
            hint="run understand again (`/liger retry`, or the CLI without --profile) and review the new profile",
        )
    return profile.with_overrides(parse_overrides(settings)) if settings else profile


def pr_title(profile: Profile) -> str:
    return f"Add Liger Kernel support for {profile.identity.display_name} ({profile.model_type})"


def _decisions_table(profile: Profile) -> str:
    rows = ["| Decision | Value | Method | Status |", "|---|---|---|---|"]
    for key in DECISION_KEYS:
        if key in profile.decisions:
            d = profile.decisions[key]
            rows.append(f"| {key} | `{d.value!r}` | {d.method.value} | {d.status.value} |")
    return "\n".join(rows)


def pr_parts(
    checkout: Checkout,
    profile: Profile,
    files: list[str],
    gates: list[GateResult],
    notes: tuple[str, ...],
    versions: dict[str, str] | None = None,
) -> pull_request.BodyParts:
    """What the PR says, for the target's own PR template where it has one (`pipelines.pull_request`); `versions`
    default to the installed ones (the evidence links cite the transformers release)."""
    ident, versions = profile.identity, versions or pull_request.installed_versions()
    added = f"Adds `apply_liger_kernel_to_{profile.model_type}` for `{ident.causal_lm_class}` (`{ident.modeling_file}`)"
    if ident.alias_of:  # no function of its own: the registry entry points to the owner's
        registry = supported.supported_models(checkout.monkey_patch)
        added = (
            f"Registers `{profile.model_type}` to `{registry.get(ident.alias_of)}`: transformers builds "
            f"{ident.config_class} models with `{ident.causal_lm_class}` (`{ident.modeling_file}`), {ident.alias_of}'s class"
        )
    summary = (
        f"{added}, generated by liger-bot autopatch: each decision below cites its source lines, and the patched model "
        "was run beside the unpatched one.\n\n" + ("\n".join(f"- `{f}`" for f in files) or "- (no files)")
    )
    parts = pull_request.BodyParts(
        summary=summary,
        details=_details(profile, gates, notes, versions["transformers"]),
        make_targets={
            "checkstyle": ("Checkstyle",),
            "test-convergence": tuple(g.name for g in gates if g.name.startswith("Convergence")),
        },
        reproduce=reproduce_command(profile),
    )
    return pull_request.for_target(checkout, parts, versions)


def reproduce_command(profile: Profile) -> str:
    sets = [
        f"--set {key}={d.value}"
        for key, d in profile.decisions.items()
        if d.method.value == "override"  # a reviewer's `--set field=value`: part of what made this patch
    ]
    return " ".join(["liger-bot autopatch", profile.model_type, "--repo DIR", *sets])


def _details(profile: Profile, gates: list[GateResult], notes: tuple[str, ...], transformers_version: str) -> str:
    review = profile.needs_review()
    known = [g for g in gates if g.status is GateStatus.SKIP and "tolerance" in g.detail]
    parts = ["### Profile", _decisions_table(profile), _evidence(profile, transformers_version)]
    parts += ["### Decisions needing review"]
    parts += ["\n".join(f"- `{k}`: {profile.decisions[k].reason or 'see evidence'}" for k in review) or "- none"]
    if notes:
        parts += ["### Conservative choices", "\n".join(f"- {n}" for n in notes)]
    if known:
        parts += ["### Known issues", "\n".join(f"- {g.name}: {g.detail}" for g in known)]
    return "\n\n".join(parts)


def _evidence(profile: Profile, version: str) -> str:
    """One collapsible block per decision: its value, how it was settled, and permalinks to the lines it rests on."""
    blocks = []
    for key in DECISION_KEYS:
        decision = profile.decisions.get(key)
        if decision is None or not decision.evidence:
            continue
        cited = [
            f"- [{e.file}:{e.lines[0]}-{e.lines[1]}]({pull_request.source_link(e.file, e.lines, version)})"
            + (f": `{_one_line(e.snippet)}`" if e.snippet else "")
            for e in decision.evidence
        ]
        summary = f"{key}: <code>{decision.value!r}</code> ({decision.method.value})"
        blocks.append(f"<details><summary>{summary}</summary>\n\n" + "\n".join(cited) + "\n\n</details>")
    return "\n".join(blocks)


def _one_line(snippet: str, limit: int = 120) -> str:
    line = " ".join(snippet.split()).replace("`", "'")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def write_body(checkout: Checkout, model_type: str, body: str) -> Path:
    """The body alone, for `gh pr create --body-file` (the report beside it starts with the title)."""
    path = checkout.beside(f"autopatch-{model_type}.pr_body.md")
    path.write_text(body)
    return path


def write_report(checkout: Checkout, model_type: str, title: str, body: str) -> Path:
    path = report_path(checkout, model_type)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {title}\n\n{body}")
    return path


def _restore(checkout: Checkout, original: str, branch: str) -> None:
    """Back to the user's branch with a clean tree; the autopatch branch is deleted."""
    git = checkout.git
    git.discard_changes()
    git.checkout(original)
    if git.branch_exists(branch):
        git.run("branch", "-D", branch)


def run_pipeline(
    checkout: Checkout,
    profile: Profile,
    progress: Callable[[str], None],
    runner: verify.Runner | None = None,
    gates: tuple = verify.GATES,
) -> PipelineResult:
    git, branch = checkout.git, branch_name(profile.model_type)
    refuse_supported(checkout, profile)
    if git.dirty_paths():
        raise PipelineError(
            f"{checkout.root} has uncommitted changes", hint="commit or stash them first (git stash -u)"
        )
    if git.branch_exists(branch):
        raise PipelineError(
            f"branch {branch} exists already", hint=f"delete it first: git -C {checkout.root} branch -D {branch}"
        )
    progress(f"act: generating the {profile.model_type} patch")
    changeset = act.build_changeset(checkout, profile)  # refusals happen here, before anything is written
    original, base = git.current_branch(), git.head()
    git.checkout(branch, create_from=base)
    try:
        changeset.write(checkout.root)
        format_with_target_style(checkout, changeset.paths)
        results = verify.verify(profile, checkout.root, runner, progress, gates)
        files = sorted(git.dirty_paths())
        ok = not hard_failure(results)
        title, parts = pr_title(profile), pr_parts(checkout, profile, files, results, changeset.notes)
        body = pull_request.render(parts, Report(tuple(results)))
        commit = (
            git.commit_all(f"{title}\n\nGenerated by liger-bot autopatch.\n\n{gates_table(results)}\n") if ok else None
        )
    except BaseException:
        _restore(checkout, original, branch)
        raise
    if ok:
        git.checkout(original)
    else:
        _restore(checkout, original, branch)
    path = write_report(checkout, profile.model_type, title, body)
    progress(f"PR body written to {path}")
    if ok:
        progress(pull_request.handoff(title, branch, write_body(checkout, profile.model_type, body)))
    return PipelineResult(profile, branch, files, results, title, body, commit, ok, path, parts)
