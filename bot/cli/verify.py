"""`liger-bot verify --repo . --pipeline P --target T --job-id J --report report.json`: a pipeline's verify gates
on the checked-out branch, written as the `VerifyReport` JSON the App resumes its job from.

The shipped GPU workflow (.github/workflows/liger-bot-verify.yml) runs it on the bot's branch; on a host with a
GPU the GPU gates (autopatch's convergence tests, a kernel's or a chunked loss's GPU tests and benchmark) run, elsewhere they SKIP.
The exit status says whether a hard gate failed; the report is written either way.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.outcome import ExitStatus
from pipelines.outcome import PipelineError
from pipelines.outcome import gates_table
from pipelines.pull_request import hardware


def register(subparsers) -> None:
    from pipelines import registry

    parser = subparsers.add_parser(
        "verify", help="run a pipeline's verify gates on the checked-out branch and write the JSON report"
    )
    parser.add_argument("--repo", default=".", help="the target checkout, on the bot's branch (default: .)")
    parser.add_argument("--pipeline", required=True, choices=sorted(registry.names()), help="which pipeline's gates")
    parser.add_argument("--target", required=True, help="what it worked on: a model (autopatch), a kernel name")
    parser.add_argument("--job-id", required=True, help="the App's job id, echoed in the report")
    parser.add_argument(
        "--report", default="report.json", help="the JSON report's path; a benchmark's table and plot go beside it"
    )
    parser.add_argument(
        "--settings", default="[]", help="the job's overrides as a JSON list, e.g. '[\"rms_offset=1.0\"]'"
    )
    parser.add_argument(
        "--profile", type=Path, metavar="FILE", help="the approved profile (JSON): verified as is, not derived again"
    )
    parser.set_defaults(handler=verify_command)


def _settings(text: str) -> tuple[str, ...]:
    try:
        settings = json.loads(text or "[]")
    except ValueError:
        settings = None
    if not isinstance(settings, list) or not all(isinstance(s, str) for s in settings):
        raise PipelineError(f"--settings {text[:80]!r} is not a JSON list of field=value strings")
    return tuple(settings)


def _target(kind: str, target: str) -> str:
    """The target becomes a name in paths and imports: the App's own grammar checks it here too."""
    from bot.commands import TARGETS
    from bot.commands import CommandError

    # the pipeline's row says its kind: a kernel's and a chunked loss's snake_case name (the branch's suffix),
    # autopatch's a model
    try:
        return TARGETS[kind](target)
    except CommandError as exc:
        raise PipelineError(str(exc).replace("`", "")) from None


def _profile(path: Path | None) -> dict | None:
    if path is None:
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PipelineError(f"--profile {path}: {exc}") from None
    if not isinstance(data, dict):
        raise PipelineError(f"--profile {path} is not a JSON object")
    return data


def verify_command(args, ui) -> ExitStatus:
    from bot.runners import VerifyReport
    from pipelines import registry
    from pipelines.contract import Request
    from pipelines.target import open_checkout

    pipeline = registry.pipeline(args.pipeline)
    if pipeline.verify_branch is None:
        raise PipelineError(f"{args.pipeline} verifies in the worker, not on a runner", hint="use runner: local")
    target, settings = _target(pipeline.verify_target, args.target), _settings(args.settings)
    pipeline.validate_settings(target, list(settings))
    checkout = open_checkout(args.repo, require_clean=False)  # an installed checkout has build files beside it
    report_path = Path(args.report)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    # the benchmark table and plot land beside the report, so the workflow uploads them in the same artifact
    request = Request(checkout, target, settings, out_dir=report_path.resolve().parent, profile=_profile(args.profile))
    gates = pipeline.verify_branch(request, lambda event: ui.progress(event if isinstance(event, str) else event.name))
    # bound to the job and to the commit the gates ran on: the App accepts it only for the head SHA it pushed
    report = VerifyReport(str(args.job_id), tuple(gates), head_sha=checkout.git.head(), hardware=hardware())
    report_path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    ui.result(gates_table(list(gates)))
    ui.progress(f"report written to {args.report}")
    return ExitStatus.OK if report.passed else ExitStatus.GATE_FAILED
