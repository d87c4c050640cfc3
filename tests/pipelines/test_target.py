import subprocess

import pytest

from pipelines import target
from pipelines.outcome import PipelineError


def test_fetch_makes_a_clean_checkout_with_one_commit(liger_checkout):
    assert liger_checkout.monkey_patch.is_file()
    assert liger_checkout.git.dirty_paths() == []
    log = liger_checkout.git.run("log", "--format=%s").splitlines()
    assert log == ["liger-kernel 0.8.5 (from the PyPI sdist)"]
    assert (liger_checkout.root / ".agents/skills/liger-autopatch/decision-matrix.md").is_file()


def test_fetch_refuses_a_non_empty_directory(tmp_path, liger_template):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "file").write_text("mine")
    with pytest.raises(PipelineError, match="not empty"):
        target.fetch(tmp_path / "x")
    assert (tmp_path / "x" / "file").read_text() == "mine"


def test_open_checkout_refuses_a_directory_that_is_not_liger(tmp_path):
    with pytest.raises(PipelineError, match="not a Liger-Kernel checkout"):
        target.open_checkout(tmp_path)


def test_open_checkout_refuses_uncommitted_changes(liger_checkout):
    (liger_checkout.root / "README.md").write_text("edited\n")
    (liger_checkout.root / "new.txt").write_text("new\n")
    with pytest.raises(PipelineError, match="uncommitted changes.*README.md"):
        target.open_checkout(liger_checkout.root)


def test_open_checkout_refuses_a_subdirectory_of_a_repository(liger_checkout):
    with pytest.raises(PipelineError, match="not a Liger-Kernel checkout"):
        target.open_checkout(liger_checkout.root / "src")


def test_bad_version_is_refused_before_any_download(tmp_path):
    with pytest.raises(PipelineError, match="not a liger-kernel version"):
        target.fetch(tmp_path / "t", version="0.8.5; rm -rf /")


def test_cli_fetch_prints_the_checkout(tmp_path, liger_template, liger_bot_exe):
    out = subprocess.run(
        [liger_bot_exe, "target", "fetch", str(tmp_path / "k")], capture_output=True, text=True, check=True
    ).stdout
    assert "liger-kernel 0.8.5, commit" in out
