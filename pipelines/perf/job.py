"""The perf pipeline's row of the contract (pipelines.contract): an existing kernel in, the fastest variant that
passes the full unit tests out (verified here, on the GPU host: it has no `verify_branch`)."""

from __future__ import annotations

from pipelines.contract import Outcome
from pipelines.contract import Pipeline
from pipelines.contract import Progress
from pipelines.contract import Request
from pipelines.contract import Understood
from pipelines.contract import Usage
from pipelines.contract import branch_name
from pipelines.contract import cell
from pipelines.outcome import PipelineError

USAGE = Usage(
    "KERNEL [--pass PASS] [--target-speedup X]",
    "make an existing kernel of the target (`fused_add_rms_norm`, `rms_norm`, a generated one) faster on a GPU "
    "for PASS (`forward`, `backward` (default) or `full`): profile, launch sweep, structural variants under the "
    "skill's guardrails; open a draft PR with the winner",
    target="kernel name",
    options=("pass", "target-speedup"),
)


def _options(request: Request):
    from pipelines.perf.pipeline import Options

    return Options(
        target_pass=request.options.get("pass", "backward"),
        target_speedup=float(request.options.get("target-speedup", 1.0)),
    )


def profile_table(profile: dict) -> str:
    applies = list(dict.fromkeys(row["key"] for row in profile.get("catalogue") or [] if row.get("applies")))
    rows = ["| field | value |", "|---|---|", f"| kernel | `{cell(profile.get('kernel', ''))}` |"]
    rows.append(f"| target | `{profile.get('target_pass')}` at {cell(', '.join(profile.get('target_sizes') or []))} |")
    rows.append(f"| sizes | {cell(', '.join(profile.get('sizes') or []))} |")
    rows.append(f"| structural variants that apply | {cell(', '.join(applies) or 'none')} |")
    return "\n".join(rows)


def understand(request: Request) -> Understood:
    from pipelines.perf import pipeline

    _, profile = pipeline.understand(request.target, request.checkout.root, _options(request))
    return Understood(profile.to_json(), branch_name("perf", profile.source.name.replace("_", "-")))


def act_verify(request: Request, progress: Progress) -> Outcome:
    from pipelines.perf import pipeline

    run = pipeline.run(request.target, request.checkout.root, _options(request), request.out_dir, progress)
    if not run.branch and not run.failed:
        raise PipelineError(f"perf {request.target}: no variant beat the kernel ({run.stop})", hint="nothing to change")
    return Outcome(
        branch=run.branch or branch_name("perf", request.target.replace("_", "-")),
        gates=list(run.gates),
        files=run.to_json()["files"],
        pr_title=f"perf({request.target}): {run.profile.target_pass} faster ({run.best})",
        pr=run.pr,
        ok=not run.failed,
        profile=run.profile.to_json(),
    )


PIPELINE = Pipeline(understand, act_verify, profile_table, USAGE)
