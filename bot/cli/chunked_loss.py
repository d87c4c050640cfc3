"""`liger-bot chunked-loss SPEC --repo DIR [--name NAME] [--set field=value] [--json]`: a preference loss written
the plain way (or a TRL loss type) -> a chunked Liger loss that never holds the [B*T, V] logits, tested and benchmarked.
"""

from __future__ import annotations

from bot.cli.end_state import back_on_users_branch
from bot.cli.runs import show_profile
from bot.cli.runs import show_run
from pipelines.outcome import ExitStatus


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "chunked-loss",
        help="turn a preference loss (a plain function, a reference class, a TRL loss type) into a chunked Liger loss",
    )
    parser.add_argument(
        "spec",
        help="path/in/repo.py:Class (e.g. test/chunked_loss/test_dpo_loss.py:HFDPOLoss), a .py file holding the "
        "loss function (file.py[:function]), or trl:<trainer>:<loss_type> (e.g. trl:dpo:ipo)",
    )
    parser.add_argument("--repo", required=True, help="the Liger-Kernel checkout to write into (clean)")
    parser.add_argument("--name", help="the loss's snake_case name (default: from the spec)")
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="fix a string hyper-parameter of the reference (loss_type=simpo), average_log_prob=true|false, "
        "compute_nll_loss=true|false, pairing=unpaired for a plain function of chosen/rejected groups, or "
        "rename.HYPER=NAME for the generated API's name of a hyper-parameter (rename.simpo_gamma=gamma)",
    )
    parser.add_argument(
        "--out",
        help="where the PR body and benchmark table go (default DIR/../<DIR name>.liger-bot/chunked-loss-NAME, outside the checkout)",
    )
    parser.add_argument("--profile-only", action="store_true", help="print the profile; write nothing")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=chunked_loss_command)


def chunked_loss_command(args, ui) -> ExitStatus:
    from pipelines.chunked_loss import pipeline  # imports torch: not needed for --help

    if args.profile_only:
        return show_profile(ui, pipeline.understand(args.spec, args.repo, args.name, args.settings)[2], args.json)
    with back_on_users_branch(args.repo) as start:
        run = pipeline.run(args.spec, args.repo, args.name, args.out, progress=ui.progress, settings=args.settings)
    return show_run(ui, run, args.json, start, "chunked-loss")
