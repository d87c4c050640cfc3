"""`liger-bot demo recsys`: the naive encoder in eager, plain torch.compile, and torch.compile with our pass."""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from pipelines.fuse import recsys
from pipelines.fuse.runtime import pooling
from pipelines.outcome import PipelineError


def run(device: str, steps: int, inner: str | None = None) -> dict:
    if device == "cuda" and not torch.cuda.is_available():
        raise PipelineError("no CUDA device here", hint="use --device cpu (small sizes, Triton's interpreter)")
    if device == "cpu" and not pooling.interpreter_active():
        return _run_in_interpreter(steps, inner)
    from pipelines.fuse.runtime import compile as fuse_compile

    inner = inner or ("inductor" if device == "cuda" else "aot_eager")
    size = recsys.DemoSize.for_device(device)
    data = recsys.batches(size, steps + 1, device)
    torch.manual_seed(0)
    base = recsys.NaiveEncoder(size).to(device)

    _, eager_ms = recsys.timed_steps(copy.deepcopy(base), data[: min(len(data), 4)], device)
    torch._dynamo.reset()
    plain = torch.compile(copy.deepcopy(base), backend=inner)
    _, compile_ms = recsys.timed_steps(plain, data, device)
    torch._dynamo.reset()
    fused = fuse_compile(copy.deepcopy(base), inner=inner)
    first_s, pass_ms = recsys.timed_steps(fused, data, device)
    stats = fused.liger_fuse_stats

    torch._dynamo.reset()
    checked = fuse_compile(copy.deepcopy(base), inner=inner)
    loss, grads = recsys.first_step_grads(checked, data[0])
    eager_loss, eager_grads = recsys.first_step_grads(copy.deepcopy(base), data[0])
    grads_match = all(torch.allclose(grads[k], eager_grads[k], rtol=1e-4, atol=1e-5) for k in eager_grads)
    return {
        "device": device,
        "compiler": inner,
        "steps": steps,
        "eager_ms": round(eager_ms, 3),
        "compile_ms": round(compile_ms, 3),
        "pass_ms": round(pass_ms, 3),
        "pass_first_step_s": round(first_s, 3),
        "pass_graphs_compiled": stats.graphs_compiled,
        "replaced": stats.replaced,
        "loss_max_abs_diff": (loss - eager_loss).abs().item(),
        "grads_match": bool(grads_match),
    }


def _run_in_interpreter(steps: int, inner: str | None) -> dict:
    """The CPU demo in a child process started with TRITON_INTERPRET=1: this process imported triton for the GPU
    (torch.library.triton_op does when the runtime is imported), and that cannot be undone in place."""
    command = [sys.executable, "-m", "pipelines.fuse.demo", "--steps", str(steps)] + (
        ["--inner", inner] if inner else []
    )
    child = subprocess.run(
        command,
        env={**os.environ, "TRITON_INTERPRET": "1"},
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if child.returncode != 0:
        raise PipelineError(f"the CPU demo failed in its interpreter process (exit {child.returncode}); see above")
    return json.loads(child.stdout)


def to_text(result: dict) -> str:
    replaced = ", ".join(f"{k} -> {v}" for k, v in result["replaced"].items()) or "nothing"
    return "\n".join(
        [
            f"recsys encoder on {result['device']} ({result['steps']} steps, lengths change every batch)",
            f"  eager (naive loop)        {result['eager_ms']:10.3f} ms/step",
            f"  torch.compile             {result['compile_ms']:10.3f} ms/step",
            f"  torch.compile + liger_fuse{result['pass_ms']:10.3f} ms/step "
            f"(first step {result['pass_first_step_s']:.2f} s, {result['pass_graphs_compiled']} graphs compiled)",
            f"  replaced: {replaced}",
            f"  loss max |diff| vs eager: {result['loss_max_abs_diff']:.2e}; gradients match: {result['grads_match']}",
        ]
    )


if __name__ == "__main__":  # the CPU demo's interpreter process (see _run_in_interpreter)
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--inner", default=None)
    args = parser.parse_args()
    print(json.dumps(run("cpu", args.steps, args.inner)))
