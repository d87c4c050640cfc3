"""The stages of a job: a fresh checkout of the default branch, understand (to the checkpoint or on), act + verify
(then push and the PR, or the dispatch to GPU runners), and the scan's dashboard."""

from __future__ import annotations

from bot import explain
from bot import status
from bot import tier3
from bot.commands import VERBS
from bot.figures import Figures
from bot.isolation import in_child
from bot.jobs import Job
from bot.jobs import JobState
from bot.runners import RunnerKind
from bot.scan import DASHBOARD_TITLE
from bot.scan import render_dashboard
from bot.worker.flow import JobProgress
from bot.worker.flow import gate_record
from bot.worker.flow import retry_command
from pipelines.autopatch.job import call_understand
from pipelines.autopatch.scan import STARTABLE
from pipelines.autopatch.scan import scan
from pipelines.contract import Pipeline
from pipelines.contract import Request
from pipelines.outcome import Report
from pipelines.target import Checkout


def _scan_understand(model: str, checkout: Checkout):
    from pipelines.autopatch import understand

    return call_understand(understand.understand, model, checkout)


class StagesMixin:
    """The Worker's stages: what each state of a job runs."""

    def fresh_checkout(self, job: Job) -> tuple[Checkout, str]:
        forge, repo = self.forge(job), self.repo(job)
        base = forge.default_branch(repo)
        return self.workspace.checkout(forge, repo, base, f"job-{job.id}"), base

    def repo_config(self, job: Job):
        """The repo's `.github/liger-bot.yml`; its problems are kept on the job for its status comment."""
        config = self.runtime.repo_config(self.repo(job), job.installation_id)
        status.note_config_problems(self.store, self.store.get(job.id), config.problems)
        return config

    def pipeline(self, job: Job) -> Pipeline:
        """The job's pipeline row; one registered since this worker started is run too (in a child)."""
        return self.pipelines.get(job.verb) or in_child(job.verb)

    def request(self, job: Job, checkout: Checkout, approved: bool = False) -> Request:
        """`approved`: act on the profile kept on the job (shown at the checkpoint), not a new understand."""
        options = dict(job.options or {})
        profile = job.profile if approved else None
        return Request(checkout, job.target, tuple(job.overrides), options, self.workspace.out_dir(job.id), profile)

    def understand_stage(self, job: Job) -> Job:
        checkout, _ = self.fresh_checkout(job)
        request = tier3.allow_drafts(self, job, self.request(job, checkout))  # tier 3 for the provider, if on
        understood = self.pipeline(job).understand(request)
        self.heartbeat(job.id)
        fields = {"profile": understood.profile, "branch": understood.branch}
        if not understood.branch:  # nothing to propose (a fuse with every chain matched): say so and stop
            result = {**(job.result or {}), "summary": understood.summary}
            job = self.enter(job, JobState.DONE, message="", next_command="", result=result, **fields)
            self.workspace.discard_job(job.id)
            return job
        config = self.repo_config(job)
        job = self.store.get(job.id)
        review = list(understood.needs_review)
        if review or (job.checkpoint and not config.autonomous):
            job = explain.explain(self, self.store.update(job.id, **fields)) if review else job
            why = f"needs review: {', '.join(review)}. " if review else ""
            correct = "correct a decision with `/liger set field=value`, " if VERBS[job.verb].takes_settings else ""
            return self.enter(
                job,
                JobState.AWAITING_APPROVAL,
                message=why + f"Check the profile, {correct}then approve.",
                next_command="/liger approve",
                **fields,
            )
        result = {**(job.result or {}), "approval": "skipped"}
        return self.enter(job, JobState.ACTING, message="", next_command="", result=result, **fields)

    def act_verify_publish(self, job: Job) -> None:
        if job.job_state is JobState.ACTING:
            self.publish(job)
        checkout, base = self.fresh_checkout(job)
        progress = JobProgress(self, job.id)
        request = self.request(job, checkout, approved=True)
        outcome = tier3.act_verify(self, job, self.pipeline(job), request, progress)  # the pipeline's, or drafts
        gates = [gate_record(g) for g in outcome.gates] or progress.gates
        job = self.enter(self.store.get(job.id), JobState.VERIFYING)
        result = {k: v for k, v in (job.result or {}).items() if k not in ("dispatched", "workflow_run")}
        result |= {"gates": gates, "files": list(outcome.files)}
        job = self.store.update(
            job.id, result=result, branch=outcome.branch or job.branch, profile=outcome.profile or job.profile
        )
        failures = Report.from_records(gates).failures
        if failures or not outcome.ok:
            names = ", ".join(g.name for g in failures) or "a hard gate"
            job = explain.explain(self, job, failures)  # the provider's plain words, where it is on
            return self.fail(job, f"verify failed: {names}. Nothing was pushed.", retry_command(job))
        job = self._push(job, checkout)
        if job is None:
            return
        config = self.repo_config(job)
        job = self.store.get(job.id)
        if config.runner == RunnerKind.ACTIONS.value and outcome.verify_target:
            return self._dispatch(job, config.runner_labels, outcome)
        figures = Figures.from_dir(self.workspace.out_dir(job.id))  # the plot, where this host ran the benchmark
        self._open_pr(job, base, outcome.pr_title, outcome.pr, Report.from_records(gates), figures)

    def scan_stage(self, job: Job) -> None:
        forge, repo = self.forge(job), self.repo(job)
        checkout, _ = self.fresh_checkout(job)
        understand = self.scan_understand or _scan_understand
        rows = scan(checkout, understand, progress=lambda _line: self.heartbeat(job.id))
        config = self.repo_config(job)
        number = forge.find_issue(repo, DASHBOARD_TITLE)
        started = self._dashboard_notes(job.repo)
        body = render_dashboard(rows, started, (config.prs_per_hour, config.max_open_prs))
        if number is None:
            number = forge.create_issue(repo, DASHBOARD_TITLE, body)
        else:
            forge.edit_issue(repo, number, body)
        startable = sum(1 for r in rows if r.verdict in STARTABLE)
        summary = f"Dashboard: #{number} ({startable} patchable or partial)."
        result = {"rows": [r.to_json() for r in rows], "dashboard": number, "summary": summary}
        result["config_problems"] = list(config.problems)
        self.enter(job, JobState.DONE, result=result)
        self.workspace.discard_job(job.id)

    def _dashboard_notes(self, repo: str) -> dict[str, str]:
        notes: dict[str, str] = {}
        for job in self.store.jobs(repo):
            if job.scope and job.verb == "autopatch" and job.job_state is not JobState.CANCELLED:
                notes[job.scope] = f"PR #{job.pr_number}" if job.pr_number else f"job {job.id}, {job.state}"
        return notes
