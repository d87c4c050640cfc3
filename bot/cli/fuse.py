"""`liger-bot fuse path/to/model.py:Factory --repo DIR [--chain N] [--json]`: a graph pass for a model."""

from __future__ import annotations

import json

from pipelines.outcome import ExitStatus
from pipelines.outcome import gates_table


def register(subparsers) -> None:
    parser = subparsers.add_parser("fuse", help="find fusable subgraphs in a model and write a torch.compile pass")
    parser.add_argument("spec", help="path/to/model.py:Factory, a function returning (model, example_inputs_tuple)")
    parser.add_argument("--repo", required=True, help="the Liger-Kernel checkout to write the pass into (clean)")
    parser.add_argument("--chain", type=int, default=0, help="which unmatched chain to write a pass for (default 0)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=fuse_command)


def fuse_command(args, ui) -> ExitStatus:
    from pipelines.fuse import pipeline  # imports torch: not needed for --help

    result = pipeline.run(args.spec, args.repo, args.chain, progress=ui.progress)
    if args.json:
        ui.result(json.dumps(result.to_json(), indent=2))
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
    ui.result("\n".join(lines) or "nothing to fuse")
    return ExitStatus.GATE_FAILED if result.failed else ExitStatus.OK
