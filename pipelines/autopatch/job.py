"""The autopatch pipeline's row of the contract (pipelines.contract): a model in, its 12 decisions at the
checkpoint, the patch and its gates out; `verify_branch` re-runs the gates on the pushed branch on a GPU runner."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from pipelines.autopatch.profile import OVERRIDE_HELP
from pipelines.contract import Outcome
from pipelines.contract import Pipeline
from pipelines.contract import Progress
from pipelines.contract import Request
from pipelines.contract import Understood
from pipelines.contract import Usage
from pipelines.contract import branch_name
from pipelines.contract import cell
from pipelines.outcome import GateResult
from pipelines.outcome import hard_failure
from pipelines.target import Checkout

USAGE = Usage(
    "MODEL [--set field=value ...]",
    "profile MODEL, then (after `/liger approve`) patch it into the target, verify it and open a draft PR",
    target="model",
    takes_settings=True,
)


def call_understand(understand: Callable, model: str, checkout):
    """Understand takes (model) or (model, checkout), depending on whether it needs the target."""
    if len(inspect.signature(understand).parameters) >= 2:
        return understand(model, checkout)
    return understand(model)


def validate_settings(_target: str | None, settings: list[str]) -> None:
    from pipelines.autopatch.profile import parse_overrides

    parse_overrides(settings)


def real_understand(model: str, checkout: Checkout):
    """The real understand, refusing before the checkpoint a model the target supports already."""
    from pipelines.autopatch import pipeline

    profile = pipeline.understand_model(model, checkout)
    pipeline.refuse_supported(checkout, profile)
    return profile


def real_run(checkout: Checkout, profile, progress):
    from pipelines.autopatch import pipeline

    return pipeline.run_pipeline(checkout, profile, progress)


def profile_table(profile: dict) -> str:
    rows = ["| decision | value | settled by | status |", "|---|---|---|---|"]
    for key, decision in (profile.get("decisions") or {}).items():
        status = decision.get("status", "")
        shown = f"**{status}**" if status != "settled" else status
        rows.append(f"| `{key}` | `{cell(decision.get('value'))}` | {decision.get('method', '')} | {shown} |")
    return "\n".join(rows)


def _attr(result, name: str, default=None):
    return result.get(name, default) if isinstance(result, dict) else getattr(result, name, default)


def approved_or_understood(request: Request, understand: Callable[[Request], object]):
    """The approved profile when the job holds one (what the reviewer saw is what is applied), else understand."""
    from pipelines.autopatch.pipeline import approved_profile

    if request.profile:
        return approved_profile(request.profile, list(request.settings))
    return understand(request)


def _with_settings(profile, settings: tuple[str, ...]):
    """The profile with the request's `field=value` overrides applied (none: the profile as understood)."""
    from pipelines.autopatch.profile import parse_overrides

    return profile.with_overrides(parse_overrides(list(settings))) if settings else profile


def _understood_here(request: Request):
    """understand on the bot's own branch: the target supports the model there already, so nothing refuses it."""
    from pipelines.autopatch import pipeline

    return _with_settings(pipeline.understand_model(request.target, request.checkout), request.settings)


def verify_branch(request: Request, progress: Progress) -> list[GateResult]:
    """Autopatch's gates on a checkout of the bot's branch (the patch already committed), for the approved profile
    when the request carries it; GPU gates run when this host has a GPU and SKIP (never PASS) when it has none."""
    from pipelines.autopatch import verify

    profile = approved_or_understood(request, _understood_here)
    return verify.verify(profile, request.checkout.root, verify.LocalRunner.detect(), progress)


def autopatch_pipeline(understand: Callable | None = None, run_pipeline: Callable | None = None) -> Pipeline:
    """The autopatch row; tests hand in other `understand(model, checkout)` / `run_pipeline(...)` entry points."""
    understand = understand or real_understand
    run_pipeline = run_pipeline or real_run

    def profile_for(request: Request):
        return _with_settings(call_understand(understand, request.target, request.checkout), request.settings)

    def understood(request: Request) -> Understood:
        profile = profile_for(request)
        return Understood(
            profile.to_json(), branch_name("autopatch", profile.model_type), tuple(profile.needs_review())
        )

    def act_verify(request: Request, progress: Progress) -> Outcome:
        profile = approved_or_understood(request, profile_for)
        result = run_pipeline(request.checkout, profile, progress)
        gates = list(_attr(result, "gates") or [])
        return Outcome(
            branch=_attr(result, "branch") or branch_name("autopatch", profile.model_type),
            gates=gates,
            files=list(_attr(result, "files") or []),
            pr_title=_attr(result, "pr_title") or f"Add Liger Kernel support for {profile.model_type}",
            pr_body=_attr(result, "pr_body") or "",
            ok=_attr(result, "ok", True) is not False and not hard_failure(gates),
            profile=profile.to_json(),
            verify_target=profile.model_type,
        )

    return Pipeline(
        understood,
        act_verify,
        profile_table,
        USAGE,
        validate_settings=validate_settings,
        verify_branch=verify_branch,
        verify_target="model",
        settings_help=OVERRIDE_HELP,
    )


PIPELINE = autopatch_pipeline()
