"""Small real stand-ins for the two pipeline entry points (the pipeline boundary the App calls).

`understand` returns a real `Profile` (12 settled decisions; the model `reviewme` leaves one for review); the
models `notalm` and `*bert*` are refused like non-causal-LMs. `run_pipeline` really edits the checkout, commits on
the branch `liger-bot/autopatch-<model_type>`, reports gates through `progress` and returns the PR's parts (its
profile table), as the real pipeline does. While the file named by BLOCK_FILE exists it waits, so a test can kill the worker
in the middle of a stage.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

from pipelines import pull_request
from pipelines.autopatch.job import profile_table
from pipelines.autopatch.profile import DECISION_KEYS
from pipelines.autopatch.profile import Decision
from pipelines.autopatch.profile import Identity
from pipelines.autopatch.profile import Method
from pipelines.autopatch.profile import Profile
from pipelines.autopatch.profile import Status
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.outcome import PipelineError
from tests.pipelines.autopatch.hand_profiles import DENSE

# a dense Llama-like profile whose norms must not write in place (a reviewer's override)
VALUES = {**DENSE, "rms_in_place": False, "norm_attrs": {"decoder": ["input_layernorm"], "final": "norm", "attn": []}}
BLOCK_FILE = os.environ.get("SMALL_PIPELINE_BLOCK_FILE", "")
NEEDS_REVIEW = {"reviewme", "xglm"}  # rope left for review
calls: list[str] = []


def understand(model: str, checkout) -> Profile:
    calls.append(f"understand {model}")
    if model == "notalm" or "bert" in model:
        raise PipelineError(f"{model} is not a decoder-only causal LM")
    name = model.replace("-", "_").lower()
    title = name.title().replace("_", "")
    identity = Identity(
        model_type=name,
        display_name=title,
        causal_lm_class=f"{title}ForCausalLM",
        base_model_class=f"{title}Model",
        config_class=f"{title}Config",
        decoder_layer_class=f"{title}DecoderLayer",
        modeling_module=f"transformers.models.{name}.modeling_{name}",
        modeling_file=f"transformers/models/{name}/modeling_{name}.py",
    )
    decisions = {key: Decision(VALUES[key], Method.AST) for key in DECISION_KEYS}
    if name in NEEDS_REVIEW:
        decisions["rope"] = Decision("standard", Method.PROBE, (), Status.NEEDS_REVIEW, "no candidate matched")
    return Profile(identity, decisions)


def run_pipeline(checkout, profile: Profile, progress):
    calls.append(f"run_pipeline {profile.model_type}")
    branch = f"liger-bot/autopatch-{profile.model_type}"
    progress("act: writing the patch")
    while BLOCK_FILE and os.path.exists(BLOCK_FILE):
        time.sleep(0.05)
    git = checkout.git
    git.checkout(branch, create_from="HEAD")
    target = checkout.src / "transformers" / "model" / f"{profile.model_type}.py"
    values = {key: profile.value(key) for key in ("rms_offset", "rope", "mlp_kind")}
    target.write_text(f'"""liger-bot test patch for {profile.model_type}."""\n\nDECISIONS = {values!r}\n')
    git.commit_all(f"Add Liger support for {profile.identity.display_name}")
    progress("verify: running gates")
    gates = [
        GateResult("import", GateStatus.PASS, "imported"),
        GateResult("convergence", GateStatus.SKIP, "needs GPU runner", hard=False),
    ]
    if profile.value("mlp_kind") == "geglu":
        gates.append(GateResult("instance patching", GateStatus.FAIL, "test_apply_liger_kernel_to_instance failed"))
    for gate in gates:
        progress(gate)
    return SimpleNamespace(
        branch=branch,
        gates=gates,
        files=[str(target.relative_to(checkout.root))],
        pr_title=f"Add Liger support for {profile.identity.display_name}",
        pr=pull_request.BodyParts(f"Patch for `{profile.model_type}`.", profile_table(profile.to_json())),
    )
