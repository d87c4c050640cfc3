"""Generate every kernel the GPU run checks into one target checkout (CPU only; the pipeline's act stage).

    python benchmarks/kernel_generate.py .targets/kernel-gpu

Writes the checkout (from the cached liger-kernel 0.8.5 sdist), one commit per kernel, and `kernels.json`
(name, spec, tier) beside it; refused specs are listed with their reason.
"""

import json
import shutil
import sys
from pathlib import Path

from pipelines import target
from pipelines.kernel import act
from pipelines.kernel import spec as spec_mod
from pipelines.kernel import understand
from pipelines.outcome import PipelineError

OPS = "benchmarks/kernel_reference_ops.py"
ROWWISE = [
    ("test/transformers/test_rms_norm.py:LlamaRMSNorm", "rms_norm_llama"),
    ("test/transformers/test_rms_norm.py:GemmaRMSNorm", "rms_norm_gemma"),
    ("test/transformers/test_rms_norm.py:BaseRMSNorm", "rms_norm_none"),
    (f"{OPS}:layer_norm_no_bias", None),
    (f"{OPS}:l2_normalize", None),
    (f"{OPS}:softmax", "softmax_rowwise"),
    (f"{OPS}:mean_abs_norm", None),
]


def specs() -> list[tuple[str, str | None]]:
    return [(name, None) for name in spec_mod.activation_names()] + ROWWISE


def main(dest: str) -> None:
    root = Path(dest)
    shutil.rmtree(root, ignore_errors=True)
    checkout = target.fetch(root)
    made, refused = [], []
    for text, name in specs():
        try:
            sp = spec_mod.resolve(text, checkout.root, name)
            u = understand.understand(sp, checkout.root)
            act.act(checkout, u)
        except PipelineError as exc:
            refused.append({"spec": text, "reason": exc.message})
            print(f"refused {text}: {exc.message[:160]}", flush=True)
            continue
        checkout.git.commit_all(f"liger-bot kernel {text}")
        made.append({"name": sp.name, "spec": text, "tier": u.tier})
        print(f"generated {sp.name} (tier {u.tier}) from {text}", flush=True)
    (root / "kernels.json").write_text(json.dumps({"kernels": made, "refused": refused}, indent=2))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".targets/kernel-gpu")
