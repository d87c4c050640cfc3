"""The rendered PR body of an autopatch run and of a kernel run, against Liger's PR template, checked against golden
files. The parts are built from fixed inputs (a written profile, fixed gates, versions and host), so the files are
stable and no network or model is needed; regenerate one by writing the test's `body` there and reading the diff."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pipelines import pull_request
from pipelines.autopatch import pipeline as autopatch
from pipelines.autopatch.profile import DECISION_KEYS
from pipelines.autopatch.profile import Decision
from pipelines.autopatch.profile import Evidence
from pipelines.autopatch.profile import Identity
from pipelines.autopatch.profile import Method
from pipelines.autopatch.profile import Profile
from pipelines.kernel import pipeline as kernel
from pipelines.kernel.profile import KernelProfile
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.outcome import Report
from tests.bot.test_assets import PROFILE as RELU2_PROFILE
from tests.pipelines.autopatch.hand_profiles import DENSE

GOLDEN = Path(__file__).parent / "golden"
HOST = "CPU only (TRITON_INTERPRET=1; the GPU gates SKIP and say so)"
VERSIONS = {"liger-bot": "0.1.0", "transformers": "5.24.0", "torch": "2.13.0", "triton": "3.9.0"}
MODELING = "transformers/models/olmo/modeling_olmo.py"
EVIDENCE = {
    "rms_offset": (Evidence(MODELING, (52, 54), "return self.weight * hidden_states.to(input_dtype)"),),
    "rope": (Evidence(MODELING, (88, 88), "def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None):"),),
}
AUTOPATCH_GATES = (
    GateResult("Checkstyle", GateStatus.PASS, "ruff check . && ruff format --check ."),
    GateResult("Instance patching", GateStatus.PASS, "3 passed"),
    GateResult("Convergence fp32 FLCE", GateStatus.SKIP, "needs GPU runner", hard=False),
)
FILES = ["src/liger_kernel/transformers/model/olmo.py", "src/liger_kernel/transformers/monkey_patch.py"]


def olmo_profile() -> Profile:
    identity = Identity(
        model_type="olmo",
        display_name="OLMo",
        causal_lm_class="OlmoForCausalLM",
        base_model_class="OlmoModel",
        config_class="OlmoConfig",
        decoder_layer_class="OlmoDecoderLayer",
        modeling_module="transformers.models.olmo.modeling_olmo",
        modeling_file=MODELING,
    )
    decisions = {key: Decision(DENSE[key], Method.AST, EVIDENCE.get(key, ())) for key in DECISION_KEYS if key in DENSE}
    decisions["rms_offset"] = Decision(1.0, Method.OVERRIDE, EVIDENCE["rms_offset"], reason="a reviewer's --set")
    return Profile(identity, decisions)


def fixed(parts: pull_request.BodyParts) -> pull_request.BodyParts:
    return dataclasses.replace(parts, versions=VERSIONS, host=HOST)


def check_golden(body: str, name: str) -> None:
    assert body == (GOLDEN / name).read_text()


def test_an_autopatch_run_s_body_matches_its_golden_file(liger_checkout):
    profile = olmo_profile()
    notes = ("kept the fp32 upcast",)
    parts = fixed(autopatch.pr_parts(liger_checkout, profile, FILES, list(AUTOPATCH_GATES), notes, VERSIONS))
    body = pull_request.render(parts, Report(AUTOPATCH_GATES))
    check_golden(body, "pr_body_autopatch_olmo.md")
    # one collapsible block per decision with evidence, each citing the HF source at the exact release
    link = f"https://github.com/huggingface/transformers/blob/v5.24.0/src/{MODELING}#L52-L54"
    assert body.count("<details><summary>") == len(EVIDENCE) + 2  # + versions + reproduce
    assert f"[{MODELING}:52-54]({link})" in body
    assert "liger-bot autopatch olmo --repo DIR --set rms_offset=1.0" in body  # the reviewer's setting reproduces
    assert autopatch.pr_title(profile) not in body  # the title is the PR's, never repeated in its body


def test_a_kernel_run_s_body_matches_its_golden_file(liger_checkout, tmp_path):
    (tmp_path / "benchmark.md").write_text(
        "| BT | liger (ms) | torch (ms) |\n|---|---|---|\n| 1024 | 0.010 | 0.020 |\n"
    )
    (tmp_path / "benchmark.png").write_bytes(b"\x89PNG")
    profile = KernelProfile(**RELU2_PROFILE)
    gates = (
        GateResult("checkstyle", GateStatus.PASS, "ruff check + ruff format --check: 7 files"),
        GateResult("unit tests (CPU, TRITON_INTERPRET=1)", GateStatus.PASS, "12 passed"),
        GateResult("unit tests (GPU)", GateStatus.SKIP, "needs GPU runner", hard=False),
    )
    body = pull_request.render(fixed(kernel.pr_parts(liger_checkout, profile, tmp_path, "relu2")), Report(gates))
    check_golden(body, "pr_body_kernel_relu2.md")
    assert "- [x] run `make checkstyle` to ensure code style (liger-bot: checkstyle)" in body
    assert "![benchmark](benchmark.png)" in body and kernel.title(profile, "relu2") not in body


def test_the_app_s_notes_and_a_gpu_runner_s_verdict_render_into_the_same_body(liger_checkout):
    """The job renders the body from the parts once, with the merged verdict: no second gate table, no stale SKIP."""
    parts = fixed(autopatch.pr_parts(liger_checkout, olmo_profile(), FILES, list(AUTOPATCH_GATES), (), VERSIONS))
    gpu = Report((GateResult("Convergence fp32 FLCE", GateStatus.PASS, "4 passed"),))
    body = pull_request.render(parts, Report(AUTOPATCH_GATES).merged(gpu), ["Requested by @someone in #7 (job 3)."])
    assert body.count("| Check | Status | Detail |") == 1 and "needs GPU runner" not in body
    assert "- [x] run `make test-convergence`" in body
    assert body.index("Requested by @someone") < body.index("<summary>Versions</summary>")
    assert pull_request.BodyParts.from_json(parts.to_json()) == parts  # parked on the job while a GPU runner verifies


def test_a_cli_run_hands_off_to_gh_with_the_body_file():
    line = pull_request.handoff("Add LigerReLU2: a kernel", "liger-bot/kernel-relu2", "/tmp/x y/pr_body.md")
    assert line == (
        "open the PR: gh pr create --draft --head liger-bot/kernel-relu2 --title 'Add LigerReLU2: a kernel' "
        "--body-file '/tmp/x y/pr_body.md'"
    )
