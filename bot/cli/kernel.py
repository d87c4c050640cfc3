"""`liger-bot kernel SPEC --repo DIR [--name snake_name] [--json]`: a PyTorch op -> a tested Triton kernel."""

from __future__ import annotations

from bot.cli.end_state import back_on_users_branch
from bot.cli.runs import show_profile
from bot.cli.runs import show_run
from pipelines.outcome import ExitStatus


def register(subparsers) -> None:
    parser = subparsers.add_parser("kernel", help="turn a PyTorch op into a tested, benchmarked Liger Triton kernel")
    parser.add_argument("spec", help="a transformers ACT2FN name, path/in/repo.py:function_or_Module, or a .py file")
    parser.add_argument("--repo", required=True, help="the Liger-Kernel checkout to write into (clean)")
    parser.add_argument("--name", help="the kernel's snake_case name (default: from the spec)")
    parser.add_argument(
        "--out",
        help="where the PR body, benchmark table and plot go (default DIR/../<DIR name>.liger-bot/kernel-NAME, outside the checkout)",
    )
    parser.add_argument("--force", action="store_true", help="write it even when the target has a kernel computing it")
    parser.add_argument("--profile-only", action="store_true", help="print the kernel profile; write nothing")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=kernel_command)


def kernel_command(args, ui) -> ExitStatus:
    from pipelines.kernel import pipeline  # imports torch: not needed for --help

    if args.profile_only:
        return show_profile(ui, pipeline.understand(args.spec, args.repo, args.name)[2], args.json)
    with back_on_users_branch(args.repo) as start:
        run = pipeline.run(args.spec, args.repo, args.name, args.out, progress=ui.progress, force=args.force)
    return show_run(ui, run, args.json, start, "kernel")
