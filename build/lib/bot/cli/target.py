"""`liger-bot target fetch DIR [--version V]`: a Liger-Kernel git checkout from the PyPI sdist."""

from __future__ import annotations

from pipelines import target
from pipelines.outcome import ExitStatus


def register(subparsers) -> None:
    parser = subparsers.add_parser("target", help="manage the target Liger-Kernel checkout")
    verbs = parser.add_subparsers(dest="target_command", required=True, metavar="VERB")
    fetch = verbs.add_parser("fetch", help="make a Liger-Kernel git checkout from the liger-kernel sdist on PyPI")
    fetch.add_argument("directory", help="where to put the checkout (must not exist or be empty)")
    fetch.add_argument("--version", default=target.DEFAULT_VERSION, help="liger-kernel version (default %(default)s)")
    fetch.set_defaults(handler=fetch_command)


def fetch_command(args, ui) -> ExitStatus:
    ui.progress(f"fetching liger-kernel {args.version} (cached in {target.cache_dir()})")
    checkout = target.fetch(args.directory, args.version)
    ui.result(f"{checkout.root}: liger-kernel {args.version}, commit {checkout.git.head()[:12]}")
    return ExitStatus.OK
