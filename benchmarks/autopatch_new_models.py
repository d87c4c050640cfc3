"""Autopatch models liger-kernel 0.8.5 does not support, each on its own branch of one fresh checkout (CPU gates).

    python benchmarks/autopatch_new_models.py [MODEL ...] [--workdir DIR]

Prints one line per model (gates, seconds) and leaves the branches in DIR/liger-kernel for
benchmarks/convergence_gpu.sh.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines import target  # noqa: E402
from pipelines.autopatch import verify  # noqa: E402
from pipelines.autopatch.pipeline import run_pipeline  # noqa: E402
from pipelines.autopatch.pipeline import understand_model  # noqa: E402
from pipelines.outcome import PipelineError  # noqa: E402

CANDIDATES = ("hyperclovax", "olmoe", "ministral3", "youtu", "nanochat", "qwen2_moe", "seed_oss", "helium")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(CANDIDATES))
    parser.add_argument("--workdir", type=Path, default=Path(f"out/new-models-{time.strftime('%Y%m%d-%H%M%S')}"))
    args = parser.parse_args()
    checkout = target.fetch(args.workdir / "liger-kernel")
    passed = []
    for model in args.models:
        started = time.monotonic()
        try:
            result = run_pipeline(
                checkout, understand_model(model, checkout), lambda _: None, verify.LocalRunner(False)
            )
        except PipelineError as exc:
            print(f"{model:<14} refused: {exc.message}")
            continue
        except Exception as exc:  # understand or the model's own code crashed: report it, go on with the next
            print(f"{model:<14} error: {type(exc).__name__}: {exc}")
            continue
        gates = " ".join(f"{g.name.split()[0]}={g.status.value}" for g in result.gates if "Convergence" not in g.name)
        print(f"{model:<14} {'OK' if result.ok else 'FAILED':<7} {time.monotonic() - started:5.1f}s  {gates}")
        passed += [model] if result.ok else []
    print(
        f"\n{len(passed)} of {len(args.models)} pass import, instance patching, CPU numerics and checkstyle: {passed}"
    )
    print(f"branches in {checkout.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
