"""Conventions every `liger-bot` command shares (issue 15, point 8), through the installed console script."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipelines.outcome import ExitStatus


def test_version_names_the_installed_package(liger_bot_exe):
    done = subprocess.run([liger_bot_exe, "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip().startswith("liger-bot 0.")


def test_help_of_every_command_does_not_import_torch():
    # `--help` answers at once: the pipelines that import torch, transformers or triton load inside the handlers
    probe = (
        "import sys\n"
        "from bot.cli import build_parser\n"
        "build_parser()\n"
        "print(sorted(m for m in ('torch', 'transformers', 'triton') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _run(argv, handler=None):
    import io

    from bot.cli import program

    out, err = io.StringIO(), io.StringIO()
    if handler is None:
        return program(argv, {}, out, err), out.getvalue(), err.getvalue()
    import bot.cli as cli

    parser = cli.build_parser()
    original = cli.build_parser
    try:
        cli.build_parser = lambda: _with_handler(parser, handler)
        return program(argv, {}, out, err), out.getvalue(), err.getvalue()
    finally:
        cli.build_parser = original


def _with_handler(parser, handler):
    """The real parser with every subcommand's handler replaced: the CLI's own error handling around it."""
    for action in parser._subparsers._group_actions:
        for sub in action.choices.values():
            sub.set_defaults(handler=handler)
    return parser


def test_a_refusal_with_json_is_a_versioned_json_object_on_stdout(tmp_path):
    import json

    from pipelines.outcome import ExitStatus

    status, out, err = _run(["autopatch", "nosuchmodel", "--repo", str(tmp_path / "missing"), "--json"])
    assert status == ExitStatus.REFUSED and "error:" in err
    payload = json.loads(out)
    assert payload["schema"] == 1 and payload["error"]["status"] == int(ExitStatus.REFUSED)
    assert payload["error"]["message"]


def test_ctrl_c_exits_130_and_says_so():
    from pipelines.outcome import ExitStatus

    def interrupted(args, ui):
        raise KeyboardInterrupt

    status, out, err = _run(["autopatch", "olmo", "--repo", "x", "--json"], interrupted)
    assert status == ExitStatus.INTERRUPTED == 130 and "interrupted" in err
    assert '"status": 130' in out


def test_quiet_silences_progress_and_keeps_errors():
    def chatty(args, ui):
        ui.progress("working")
        ui.error("but this one matters")
        return 0

    _, _, loud = _run(["autopatch", "olmo", "--repo", "x"], chatty)
    _, _, quiet = _run(["-q", "autopatch", "olmo", "--repo", "x"], chatty)
    assert "working" in loud and "working" not in quiet and "but this one matters" in quiet


@pytest.mark.slow
def test_kernel_through_the_cli_ends_on_the_users_branch_with_its_draft_pr_recorded(liger_checkout, tmp_path):
    """relu2 --force (a second copy of LigerReLUSquared, asked for): written, verified, committed on its branch; the
    user's branch is checked out again and clean, and the local forge holds the draft PR, as the App opens it."""
    branch = "liger-bot/kernel-relu2"
    argv = ["kernel", "relu2", "--repo", str(liger_checkout.root), "--force", "--out", str(tmp_path / "out"), "--json"]
    status, out, err = _run(argv)
    assert status is ExitStatus.OK, err
    statuses = {g["name"]: g["status"] for g in json.loads(out)["gates"]}
    assert statuses["checkstyle"] == "PASS"
    assert statuses["unit tests (CPU, TRITON_INTERPRET=1)"] == "PASS"
    assert statuses["unit tests (GPU)"] == "SKIP"  # never PASS without a GPU
    git = liger_checkout.git
    assert git.current_branch() == "main" and git.dirty_paths() == []
    assert git.run("rev-list", "--count", f"main..{branch}").strip() == "1"
    init = git.run("show", f"{branch}:src/liger_kernel/ops/__init__.py")
    assert init.index("ops.qwen2vl_mrope import") < init.index("ops.relu2 import") < init.index("ops.relu_squared")
    assert "| checkstyle | PASS |" in (tmp_path / "out" / "pr_body.md").read_text()
    (record,) = [json.loads(p.read_text()) for p in (liger_checkout.beside("issues")).glob("*.json")]
    assert (record["head"], record["base"], record["draft"]) == (branch, "main", True)
    assert (
        record["title"] == "Add LigerReLU2: a Triton kernel generated from relu2"
        and "| checkstyle | PASS |" in record["body"]
    )
    assert f"draft PR #{record['id']} recorded by the local forge" in err


def test_a_run_interrupted_on_the_bots_branch_ends_on_the_users_branch(liger_checkout):
    from bot.cli.end_state import back_on_users_branch
    from bot.cli.end_state import record_pull_request

    git = liger_checkout.git
    with pytest.raises(KeyboardInterrupt), back_on_users_branch(liger_checkout.root) as start:
        git.checkout("liger-bot/kernel-x", create_from="HEAD")
        liger_checkout.path("half_written.py").write_text("x = 1\n")
        raise KeyboardInterrupt
    assert start.branch == "main" and git.current_branch() == "main" and git.dirty_paths() == []
    first = record_pull_request(start, "kernel", "liger-bot/kernel-x", "Add X", "body 1")
    again = record_pull_request(start, "kernel", "liger-bot/kernel-x", "Add X", "body 2")  # found by its branch
    assert first.number == again.number
    record = json.loads(liger_checkout.beside(f"issues/{first.number}.json").read_text())
    assert record["labels"] == ["liger-bot", "liger-bot:kernel"]  # as the App labels its PRs, not doubled
    assert "body 2" in liger_checkout.beside(f"issues/{first.number}.md").read_text()
