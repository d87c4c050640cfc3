"""`liger-bot debug MODEL --repo DIR [--set field=value]... [--json]`: which kernel swap makes a patched model diverge.

On the checkout's own `apply_liger_kernel_to_<model>` when the target has one (an autopatch branch checked out,
or a model Liger supports), else on a patch generated with the given overrides in a scratch clone, so the
checkout is never written. Exit 0 when nothing diverges, 4 when the diagnosis names a divergence.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from pipelines.outcome import ExitStatus


def register(subparsers) -> None:
    parser = subparsers.add_parser("debug", help="bisect a diverging autopatch: which kernel flag, which module")
    parser.add_argument("model", help="model_type (nemotron), class name or display name")
    parser.add_argument("--repo", required=True, help="the Liger-Kernel checkout")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE", help="override a decision"
    )
    parser.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    parser.set_defaults(handler=debug_command)


def debug_command(args, ui) -> ExitStatus:
    from bot.cli.autopatch import plan
    from pipelines.autopatch import debug
    from pipelines.autopatch import verify
    from pipelines.autopatch.supported import supported_models
    from pipelines.target import open_checkout

    checkout = open_checkout(args.repo, require_clean=False)
    profile = plan(args.model, checkout, args.overrides, ui.progress)
    runner = verify.LocalRunner.detect()
    if profile.model_type in supported_models(checkout.monkey_patch):
        ui.progress(f"debugging {checkout.root}'s apply_liger_kernel_to_{profile.model_type}")
        found = debug.diagnose(profile, checkout.root, runner)
    else:
        with tempfile.TemporaryDirectory(prefix="liger-bot-debug-") as scratch:
            root = generated_patch(checkout, profile, Path(scratch), ui.progress)
            found = debug.diagnose(profile, root, runner)
    if isinstance(found, str):
        ui.error(found)
        return ExitStatus.ERROR
    ui.result(json.dumps(found.to_json(), indent=2) if args.json else found.summary())
    return ExitStatus.GATE_FAILED if found.first_diverging or not found.data["whole_model"].get("ok") else ExitStatus.OK


def generated_patch(checkout, profile, scratch: Path, progress) -> Path:
    """The patch for `profile`, written into a clone of the checkout under `scratch` (hooks off)."""
    from pipelines.autopatch import act
    from pipelines.git import Git
    from pipelines.target import Checkout

    root = scratch / "liger-kernel"
    Git(scratch).run("-c", "core.hooksPath=/dev/null", "clone", "-q", "--no-hardlinks", str(checkout.root), str(root))
    progress(f"generating the {profile.model_type} patch in {root}")
    act.act(Checkout(root), profile)  # the changeset written and formatted with the target's ruff
    return root
