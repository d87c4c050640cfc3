"""The whole-model gate tells a right patch from a wrong one: the patched model beside HF, trained and compared.

Each test writes a real generated patch into a fresh Liger checkout and runs the gate's child process on it (the
CPU host's path: PyTorch references of Liger's kernels), as verify does.
"""

from __future__ import annotations

import re

import pytest

from pipelines import target
from pipelines.autopatch import act
from pipelines.autopatch import verify
from pipelines.outcome import GateStatus
from tests.pipelines.autopatch.hand_profiles import hand_profile

CPU = verify.LocalRunner(has_gpu=False)


def patched_checkout(root, profile):
    checkout = target.fetch(root)
    act.act(checkout, profile)
    return checkout


@pytest.fixture(scope="module")
def seed_oss(tmp_path_factory, liger_template):
    profile = hand_profile("seed_oss")
    return profile, patched_checkout(tmp_path_factory.mktemp("right") / "liger-kernel", profile)


@pytest.mark.slow
def test_right_patch_matches_hf_through_both_patching_paths(seed_oss):
    profile, checkout = seed_oss
    gate = verify.gate_whole_model(profile, checkout.root, CPU)
    assert gate.status is GateStatus.PASS, gate.detail
    assert "instance: match" in gate.detail and "class: match" in gate.detail
    used = re.search(r"PyTorch references of Liger's kernels \(CPU host\): (.*)$", gate.detail).group(1)
    assert set(used.split(", ")) == {"fused_linear_cross_entropy", "rms_norm", "rope", "swiglu"}


@pytest.mark.slow
def test_wrong_rms_offset_diverges(tmp_path, liger_template):
    # the motivating case: an offset of 1 on a Llama-style norm passed every CPU gate before this one
    profile = hand_profile("seed_oss").with_overrides({"rms_offset": 1.0})
    checkout = patched_checkout(tmp_path / "liger-kernel", profile)
    gate = verify.gate_whole_model(profile, checkout.root, CPU)
    assert gate.status is GateStatus.FAIL and gate.hard
    assert "class: DIVERGES" in gate.detail and "instance: DIVERGES" in gate.detail


@pytest.mark.slow
def test_an_entry_the_model_cannot_build_fails(seed_oss, tmp_path):
    profile, checkout = seed_oss
    fp32 = checkout.root / act.CONVERGENCE_FILES[2]
    original = fp32.read_text()
    setup = original.index('MINI_MODEL_SETUPS["mini_seed_oss"]')
    broken = original[:setup] + original[setup:].replace("num_key_value_heads=2,", "num_key_value_heads=3,", 1)
    fp32.write_text(broken)  # 8 query heads cannot share 3 key/value heads
    try:
        gate = verify.gate_whole_model(profile, checkout.root, CPU)
    finally:
        fp32.write_text(original)
    assert gate.status is GateStatus.FAIL and gate.detail.startswith("reference: ")


def test_generated_entry_turns_randomness_off_and_reads_back(seed_oss):
    profile, checkout = seed_oss
    entry = verify.convergence_entry(checkout.root, "seed_oss")
    # Seed-OSS defaults residual_dropout to 0.1: two training runs would differ step by step
    assert entry.config["residual_dropout"] == 0.0 and entry.config["attention_dropout"] == 0.0
    assert entry.config["attn_implementation"] == "sdpa" and entry.config["vocab_size"] == 32000
    assert entry.tolerances["loss_rtol"] == 1e-5 and entry.lr == 1e-4  # mini_mistral's fp32 values
    assert verify.cpu_config(entry.config)["hidden_size"] == entry.config["hidden_size"] // 8


@pytest.mark.slow
def test_experts_routed_to_the_wrong_expert_diverge_on_the_cpu_s_sparse_router(tmp_path, liger_template):
    # the GPU entry routes 2 of 2 experts (TF32, act.MINI_CONVERGENCE_CONFIG); the CPU gate keeps a sparse router
    # (verify.CPU_ROUTED_EXPERTS), so a patch that sends tokens to the wrong expert must fail here
    # (the same patch unchanged passes: OLMoE's row of the breadth table, benchmarks/NOTES.md; not rerun here for time)
    profile = hand_profile("olmoe")
    checkout = patched_checkout(tmp_path / "liger-kernel", profile)
    experts = checkout.root / "src/liger_kernel/transformers/swiglu.py"
    routed = "top_k_index_2d = top_k_index.view(-1, top_k_index.shape[-1]).to(torch.int32)"
    assert routed in experts.read_text()
    neighbour = f"{routed}\n        top_k_index_2d = (top_k_index_2d + 1) % self.num_experts"
    experts.write_text(experts.read_text().replace(routed, neighbour))
    wrong = verify.gate_whole_model(profile, checkout.root, CPU)
    assert wrong.status is GateStatus.FAIL and wrong.hard
    assert "class: DIVERGES" in wrong.detail and "instance: DIVERGES" in wrong.detail


def test_an_entry_already_cpu_sized_runs_as_written_on_the_cpu():
    # mini_deepseek_v3 (hidden 32, MLA ranks 8), copied for an alias: divided by 8 its heads would be 1 wide
    narrow = {"hidden_size": 32, "kv_lora_rank": 8, "qk_rope_head_dim": 8}
    assert verify.cpu_config(narrow, sparse_router=False) == narrow
    assert verify.cpu_config({"hidden_size": 1024}, sparse_router=False) == {"hidden_size": 128}
