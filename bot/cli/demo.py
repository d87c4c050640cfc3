"""`liger-bot demo <verb>`: the README's main jobs on their embedded defaults, offline, in a fresh work dir.

    liger-bot demo autopatch [MODEL] [--json] [--workdir DIR]

fetches a fresh Liger-Kernel checkout into the work dir, understands MODEL (default: a model liger-kernel 0.8.5
does not support whose decisions all settle), runs the autopatch pipeline, and prints where the branch and the
PR body are. Other verbs (`demo recsys`, ...) add a subparser in `register`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from pipelines import target
from pipelines.outcome import ExitStatus
from pipelines.outcome import PipelineError

# Unsupported by liger-kernel 0.8.5, every decision and check settled, every CPU gate passes, and every kernel
# patched (RoPE, RMSNorm, SwiGLU, FLCE), with a forward that passes lm_head's output to the loss untouched.
DEFAULT_AUTOPATCH_MODEL = "ministral3"


def register(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="run a pipeline end to end on its embedded default")
    verbs = parser.add_subparsers(dest="demo_command", required=True, metavar="VERB")
    autopatch = verbs.add_parser("autopatch", help="autopatch a model into a fresh local Liger-Kernel checkout")
    autopatch.add_argument("model", nargs="?", default=DEFAULT_AUTOPATCH_MODEL, help="default: %(default)s")
    autopatch.add_argument("--json", action="store_true", help="print the result as JSON")
    autopatch.add_argument("--workdir", type=Path, default=None, help="default: ./out/demo-<timestamp>")
    autopatch.set_defaults(handler=autopatch_command)
    add_recsys(verbs)


def add_recsys(verbs) -> None:
    """`demo recsys`: the fuse pass on a recommendation encoder (its parser and handler live beside it)."""
    from bot.cli.demo_recsys import add_recsys_parser

    add_recsys_parser(verbs)


def _workdir(requested: Path | None) -> Path:
    workdir = requested or Path("out") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    workdir = workdir.expanduser().resolve()
    if workdir.exists() and any(workdir.iterdir()):
        raise PipelineError(f"{workdir} exists and is not empty", hint="choose a new --workdir")
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir


def autopatch_command(args, ui) -> ExitStatus:
    from bot.cli.autopatch import run_and_record
    from pipelines.autopatch.act import validate_model_type
    from pipelines.autopatch.pipeline import understand_model

    workdir = _workdir(args.workdir)
    ui.progress(f"fetching liger-kernel {target.DEFAULT_VERSION} into {workdir / 'liger-kernel'}")
    checkout = target.fetch(workdir / "liger-kernel")
    ui.progress(f"understand: {args.model}")
    profile = understand_model(args.model, checkout)
    validate_model_type(profile.model_type)
    result = run_and_record(checkout, profile, ui)
    if args.json:
        ui.result(json.dumps(result.to_json(), indent=2))
    else:
        ui.result(result.summary())
        ui.result(f"checkout: {checkout.root}")
        if result.ok:
            ui.result(f"see the patch: git -C {checkout.root} show --stat {result.branch}")
    return ExitStatus.OK if result.ok else ExitStatus.GATE_FAILED
