"""What `liger-bot kernel` and `liger-bot chunked-loss` print: the profile (--profile-only) or the run's branch and
gates, as markdown or --json, and the exit status the gates give."""

from __future__ import annotations

import json

from pipelines.outcome import ExitStatus
from pipelines.outcome import gates_table


def show_profile(ui, profile, as_json: bool) -> ExitStatus:
    ui.result(json.dumps(profile.to_json(), indent=2) if as_json else profile.to_markdown())
    return ExitStatus.OK


def show_run(ui, result, as_json: bool) -> ExitStatus:
    if as_json:
        ui.result(json.dumps(result.to_json(), indent=2))
    else:
        ui.result(f"branch {result.branch}: {len(result.files)} files\n{gates_table(result.gates)}")
    return ExitStatus.GATE_FAILED if result.failed else ExitStatus.OK
