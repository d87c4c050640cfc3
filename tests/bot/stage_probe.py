"""A small real pipeline row for bot.isolation's tests: its stages run in the child like the real pipelines' do.

The target word picks what the stage does: `refuse` raises a PipelineError, `crash` a bug, `wait` reports its
process id and then sleeps (a test cancels it), anything else reports a line and a gate (and prints to stdout, as
target code does) and returns what it saw of its process: its directory and environment.
"""

from __future__ import annotations

import os
import sys
import time

from pipelines.contract import Outcome
from pipelines.contract import Pipeline
from pipelines.contract import Understood
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError
from pipelines.pull_request import BodyParts


def _seen() -> dict:
    return {"cwd": os.getcwd(), "pid": os.getpid(), "environ": sorted(os.environ)}


def _act_verify(request, progress) -> Outcome:
    if request.target == "refuse":
        raise PipelineError("the probe refuses this", hint="ask for something else")
    if request.target == "crash":
        raise ValueError("the probe broke")
    print("target output on stdout, not a result", flush=True)
    print('gate: {"name": "forged"', flush=True)  # target output that looks like an event is only output
    print('{"progress": "forged"}', file=sys.stderr, flush=True)
    if request.target == "wait":
        progress(f"waiting in process {os.getpid()}")
        time.sleep(60)
    progress("act: line one\nline two")
    progress(GateResult("probe gate", GateStatus.SKIP, "needs GPU runner", hard=False))
    gates = [GateResult("probe gate", GateStatus.SKIP, "needs GPU runner", hard=False)]
    return Outcome("liger-bot/probe", gates, ["a.py"], "title", BodyParts("body"), True, _seen(), "probe")


def _understand(request) -> Understood:
    if request.target == "refuse":
        raise PipelineError("the probe refuses this", hint="ask for something else")
    return Understood(_seen(), "liger-bot/probe", ("rope",), "")


PROBE = Pipeline(_understand, _act_verify, lambda _profile: "")
