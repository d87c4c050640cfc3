"""Where verify gates run: `local` (in the worker's process, the default) or `actions` (a GPU workflow).

A runner's `start` either finishes the verification (`local`) or dispatches it and returns `Dispatched`
(`actions`); the job then waits for `workflow_run.completed`, and `ActionsRunner.resume` reads the verdict
from the `liger-bot-report` artifact the workflow uploads (`report.json`, the `VerifyReport` JSON below).

A verify run may also measure (`Figures`: benchmark.md and benchmark.png, beside report.json in the artifact
or in the worker's out dir). A pipeline's PR body links its plot relatively, `![benchmark](benchmark.png)`, as
its pr_body.md sits beside the file; `embed_figures` swaps in the link the forge published the plot under.
"""

from __future__ import annotations

import enum
import io
import json
import logging
import os
import re
import stat
import zipfile
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from bot.forge.assets import MAX_ASSET_BYTES
from bot.forge.base import Forge
from bot.forge.base import ForgeError
from bot.forge.base import RepoRef
from bot.forge.base import WorkflowRun
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError

VERIFY_WORKFLOW = "liger-bot-verify.yml"
SCAN_WORKFLOW = "liger-bot-scan.yml"
REPORT_ARTIFACT = "liger-bot-report"
REPORT_FILE = "report.json"
BENCHMARK_TABLE_FILE = "benchmark.md"
PLOT_FILE = "benchmark.png"
DEFAULT_LABELS = ("self-hosted", "linux", "gpu")
BRANCH_PREFIX = "liger-bot/"
# the pipeline's relative link to its plot, on a line of its own; PLOT_LINE takes the blank lines before it too
RELATIVE_PLOT_LINK = re.compile(rf"^!\[(?P<alt>[^\]\n]*)\]\({re.escape(PLOT_FILE)}\)[ \t]*$", re.MULTILINE)
PLOT_LINE = re.compile(rf"\n*{RELATIVE_PLOT_LINK.pattern}", re.MULTILINE)

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class Figures:
    """What a verify run measured beside its gates: the benchmark table (markdown) and its plot (PNG bytes)."""

    table: str = ""
    plot: bytes | None = field(default=None, repr=False)

    @classmethod
    def from_dir(cls, folder: Path | None) -> Figures:
        """From the out dir the pipeline wrote (the worker's own verify). The pipeline's child process ran the
        target's code and could leave a link there, so only regular files are read, never through a link."""
        if folder is None:
            return cls()
        table = _regular_file(Path(folder) / BENCHMARK_TABLE_FILE)
        return cls(table.decode(errors="replace") if table else "", _regular_file(Path(folder) / PLOT_FILE))

    @classmethod
    def from_archive(cls, bundle: zipfile.ZipFile) -> Figures:
        """From the report artifact (a GPU runner's verify); members over the size limit are left out."""
        members = {info.filename: info for info in bundle.infolist() if info.file_size <= MAX_ASSET_BYTES}
        table = bundle.read(BENCHMARK_TABLE_FILE).decode(errors="replace") if BENCHMARK_TABLE_FILE in members else ""
        plot = bundle.read(PLOT_FILE) if PLOT_FILE in members else None
        return cls(table, plot)


def _regular_file(path: Path) -> bytes | None:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # missing, or a symbolic link
        return None
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ASSET_BYTES:
            return None
        return handle.read()


@dataclass(frozen=True)
class VerifyReport:
    job_id: str
    gates: tuple[GateResult, ...]
    figures: Figures = field(default_factory=Figures, compare=False)  # not in report.json: files beside it

    @property
    def passed(self) -> bool:
        return all(g.status is not GateStatus.FAIL for g in self.gates if g.hard)

    def to_json(self) -> dict:
        return {"job_id": self.job_id, "gates": [{**g.to_json(), "hard": g.hard} for g in self.gates]}

    @classmethod
    def from_json(cls, data: Mapping) -> VerifyReport:
        try:
            gates = tuple(
                GateResult(str(g["name"]), GateStatus(g["status"]), str(g.get("detail", "")), bool(g.get("hard", True)))
                for g in data["gates"]
            )
            return cls(str(data["job_id"]), gates)
        except (KeyError, TypeError, ValueError) as error:
            raise PipelineError(
                f"the verify report is malformed ({error!r})", hint="check the workflow's verify step"
            ) from None


@dataclass(frozen=True)
class Dispatched:
    """Verification runs elsewhere; the job waits for the workflow run on `branch` to complete."""

    workflow: str
    branch: str


class Runner:
    kind: RunnerKind

    def start(self, request: VerifyRequest) -> VerifyReport | Dispatched:
        raise NotImplementedError


class LocalRunner(Runner):
    """Runs the gates in the worker: `verify(request)` is the pipeline's verify stage."""

    kind = RunnerKind.LOCAL

    def __init__(self, verify: Callable[[VerifyRequest], list[GateResult]]):
        self.verify = verify

    def start(self, request: VerifyRequest) -> VerifyReport:
        return VerifyReport(request.job_id, tuple(self.verify(request)))


class ActionsRunner(Runner):
    """Dispatches the shipped verify workflow on the bot's branch of the base repository."""

    kind = RunnerKind.ACTIONS

    def __init__(self, forge: Forge, labels: tuple[str, ...] = DEFAULT_LABELS, workflow: str = VERIFY_WORKFLOW):
        self.forge = forge
        self.labels = tuple(labels)
        self.workflow = workflow

    def start(self, request: VerifyRequest) -> Dispatched:
        if not request.branch.startswith(BRANCH_PREFIX):
            raise PipelineError(f"refusing to verify {request.branch!r} on GPU runners: not a liger-bot branch")
        inputs = {
            "job_id": request.job_id,
            "pipeline": request.pipeline,
            "target": request.target,
            "runner_labels": json.dumps(list(self.labels)),
            "settings": json.dumps(list(request.settings)),
        }
        self.forge.dispatch_workflow(request.repo, self.workflow, request.branch, inputs)
        return Dispatched(self.workflow, request.branch)

    def resume(self, repo: RepoRef, run: WorkflowRun, job_id: str) -> VerifyReport:
        """The verdict of a completed run: its report, or one failed gate saying why there is none."""
        archive = self.forge.download_artifact(repo, run.id, REPORT_ARTIFACT)
        if archive is None:
            detail = f"workflow run {run.id} ended {run.conclusion or run.status} without uploading {REPORT_ARTIFACT}"
            return VerifyReport(job_id, (GateResult("gpu workflow", GateStatus.FAIL, detail),))
        with zipfile.ZipFile(io.BytesIO(archive)) as bundle:
            if REPORT_FILE not in bundle.namelist():
                raise PipelineError(
                    f"the {REPORT_ARTIFACT} artifact holds no {REPORT_FILE}", hint="check the workflow's verify step"
                )
            report = VerifyReport.from_json(json.loads(bundle.read(REPORT_FILE)))
            return VerifyReport(report.job_id, report.gates, Figures.from_archive(bundle))


def embed_figures(forge: Forge, repo: RepoRef, body: str, figures: Figures) -> str:
    """`body` showing the run's plot from the forge: each relative `![..](benchmark.png)` line links the published
    copy; a plot the body has no line for (a GPU runner measured it, the CPU worker wrote the body) comes in a
    Benchmark section with its table. With no plot, no image line is left; with one the forge refused, a note."""
    if figures.plot is None:
        return PLOT_LINE.sub("", body)
    link, refusal = _publish(forge, repo, figures.plot)

    def shown(alt: str) -> str:
        return f"![{alt}]({link})" if link else f"_(the benchmark plot was not published: {refusal})_"

    if RELATIVE_PLOT_LINK.search(body):
        return RELATIVE_PLOT_LINK.sub(lambda match: shown(match["alt"]), body)
    section = ["### Benchmark (GPU runner)", figures.table.strip(), shown("benchmark")]
    return "\n\n".join([body.rstrip("\n"), *(part for part in section if part)]) + "\n"


def _publish(forge: Forge, repo: RepoRef, plot: bytes) -> tuple[str | None, ForgeError | None]:
    """The plot's link, or why there is none: the PR opens without its plot rather than not at all."""
    try:
        return forge.publish_asset(repo, PLOT_FILE, plot), None
    except ForgeError as error:
        log.warning("the benchmark plot was not published to %s: %s", repo.full_name, error)
        return None, error


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
    return kind, WorkflowRun(int(run["id"]), str(run["status"]), run.get("conclusion"), str(run.get("head_branch", "")))


def make_runner(
    kind: str, forge: Forge, verify: Callable[[VerifyRequest], list[GateResult]], labels=DEFAULT_LABELS
) -> Runner:
    """From the repo config's `runner:` value (`.github/liger-bot.yml`)."""
    if kind == RunnerKind.LOCAL.value:
        return LocalRunner(verify)
    if kind == RunnerKind.ACTIONS.value:
        return ActionsRunner(forge, tuple(labels))
    raise PipelineError(f"unknown runner {kind!r}", hint="runner: local or runner: actions")
