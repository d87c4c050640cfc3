"""The fuse pipeline's row of the contract (pipelines.contract): a model file in, a torch.compile pass for its
largest unmatched chain of ops out (verified here: it has no `verify_branch`)."""

from __future__ import annotations

from pipelines.contract import Outcome
from pipelines.contract import Pipeline
from pipelines.contract import Progress
from pipelines.contract import Request
from pipelines.contract import Understood
from pipelines.contract import Usage
from pipelines.contract import branch_name
from pipelines.contract import cell
from pipelines.contract import file_in_checkout

USAGE = Usage(
    "path/in/repo.py:Factory",
    "trace the model `Factory()` returns and write a torch.compile pass for its largest unmatched chain of "
    "ops; verify it against eager and open a draft PR",
    target="model file",
)


def profile_table(profile: dict) -> str:
    rows = ["| found | where | ops | what happens |", "|---|---|---|---|"]
    for match in profile.get("matches") or []:
        kernel = match.get("kernel") or f"left alone: {match.get('reason', '')}"
        rows.append(f"| registry pattern `{match['pattern']}` | `{match['where']}` | | {cell(kernel)} |")
    for index, chain in enumerate(profile.get("chains") or []):
        ops = " → ".join(op.split(":", 1)[-1] for op in chain["ops"])
        what = f"{chain['share']:.1%} of bytes written" + ("; the pass is written for this one" if index == 0 else "")
        rows.append(f"| unmatched chain {index} | `{chain['where']}` | `{cell(ops)}` | {what} |")
    return "\n".join(rows)


def pr_title(target: str) -> str:
    return f"fuse: a torch.compile pass for {target}"


def pr_parts(target: str, result):
    """What the PR says (the App's and the CLI's body alike): the profile, the figures, the command."""
    from pipelines import pull_request

    figures = "\n".join(f"- {key}: `{value}`" for key, value in result.figures.items())
    return pull_request.BodyParts(
        summary=f"A torch.compile pass for `{target}`: its largest unmatched chain of ops, fused.",
        details="\n\n".join(["### Profile", profile_table(result.profile.to_json())]),
        testing="\n\n".join(["### Figures", figures or "- (none)"]),
        reproduce=f"liger-bot fuse {target} --repo DIR",
    )


def _spec(request: Request) -> str:
    """The absolute spec the fuse pipeline loads (it resolves paths against the process's directory)."""
    file = file_in_checkout(request.checkout, request.target)
    return f"{file}:{request.target.rpartition(':')[2]}"


def understand(request: Request) -> Understood:
    from pipelines.fuse import act
    from pipelines.fuse import model_spec
    from pipelines.fuse.understand import understand as understand_model

    model, inputs = model_spec.load(_spec(request))
    profile = understand_model(model, inputs)
    if not profile.chains:
        found = len(profile.matches)
        return Understood(profile.to_json(), "", summary=f"Nothing left to fuse: {found} registry match(es), no chain.")
    name = act.pass_name(profile.chains[0].ops)
    return Understood(profile.to_json(), branch_name("fuse", name.replace("_", "-")))


def act_verify(request: Request, progress: Progress) -> Outcome:
    from pipelines import pull_request
    from pipelines.fuse import pipeline

    result = pipeline.run(_spec(request), str(request.checkout.root), 0, progress=progress)
    return Outcome(
        branch=result.branch,
        gates=list(result.gates),
        files=list(result.files),
        pr_title=pr_title(request.target),
        pr=pull_request.for_target(request.checkout, pr_parts(request.target, result)),
        ok=not result.failed,
        profile=result.profile.to_json(),
    )


PIPELINE = Pipeline(understand, act_verify, profile_table, USAGE)
