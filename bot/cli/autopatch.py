"""`liger-bot autopatch MODEL --repo DIR [--plan-only] [--json] [--set field=value]...`

`--plan-only` stops after `understand` and prints the profile (markdown, or JSON with `--json`); it works for a
model the target already supports too, and says so. Without it the whole pipeline runs: understand, act,
verify.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from bot.cli.end_state import announce
from bot.cli.end_state import back_on_users_branch
from bot.cli.end_state import record_pull_request
from pipelines.autopatch.profile import OVERRIDE_VALUES
from pipelines.autopatch.profile import Profile
from pipelines.autopatch.profile import parse_overrides
from pipelines.autopatch.supported import supported_models
from pipelines.outcome import ExitStatus
from pipelines.outcome import PipelineError
from pipelines.target import Checkout
from pipelines.target import open_checkout


def register(subparsers) -> None:
    parser = subparsers.add_parser("autopatch", help="add Liger kernels to a HuggingFace model in a Liger checkout")
    parser.add_argument("model", help="model_type (nemotron), class name (NemotronForCausalLM) or display name")
    parser.add_argument("--repo", required=True, help="the Liger-Kernel checkout (clean git tree)")
    parser.add_argument("--plan-only", action="store_true", help="stop after understand: print the profile")
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a decision; fields and values: "
        + "; ".join(f"{k}: {' | '.join(v)}" for k, v in OVERRIDE_VALUES.items()),
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="FILE",
        help="apply this profile (the JSON of --plan-only --json, as reviewed) instead of running understand again",
    )
    parser.set_defaults(handler=autopatch_command)


def plan(model: str, checkout: Checkout, overrides: list[str], progress) -> Profile:
    from pipelines.autopatch.pipeline import understand_model  # torch and transformers: only when needed

    parsed = parse_overrides(overrides)  # refuse a bad --set before any work
    progress(f"understanding {model}")
    profile = understand_model(model, checkout)
    supported_by = supported_models(checkout.monkey_patch).get(profile.model_type)
    profile = replace(profile, identity=replace(profile.identity, supported_by=supported_by))
    return profile.with_overrides(parsed) if parsed else profile


def reviewed(path: Path, model_type: str, overrides: list[str], progress) -> Profile:
    """The profile file a reviewer approved, for this model, with any further --set applied."""
    from pipelines.autopatch.pipeline import approved_profile

    parse_overrides(overrides)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PipelineError(f"--profile {path}: {exc}") from None
    profile = approved_profile(data, overrides)
    if profile.model_type != model_type:
        raise PipelineError(f"--profile {path} is the profile of {profile.model_type}, not {model_type}")
    progress(f"applying the reviewed profile {path} (understand is not run again)")
    return profile


def autopatch_command(args, ui) -> ExitStatus:
    from pipelines.autopatch.resolve import resolve

    checkout = open_checkout(args.repo)
    ref = resolve(args.model)
    supported_by = supported_models(checkout.monkey_patch).get(ref.model_type)
    if supported_by and not args.plan_only:  # refuse before the (slower) understand stage
        raise PipelineError(
            f"{ref.model_type} is already supported by {supported_by} in {checkout.monkey_patch}",
            hint=f"change the existing {supported_by} instead, or see the profile with --plan-only",
        )
    profile = (
        reviewed(args.profile, ref.model_type, args.overrides, ui.progress)
        if args.profile
        else plan(args.model, checkout, args.overrides, ui.progress)
    )
    if args.plan_only:
        from pipelines.autopatch import markdown

        if supported_by:
            ui.progress(f"{profile.model_type} is already supported by the target: {supported_by}")
        ui.result(json.dumps(profile.to_json(), indent=2) if args.json else markdown.render(profile))
        return ExitStatus.OK
    result = run_and_record(checkout, profile, ui)
    ui.result(json.dumps(result.to_json(), indent=2) if args.json else result.summary())
    return ExitStatus.OK if result.ok else ExitStatus.GATE_FAILED


def run_and_record(checkout: Checkout, profile: Profile, ui):
    """The whole pipeline, ending on the user's branch, with the draft PR recorded by the local forge when it passes
    (the CLI's run and the demo's)."""
    from pipelines.autopatch.pipeline import run_pipeline  # torch and transformers: only when needed

    with back_on_users_branch(checkout.root) as start:
        result = run_pipeline(checkout, profile, ui.progress)
    if result.ok:
        announce(ui, record_pull_request(start, "autopatch", result.branch, result.pr_title, result.pr_body))
    return result
