"""What `liger-bot kernel` and `liger-bot chunked-loss` print: the profile (--profile-only) or the run's branch and
gates, as markdown or --json, and the exit status the gates give."""

from __future__ import annotations

import json

from bot.cli.end_state import Start
from bot.cli.end_state import announce
from bot.cli.end_state import record_pull_request
from pipelines.outcome import ExitStatus
from pipelines.outcome import gates_table


def show_profile(ui, profile, as_json: bool) -> ExitStatus:
    ui.result(json.dumps(profile.to_json(), indent=2) if as_json else profile.to_markdown())
    return ExitStatus.OK


def show_run(ui, result, as_json: bool, start: Start | None = None, verb: str = "") -> ExitStatus:
    """The run's branch and gates; with `start` (the CLI's run), a run whose gates pass gets its draft PR recorded."""
    if start is not None and result.branch and not result.failed:
        announce(ui, record_pull_request(start, verb, result.branch, result.title, result.pr_body))
    if as_json:
        ui.result(json.dumps(result.to_json(), indent=2))
    else:
        ui.result(f"branch {result.branch}: {len(result.files)} files\n{gates_table(result.gates)}")
    return ExitStatus.GATE_FAILED if result.failed else ExitStatus.OK
