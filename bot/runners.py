"""Where verify gates run: `local` (the worker's own act + verify stage, the default) or `actions` (a GPU workflow).

`ActionsRunner.start` dispatches the verification and returns `Dispatched`; the job then waits for
`workflow_run.completed`, and `ActionsRunner.resume` reads the verdict from the `liger-bot-report` artifact the
workflow uploads (`report.json`, the `VerifyReport` JSON below).

A verify run may also measure: its `Figures` (bot/figures.py) come beside report.json in the artifact.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import json
import logging
import re
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field

from bot.figures import Figures
from bot.forge.base import Forge
from bot.forge.base import RepoRef
from bot.forge.base import WorkflowRun
from pipelines.contract import BRANCH_PREFIX
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError
from pipelines.outcome import hard_failure

log = logging.getLogger(__name__)

VERIFY_WORKFLOW = "liger-bot-verify.yml"
SCAN_WORKFLOW = "liger-bot-scan.yml"
REPORT_ARTIFACT = "liger-bot-report"
REPORT_FILE = "report.json"
DEFAULT_LABELS = ("self-hosted", "linux", "gpu")


class RunnerKind(str, enum.Enum):
    LOCAL = "local"
    ACTIONS = "actions"


@dataclass(frozen=True)
class VerifyRequest:
    repo: RepoRef
    branch: str  # the bot's branch, already pushed (actions) or checked out (local)
    pipeline: str
    target: str
    job_id: str
    settings: tuple[str, ...] = ()  # the job's `field=value` overrides, applied again on the runner
    profile: Mapping | None = None  # the profile act applied: the runner verifies that one, not its own understand


@dataclass(frozen=True)
class VerifyReport:
    job_id: str
    gates: tuple[GateResult, ...]
    figures: Figures = field(default_factory=Figures, compare=False)  # not in report.json: files beside it
    head_sha: str = ""  # the commit the gates ran on (`git rev-parse HEAD` of the runner's checkout)
    hardware: str = ""  # the runner's GPU, for the PR template's Hardware Type (pipelines.pull_request.hardware)

    @property
    def passed(self) -> bool:
        return not hard_failure(list(self.gates))

    def to_json(self) -> dict:
        return {
            "job_id": self.job_id,
            "head_sha": self.head_sha,
            "hardware": self.hardware,
            "gates": [g.to_record() for g in self.gates],
        }

    @classmethod
    def from_json(cls, data: Mapping) -> VerifyReport:
        try:
            gates = tuple(GateResult.from_record(g) for g in data["gates"])
            hardware = _one_line(str(data.get("hardware") or ""))
            return cls(str(data["job_id"]), gates, head_sha=str(data.get("head_sha") or ""), hardware=hardware)
        except (KeyError, TypeError, ValueError) as error:
            raise PipelineError(
                f"the verify report is malformed ({error!r})", hint="check the workflow's verify step"
            ) from None

    def binding_problem(self, job_id: str, head_sha: str) -> str | None:
        """Why this report is not the verdict of job `job_id` on commit `head_sha`, or None when it is."""
        if self.job_id != job_id:
            return f"it verified job {self.job_id}"
        if not head_sha or self.head_sha != head_sha:
            return f"it verified commit {self.head_sha[:12] or '(none named)'}, not {head_sha[:12]}"
        return None


DISPATCH_INPUTS_LIMIT = 65_535  # GitHub's cap on a workflow_dispatch's inputs, all together


def _one_line(text: str, limit: int = 120) -> str:
    """A runner's own words in the PR body: one line of plain text, no markup, bounded."""
    return re.sub(r"[^\w .,:()+/-]", "", " ".join(text.split()))[:limit]


def _without_evidence(value):
    if isinstance(value, Mapping):
        return {k: _without_evidence(v) for k, v in value.items() if k != "evidence"}
    if isinstance(value, list):
        return [_without_evidence(v) for v in value]
    return value


def dispatch_profile(profile: Mapping | None) -> str:
    """The profile as a dispatch input: its values without the evidence snippets (the runner applies values; the
    evidence is in the PR), "" when there is none or it would not fit GitHub's input cap."""
    if not profile:
        return ""
    text = json.dumps(_without_evidence(profile), separators=(",", ":"), sort_keys=True)
    if len(text) > DISPATCH_INPUTS_LIMIT // 2:  # half the cap: the other inputs and GitHub's JSON framing fit beside
        log.warning("the profile (%d characters) does not fit a dispatch; the runner derives its own", len(text))
        return ""
    return text


DISPATCH_EVENT = "workflow_dispatch"
CLOCK_SKEW_SECONDS = 120.0  # GitHub's clock against the worker's: a run created this long before dispatch still counts


@dataclass(frozen=True)
class Dispatched:
    """What the App dispatched: the only workflow run whose result the job accepts (see `mismatch`)."""

    workflow: str
    branch: str
    head_sha: str = ""  # the commit the App pushed to `branch`
    actor: str = ""  # the App's bot login: GitHub names it the actor of a run it dispatched
    at: float = 0.0  # when (epoch s), on the worker's clock
    run_id: int | None = None  # once known (from the dispatch answer, or the first run that matched)
    event: str = DISPATCH_EVENT

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping) -> Dispatched:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def mismatch(self, run: WorkflowRun, repo: RepoRef) -> str | None:
        """Why `run` is not the run dispatched here, or None when it matches on everything recorded."""
        checks = (
            (self.run_id is None or run.id == self.run_id, f"run id {run.id}, not {self.run_id}"),
            (run.path == f".github/workflows/{self.workflow}", f"workflow {run.path!r}"),
            (run.event == self.event, f"event {run.event!r}, not {self.event}"),
            (run.head_branch == self.branch, f"branch {run.head_branch!r}"),
            (bool(self.head_sha) and run.head_sha == self.head_sha, f"commit {run.head_sha[:12]!r}"),
            (run.head_repository == repo.full_name, f"commit from {run.head_repository or 'an unnamed repository'}"),
            (bool(self.actor) and run.actor == self.actor, f"actor {run.actor!r}, not {self.actor}"),
            (run.triggering_actor in ("", self.actor), f"triggered by {run.triggering_actor!r}"),
            (run.created_at >= self.at - CLOCK_SKEW_SECONDS, "created before the dispatch"),
        )
        problems = [why for ok, why in checks if not ok]
        return "; ".join(problems) or None


class ActionsRunner:
    """Dispatches the shipped verify workflow on the bot's branch of the base repository."""

    kind = RunnerKind.ACTIONS

    def __init__(self, forge: Forge, labels: tuple[str, ...] = DEFAULT_LABELS, workflow: str = VERIFY_WORKFLOW):
        self.forge = forge
        self.labels = tuple(labels)
        self.workflow = workflow

    def expect(self, request: VerifyRequest, head_sha: str) -> Dispatched:
        """What the dispatch of `request` will be matched on, recorded on the job before it is sent."""
        return Dispatched(self.workflow, request.branch, head_sha, self.forge.actor_login(request.repo), time.time())

    def start(self, request: VerifyRequest, expected: Dispatched | None = None) -> Dispatched:
        if not request.branch.startswith(BRANCH_PREFIX):
            raise PipelineError(f"refusing to verify {request.branch!r} on GPU runners: not a liger-bot branch")
        expected = expected or self.expect(request, "")
        inputs = {
            "job_id": request.job_id,
            "pipeline": request.pipeline,
            "target": request.target,
            "runner_labels": json.dumps(list(self.labels)),
            "settings": json.dumps(list(request.settings)),
        }
        profile = dispatch_profile(request.profile)
        if profile:
            inputs["profile"] = profile
        run_id = self.forge.dispatch_workflow(request.repo, self.workflow, request.branch, inputs)
        return dataclasses.replace(expected, run_id=run_id)

    def resume(self, repo: RepoRef, run: WorkflowRun, job_id: str, head_sha: str = "") -> VerifyReport:
        """The verdict of a completed run: its report, or one failed gate saying why there is none (made here, for
        the job and commit the run was dispatched for)."""
        archive = self.forge.download_artifact(repo, run.id, REPORT_ARTIFACT)
        if archive is None:
            detail = f"workflow run {run.id} ended {run.conclusion or run.status} without uploading {REPORT_ARTIFACT}"
            return VerifyReport(job_id, (GateResult("gpu workflow", GateStatus.FAIL, detail),), head_sha=head_sha)
        with zipfile.ZipFile(io.BytesIO(archive)) as bundle:
            if REPORT_FILE not in bundle.namelist():
                raise PipelineError(
                    f"the {REPORT_ARTIFACT} artifact holds no {REPORT_FILE}", hint="check the workflow's verify step"
                )
            report = VerifyReport.from_json(json.loads(bundle.read(REPORT_FILE)))
            return dataclasses.replace(report, figures=Figures.from_archive(bundle))


class WorkflowKind(str, enum.Enum):
    VERIFY = "verify"
    SCAN = "scan"


def classify_workflow_run(payload: Mapping) -> tuple[WorkflowKind, WorkflowRun] | None:
    """For a `workflow_run` webhook: which of our workflows completed (verify or scan), or None if not ours."""
    run = payload.get("workflow_run") or {}
    path = str(run.get("path", "")).split("@", 1)[0]
    kinds = {
        f".github/workflows/{VERIFY_WORKFLOW}": WorkflowKind.VERIFY,
        f".github/workflows/{SCAN_WORKFLOW}": WorkflowKind.SCAN,
    }
    kind = kinds.get(path)
    if kind is None or payload.get("action") != "completed":
        return None
    if kind is WorkflowKind.VERIFY and not str(run.get("head_branch", "")).startswith(BRANCH_PREFIX):
        return None
    return kind, WorkflowRun.from_json(run)
