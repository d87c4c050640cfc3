"""`liger-bot fuse path/to/model.py:Factory --repo DIR [--chain N] [--json]`: a graph pass for a model."""

from __future__ import annotations

import json
from pathlib import Path

from bot.cli.end_state import announce
from bot.cli.end_state import back_on_users_branch
from bot.cli.end_state import record_pull_request
from pipelines import pull_request
from pipelines import target
from pipelines.fuse import job
from pipelines.outcome import ExitStatus
from pipelines.outcome import Report
from pipelines.outcome import gates_table


def register(subparsers) -> None:
    parser = subparsers.add_parser("fuse", help="find fusable subgraphs in a model and write a torch.compile pass")
    parser.add_argument("spec", help="path/to/model.py:Factory, a function returning (model, example_inputs_tuple)")
    parser.add_argument("--repo", required=True, help="the Liger-Kernel checkout to write the pass into (clean)")
    parser.add_argument("--chain", type=int, default=0, help="which unmatched chain to write a pass for (default 0)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=fuse_command)


def write_pr_body(spec: str, repo: str, result) -> Path:
    """The body the App would open the PR with, beside the checkout (never inside it: the checkout stays clean)."""
    checkout = target.open_checkout(repo)
    report = Report(tuple(result.gates))
    body_file = checkout.beside(f"{result.branch.rpartition('/')[2]}.md")
    body_file.parent.mkdir(parents=True, exist_ok=True)
    body_file.write_text(pull_request.body(checkout, job.pr_parts(spec, result), report))
    return body_file


def fuse_command(args, ui) -> ExitStatus:
    from pipelines.fuse import pipeline  # imports torch: not needed for --help

    with back_on_users_branch(args.repo) as start:
        result = pipeline.run(args.spec, args.repo, args.chain, progress=ui.progress)
    body_file = write_pr_body(args.spec, args.repo, result) if result.branch else None
    if body_file and not result.failed:
        announce(ui, record_pull_request(start, "fuse", result.branch, job.pr_title(args.spec), body_file.read_text()))
    if args.json:
        ui.result(json.dumps(result.to_json() | {"pr_body_file": str(body_file) if body_file else None}, indent=2))
        return ExitStatus.GATE_FAILED if result.failed else ExitStatus.OK
    lines = [
        f"matched: {m.pattern} at {m.where} -> {m.kernel or 'left alone: ' + m.reason}" for m in result.profile.matches
    ]
    lines += [
        f"unmatched chain {i}: {' -> '.join(c.ops)} ({c.share:.1%} of bytes)"
        for i, c in enumerate(result.profile.chains)
    ]
    if result.branch:
        lines += [f"branch {result.branch}: {', '.join(result.files)}", gates_table(result.gates)]
        lines += [f"PR body: {body_file}", pull_request.handoff(job.pr_title(args.spec), result.branch, body_file)]
    ui.result("\n".join(lines) or "nothing to fuse")
    return ExitStatus.GATE_FAILED if result.failed else ExitStatus.OK
