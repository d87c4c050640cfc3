"""Outcomes every pipeline shares: exit statuses, user-facing errors, verify gate results."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass


class ExitStatus(enum.IntEnum):
    """Process exit statuses of the CLI (httpie-style: outcomes are named, not magic numbers)."""

    OK = 0
    ERROR = 1  # an unexpected failure: a bug or a broken environment
    USAGE = 2  # argparse's own status for a malformed command line
    REFUSED = 3  # the input was understood and refused: unknown model, dirty checkout, bad --set ...
    GATE_FAILED = 4  # the pipeline ran and a hard verify gate failed
    INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as a shell reports a process SIGINT stopped


class PipelineError(Exception):
    """An error a person can act on. `hint` names the next thing to try."""

    status = ExitStatus.REFUSED

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


class GateStatus(str, enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True)
class GateResult:
    """One verify gate's verdict. `hard` failures stop the pipeline; SKIP always carries its reason."""

    name: str
    status: GateStatus
    detail: str = ""
    hard: bool = True

    @property
    def headline(self) -> str:
        """The detail's first line: what a one-line listing of the gates shows."""
        return self.detail.strip().splitlines()[0] if self.detail.strip() else ""

    def said(self) -> str:
        """The verdict as verify's progress says it while the gates run."""
        return f"verify: {self.name}: {self.status.value}: {self.headline[:400]}"

    def to_json(self) -> dict:
        return {"name": self.name, "status": self.status.value, "detail": self.detail}

    def to_record(self) -> dict:
        """to_json with `hard`: what crosses between processes and runners (report.json, the stage child)."""
        return {**self.to_json(), "hard": self.hard}

    @classmethod
    def from_record(cls, data) -> GateResult:
        return cls(
            str(data["name"]), GateStatus(data["status"]), str(data.get("detail", "")), bool(data.get("hard", True))
        )


@dataclass(frozen=True)
class Report:
    """A verify run's gates in order: one form from the pipeline to the PR. The job keeps its `records()`, the GPU
    runner's report.json holds them, and every verdict and table is read from here: `failures` is the one
    hard-failure rule, `table()` the one markdown table (status comment, PR body, CLI)."""

    gates: tuple[GateResult, ...] = ()

    @classmethod
    def from_records(cls, records: Iterable[Mapping]) -> Report:
        return cls(tuple(GateResult.from_record(record) for record in records))

    def records(self) -> list[dict]:
        return [gate.to_record() for gate in self.gates]

    @property
    def failures(self) -> tuple[GateResult, ...]:
        """The hard gates that failed; any one blocks the push."""
        return tuple(g for g in self.gates if g.hard and g.status is GateStatus.FAIL)

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    def merged(self, other: Report) -> Report:
        """`other`'s verdict wins gate by gate (a GPU runner's PASS replaces the worker's SKIP); its other gates follow."""
        by_name = {gate.name: gate for gate in self.gates}
        by_name.update((gate.name, gate) for gate in other.gates)
        return Report(tuple(by_name.values()))

    def table(self) -> str:
        rows = ["| Check | Status | Detail |", "|---|---|---|"]
        for gate in self.gates:
            detail = gate.detail.replace("\n", " ").replace("|", "\\|")
            rows.append(f"| {gate.name} | {gate.status.value} | {detail[:300]} |")
        return "\n".join(rows)


def gates_table(gates: Iterable[GateResult]) -> str:
    """The markdown table the PR body and the status comment show (Report.table)."""
    return Report(tuple(gates)).table()


def hard_failure(gates: Iterable[GateResult]) -> bool:
    """Whether a hard gate failed (Report.failed)."""
    return Report(tuple(gates)).failed


def result_json(profile, branch: str, files: list[str], gates: list[GateResult], **extra) -> dict:
    """The JSON every pipeline's result shares (the CLI's --json, the App and our evaluation read it)."""
    return {
        "profile": profile.to_json(),
        "branch": branch,
        "files": files,
        "gates": [g.to_json() for g in gates],
        **extra,
    }


@dataclass
class PipelineRun:
    """A file-writing pipeline's run on a checkout (kernel, chunked-loss): the profile it acted on, its branch, the
    files it wrote, the gates in order, the PR body it wrote beside the checkout and the parts it was rendered from."""

    profile: object  # the pipeline's profile (anything with to_json)
    branch: str
    files: list[str]
    gates: list[GateResult]
    pr_body: str
    pr: object = None  # pipelines.pull_request.BodyParts (the App renders the body again, with its notes)
    title: str = ""  # the PR's title

    @property
    def failed(self) -> bool:
        return hard_failure(self.gates)

    def to_json(self) -> dict:
        return result_json(self.profile, self.branch, self.files, self.gates, failed=self.failed)
