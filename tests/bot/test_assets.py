"""A kernel PR shows its benchmark plot: the pipeline links it relatively beside pr_body.md, and the App swaps in
the link its forge published the plot under (the local forge's folder, or the assets branch on the stand-in)."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import urllib.request
import zlib
from pathlib import Path

import pytest

from bot.figures import Figures
from bot.figures import embed_figures
from bot.forge.assets import stored_name
from bot.forge.base import AssetRejected
from bot.forge.local import LocalForge
from bot.jobs import JobState
from bot.runners import REPORT_ARTIFACT
from bot.runners import REPORT_FILE
from bot.runners import VERIFY_WORKFLOW
from bot.runners import ActionsRunner
from bot.runners import VerifyReport
from pipelines.contract import Outcome
from pipelines.contract import Pipeline
from pipelines.contract import Request
from pipelines.contract import Understood
from pipelines.kernel.job import profile_table as kernel_profile_table
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from tests.bot.standin_app import TARGET
from tests.bot.standin_app import bot_fixture  # noqa: F401
from tests.bot.standin_app import seed_target
from tests.bot.standin_fixtures import *  # noqa: F401,F403
from tests.bot.standin_fixtures import STANDIN_MAINTAINER
from tests.bot.standin_fixtures import STANDIN_REPO

BRANCH = "liger-bot/kernel-relu2"
TABLE = "| BT | liger (ms) | torch (ms) |\n|---|---|---|\n| 1024 | 0.010 | 0.020 |\n"
GATES = [
    GateResult("checkstyle", GateStatus.PASS, "ruff check + ruff format --check: 7 files"),
    GateResult("benchmark (GPU)", GateStatus.PASS, "5 sizes"),
]
# the profile `liger-bot kernel relu2 --profile-only --json` prints for Liger-Kernel 0.8.5
PROFILE = {
    "operation_name": "relu2",
    "function_class_name": "LigerReLU2Function",
    "module_class_name": "LigerReLU2",
    "functional_name": "liger_relu2",
    "tier": 1,
    "tier_description": "element-wise",
    "closest_existing_kernel": "relu_squared (flat grid variant)",
    "forward_inputs": [{"name": "X", "shape": "(..., H)", "dtype": "input dtype"}],
    "forward_outputs": [{"name": "Y", "shape": "(..., H)", "dtype": "same as input"}],
    "forward_computation": "relu = tl.maximum(x, 0.0); pow_1 = (relu * relu); Y = pow_1",
    "precision_sensitive_ops": ["pow"],
    "backward_saved_tensors": ["X"],
    "backward_recompute": "every forward intermediate is recomputed from X in the backward kernel",
    "gradient_formulas": {"dX": "relu = tl.maximum(x, 0.0); dX = tl.where(relu <= 0.0, 0.0, dy * relu * 2.0)"},
    "grid_dimensions": "1D",
    "grid_description": "flat: one program per BLOCK_SIZE elements of the flattened tensor",
    "block_size_source": "custom: BLOCK_SIZE=2048, num_warps=8 (bandwidth-bound flat grid)",
    "needs_sm_parallelism": False,
    "module_init_params": [{"name": "in_place", "type": "bool", "default": True}],
    "learnable_params": [],
    "benchmark_variable": "BT",
    "benchmark_x_label": "total tokens",
    "benchmark_x_values_suggestion": [1024, 2048, 4096, 8192, 16384],
    "benchmark_providers": ["liger", "torch", "torch_compile"],
    "benchmark_fixed_config": {"hidden_size": "model config", "dtype": "torch.bfloat16"},
    "source": "transformers.activations.ACT2FN['relu2']",
}


def png(seed: int) -> bytes:
    """A real 1x1 PNG whose colour depends on `seed`: other seeds, other bytes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixel = zlib.compress(bytes([0, seed % 256, seed * 7 % 256, seed * 13 % 256]))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixel) + chunk(b"IEND", b"")


def kernel_out_dir(out_dir: Path, plot: bytes | None) -> Path:
    """What the kernel pipeline leaves in its out dir after a GPU benchmark: the table, the plot, pr_body.md."""
    from pipelines.kernel.pipeline import pr_body
    from pipelines.kernel.profile import KernelProfile
    from pipelines.target import Checkout

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "benchmark.md").write_text(TABLE)
    if plot is not None:
        (out_dir / "benchmark.png").write_bytes(plot)
    target = Checkout(out_dir.parent)  # no PR template there: the sections follow one another
    (out_dir / "pr_body.md").write_text(pr_body(target, KernelProfile(**PROFILE), GATES, out_dir, "relu2"))
    return out_dir


def kernel_parts(out_dir: Path):
    """The kernel pipeline's PR parts for the out dir `kernel_out_dir` left (what its row returns to the job)."""
    from pipelines.kernel.pipeline import pr_parts
    from pipelines.kernel.profile import KernelProfile
    from pipelines.target import Checkout

    return pr_parts(Checkout(out_dir.parent), KernelProfile(**PROFILE), out_dir, "relu2")


def image_links(body: str) -> list[str]:
    return [line.split("](", 1)[1].rstrip(")") for line in body.splitlines() if line.startswith("![")]


@pytest.fixture
def local_forge(tmp_path):
    path = tmp_path / "liger-kernel"
    path.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    return LocalForge(path)


# -- the pipeline's body, built without a forge (the CLI) ----------------------------------------------------


def test_the_cli_body_links_the_plot_beside_it(tmp_path):
    out_dir = kernel_out_dir(tmp_path / "out", png(1))
    body = (out_dir / "pr_body.md").read_text()
    assert "### Benchmark\n" + TABLE in body
    (link,) = image_links(body)
    assert link == "benchmark.png" and (out_dir / "pr_body.md").parent.joinpath(link).read_bytes() == png(1)
    assert str(tmp_path) not in body  # no absolute local path, which renders nowhere


def test_no_plot_no_image_line(tmp_path):
    body = (kernel_out_dir(tmp_path / "out", None) / "pr_body.md").read_text()
    assert "### Benchmark" in body and image_links(body) == []


# -- the assets' names ----------------------------------------------------------------------------------------


def test_stored_names_are_content_addressed():
    assert stored_name("benchmark.png", png(1)) == f"{hashlib.sha256(png(1)).hexdigest()[:16]}-benchmark.png"
    assert stored_name("benchmark.png", png(1)) == stored_name("benchmark.png", png(1))
    assert stored_name("benchmark.png", png(2)) != stored_name("benchmark.png", png(1))
    for name in ("", "a/b.png", "..png", "benchmark.PNG ", "benchmark.svg", "x" * 70 + ".png"):
        with pytest.raises(AssetRejected):
            stored_name(name, png(1))


# -- the local forge --------------------------------------------------------------------------------------------


def test_local_pr_shows_the_plot_copied_into_the_forge(local_forge, tmp_path):
    out_dir = kernel_out_dir(tmp_path / "job-1.out", png(1))
    body = embed_figures(local_forge, STANDIN_REPO, (out_dir / "pr_body.md").read_text(), Figures.from_dir(out_dir))
    pull = local_forge.ensure_pull_request(STANDIN_REPO, BRANCH, "main", "Add LigerReLU2", body)

    shown = Path(pull.url.removeprefix("file://"))
    (link,) = image_links(shown.read_text())
    assert link.startswith("../assets/") and (shown.parent / link).read_bytes() == png(1)
    out_dir.joinpath("benchmark.png").unlink()  # the worker discards its out dir once the PR is open
    assert (shown.parent / link).read_bytes() == png(1)
    # published again (a retried job): the same file, the same link
    assert local_forge.publish_asset(STANDIN_REPO, "benchmark.png", png(1)) == link
    assert len(list((local_forge.root / "assets").iterdir())) == 1


def test_a_link_in_the_out_dir_is_never_followed(local_forge, tmp_path):
    """The out dir is written by the child that ran the target's code: a `benchmark.png` pointing at a secret
    is not read, let alone published."""
    out_dir = kernel_out_dir(tmp_path / "job-2.out", png(1))
    secret = tmp_path / "app-private-key.pem"
    secret.write_bytes(png(9))  # even one that looks like an image
    (out_dir / "benchmark.png").unlink()
    (out_dir / "benchmark.png").symlink_to(secret)
    figures = Figures.from_dir(out_dir)
    assert figures.plot is None and figures.table == TABLE
    body = embed_figures(local_forge, STANDIN_REPO, (out_dir / "pr_body.md").read_text(), figures)
    assert image_links(body) == [] and "\n\n\n" not in body
    assert not (local_forge.root / "assets").exists()


def test_a_refused_plot_leaves_a_note_not_a_broken_image(local_forge, tmp_path):
    out_dir = kernel_out_dir(tmp_path / "job-3.out", b"<html>not a plot</html>")
    body = embed_figures(local_forge, STANDIN_REPO, (out_dir / "pr_body.md").read_text(), Figures.from_dir(out_dir))
    assert image_links(body) == []
    assert "_(the benchmark plot was not published: asset benchmark.png does not hold a png image)_" in body


# -- the GPU runner's plot, from the report artifact, on the stand-in -------------------------------------------


def test_the_gpu_runners_plot_and_table_join_the_cpu_workers_body(github_forge, github_standin, tmp_path):
    inputs = {"job_id": "7", "pipeline": "kernel", "target": "relu2"}
    github_forge.dispatch_workflow(STANDIN_REPO, VERIFY_WORKFLOW, "main", inputs)
    (run,) = github_standin.runs.values()
    members = {
        REPORT_FILE: json.dumps(VerifyReport("7", tuple(GATES)).to_json()).encode(),
        "benchmark.md": TABLE.encode(),
        "benchmark.png": png(5),
    }
    github_standin.complete_run(run["id"], "success", {REPORT_ARTIFACT: members})
    latest, *_ = github_forge.workflow_runs(STANDIN_REPO, VERIFY_WORKFLOW, "main")
    report = ActionsRunner(github_forge).resume(STANDIN_REPO, latest, "7")
    assert report.gates == tuple(GATES) and report.figures == Figures(TABLE, png(5))

    cpu_body = "## LigerReLU2\n\n### Verify\n| Check | Status | Detail |\n"  # the worker's host had no GPU
    body = embed_figures(github_forge, STANDIN_REPO, cpu_body, report.figures)
    assert body.startswith(cpu_body) and "### Benchmark (GPU runner)\n\n" + TABLE in body
    (link,) = image_links(body)
    with urllib.request.urlopen(link, timeout=10) as answer:
        assert answer.read() == png(5)


# -- a kernel job through the App: comment -> worker -> draft PR showing its plot ---------------------------------


def small_kernel(plot: bytes | None) -> Pipeline:
    """The kernel row with the pipeline's real PR body over a small act: one file committed on the branch, and the
    out dir a GPU benchmark leaves (table, plot, pr_body.md)."""

    def understand(request: Request) -> Understood:
        return Understood(PROFILE, BRANCH)

    def act_verify(request: Request, progress) -> Outcome:
        git = request.checkout.git
        git.checkout(BRANCH, create_from="HEAD")
        request.checkout.path("src/liger_kernel/ops/relu2.py").write_text('"""LigerReLU2."""\n')
        git.commit_all("Add LigerReLU2")
        parts = kernel_parts(kernel_out_dir(request.out_dir, plot))
        files = ["src/liger_kernel/ops/relu2.py"]
        return Outcome(BRANCH, GATES, files, "Add LigerReLU2", parts, True, PROFILE, verify_target="relu2")

    return Pipeline(understand, act_verify, kernel_profile_table)


def run_kernel_job(bot, liger_checkout, config: str, plot: bytes | None):
    bot.worker.pipelines["kernel"] = small_kernel(plot)
    seed_target(bot.standin, bot.remote, liger_checkout.root, config)
    bot.warm_mirror()
    issue = bot.standin.add_issue(TARGET.full_name, "A ReLU² kernel", "for Nemotron-H", STANDIN_MAINTAINER)
    bot.deliver("issue_comment", bot.say(issue, "/liger kernel relu2"))
    bot.drain()
    (job,) = bot.store.jobs()
    return job


def test_a_kernel_job_verified_here_opens_a_pr_showing_its_plot(bot, liger_checkout):
    job = run_kernel_job(bot, liger_checkout, "autonomous: true\n", png(6))
    job = bot.store.get(job.id)
    assert job.job_state is JobState.PR_OPENED, job.message
    (pull,) = bot.standin.pulls(TARGET.full_name)
    assert "### Benchmark\n" + TABLE in pull["body"]
    (link,) = image_links(pull["body"])
    assert "/blob/" in link and link.endswith("-benchmark.png?raw=true")
    with urllib.request.urlopen(link, timeout=10) as answer:
        assert answer.read() == png(6)
    assert bot.remote_head(BRANCH) == job.pushed_sha  # the plot never went onto the PR's branch
    assert "benchmark.png" not in bot.remote_files(BRANCH)


def test_a_kernel_job_without_a_plot_opens_a_pr_with_no_image_line(bot, liger_checkout):
    job = run_kernel_job(bot, liger_checkout, "autonomous: true\n", None)
    assert bot.store.get(job.id).job_state is JobState.PR_OPENED
    (pull,) = bot.standin.pulls(TARGET.full_name)
    assert "### Benchmark" in pull["body"] and image_links(pull["body"]) == []
    assert bot.standin.count("PUT", r"/contents/") == 0


def test_a_kernel_job_on_gpu_runners_opens_a_pr_showing_the_runners_plot(bot, liger_checkout):
    actions = "autonomous: true\nrunner:\n  kind: actions\n  labels: [self-hosted, gpu]\n"
    job = run_kernel_job(bot, liger_checkout, actions, None)  # the worker's host has no GPU: no plot of its own
    (run,) = bot.standin.runs.values()
    gpu_gates = (*GATES, GateResult("unit tests (GPU)", GateStatus.PASS, "12 passed"))
    members = {
        REPORT_FILE: json.dumps(VerifyReport(str(job.id), gpu_gates, head_sha=run["sha"]).to_json()).encode(),
        "benchmark.md": TABLE.encode(),
        "benchmark.png": png(7),
    }
    bot.deliver("workflow_run", bot.standin.complete_run(run["id"], "success", {REPORT_ARTIFACT: members}))
    bot.drain()

    assert bot.store.get(job.id).job_state is JobState.PR_OPENED
    (pull,) = bot.standin.pulls(TARGET.full_name)
    assert "| unit tests (GPU) | PASS | 12 passed |" in pull["body"]
    (link,) = image_links(pull["body"])
    with urllib.request.urlopen(link, timeout=10) as answer:
        assert answer.read() == png(7)
