"""debug names the wrong swap: the kernel flag whose removal makes the model match, and the first module that
differs from its HF original (path, dtype, the Liger class and its settings)."""

from __future__ import annotations

import json
import subprocess

import pytest

from pipelines.autopatch import debug
from pipelines.autopatch import verify
from tests.pipelines.autopatch.hand_profiles import hand_profile
from tests.pipelines.autopatch.test_whole_model import patched_checkout


@pytest.mark.slow
def test_wrong_offset_is_traced_to_the_rms_norm_flag_and_the_first_norm(tmp_path, liger_template):
    profile = hand_profile("seed_oss").with_overrides({"rms_offset": 1.0})
    checkout = patched_checkout(tmp_path / "liger-kernel", profile)
    found = debug.diagnose(profile, checkout.root, verify.LocalRunner(has_gpu=False))
    assert isinstance(found, debug.Diagnosis), found
    assert found.culprits == ["rms_norm"]
    first = found.first_diverging
    assert first["module"] == "model.layers.0.input_layernorm" and first["where"] == "fp32"
    assert first["liger"] == "LigerRMSNorm" and first["settings"]["offset"] == 1.0
    assert "first diverging module: `model.layers.0.input_layernorm`" in found.summary()


@pytest.mark.slow
def test_cli_names_a_wrong_casting_mode(liger_checkout, liger_bot_exe):
    # VaultGemma's norm is Gemma-style (fp32 to the end); llama casting rounds before the weight: only bf16 sees it
    def run(*extra):
        argv = [liger_bot_exe, "debug", "vaultgemma", "--repo", str(liger_checkout.root), "--json", *extra]
        return subprocess.run(argv, capture_output=True, text=True, timeout=900)

    broken = run("--set", "rms_casting_mode=llama")
    assert broken.returncode == 4, broken.stderr[-2000:]
    found = json.loads(broken.stdout)
    assert found["whole_model"]["ok"]  # fp32 cannot tell the casting modes apart
    first = found["first_diverging"]
    assert first["module"] == "model.layers.0.input_layernorm" and first["where"] == "bf16"
    assert first["liger"] == "LigerRMSNorm" and first["settings"]["casting_mode"] == "llama"
    assert liger_checkout.git.dirty_paths() == [] and liger_checkout.git.current_branch() == "main"
    # the right casting mode differs from HF nowhere (the same module rows, judged the same way)
    assert all(
        not row["diverges"]
        for row in found["modules"]
        if row["module"] != first["module"] and "norm" not in row["module"]
    )


def test_the_gate_row_keeps_each_flag_with_its_verdict():
    # a table cell folds line breaks into spaces: "diverges with X=False: matches" read as X's removal not helping
    data = {
        "whole_model": {"ok": False},
        "flags": [{"off": "fused_linear_cross_entropy", "ok": True}, {"off": "layer_norm", "ok": False}],
        "modules": [{}] * 9,
    }
    row = debug.Diagnosis(data).summary(separator="; ")
    assert row.startswith("whole model (fp32, class-level patch): diverges; with fused_linear_cross_entropy=False: ")
    assert "fused_linear_cross_entropy=False: matches; with layer_norm=False: still diverges;" in row
    assert debug.Diagnosis(data).culprits == ["fused_linear_cross_entropy"]


def test_capturing_inputs_leaves_a_module_called_twice_its_own_inputs():
    # Gemma4-unified calls its rotary embedding once per layer type; debug crashed there when the capture hook
    # handed the second call the first call's inputs (a pre-hook's return value replaces the inputs)
    import torch

    from pipelines.autopatch import model_check

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Identity()

        def forward(self, input_ids):
            self.result = self.scale(input_ids.float()) + self.scale(input_ids.float() * 10)
            return self.result

    x, model = torch.tensor([1, 2]), Twice()
    seen = model_check._captured_inputs(model, {"input_ids": x})
    assert torch.equal(seen["scale"][0][0], x.float())  # the first call's inputs are the ones kept
    assert torch.equal(model.result, torch.tensor([11.0, 22.0]))  # and the second call ran on its own
