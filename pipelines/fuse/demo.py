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

# plain torch.compile of the naive loop unrolls one slice per history: at the CUDA size (1,024 histories) it compiles
# for more than 9 minutes, so it runs in a child stopped at this limit and the demo says it did not finish
PLAIN_COMPILE_LIMIT_S = 30.0  # the demo then ends inside a minute on the H200 (68 s at 45 s, eighth session)


def run(device: str, steps: int, inner: str | None = None, compile_limit_s: float = PLAIN_COMPILE_LIMIT_S) -> dict:
    if device == "cuda" and not torch.cuda.is_available():
        raise PipelineError("no CUDA device here", hint="use --device cpu (small sizes, Triton's interpreter)")
    if device == "cpu" and not pooling.interpreter_active():
        return _run_in_interpreter(steps, inner, compile_limit_s)
    from pipelines.fuse.runtime import compile as fuse_compile

    inner = inner or ("inductor" if device == "cuda" else "aot_eager")
    size = recsys.DemoSize.for_device(device)
    data = recsys.batches(size, steps + 1, device)
    torch.manual_seed(0)
    base = recsys.NaiveEncoder(size).to(device)

    _, eager_ms = recsys.timed_steps(copy.deepcopy(base), data[: min(len(data), 4)], device)
    bag = recsys.EmbeddingBagEncoder(size).to(device)
    bag.load_state_dict(base.state_dict())
    _, embedding_bag_ms = recsys.timed_steps(bag, data, device)
    plain = _plain_compile(device, steps, inner, compile_limit_s)
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
        "embedding_bag_ms": round(embedding_bag_ms, 3),
        "compile_ms": plain.get("compile_ms"),  # None: it did not compile within the limit (compile_note says so)
        "compile_note": plain.get("note", ""),
        "pass_ms": round(pass_ms, 3),
        "pass_first_step_s": round(first_s, 3),
        "pass_graphs_compiled": stats.graphs_compiled,
        "replaced": stats.replaced,
        "replaced_by": stats.replaced_by,  # "pattern -> kernel": which kernel the compiled model runs
        "declined": stats.declined_reasons,
        "loss_max_abs_diff": (loss - eager_loss).abs().item(),
        "grads_match": bool(grads_match),
    }


def plain_compile_ms(device: str, steps: int, inner: str) -> float:
    """Plain torch.compile of the naive encoder, timed as the pass is (the child's work, see _plain_compile)."""
    size = recsys.DemoSize.for_device(device)
    data = recsys.batches(size, steps + 1, device)
    torch.manual_seed(0)
    base = recsys.NaiveEncoder(size).to(device)
    return recsys.timed_steps(torch.compile(base, backend=inner), data, device)[1]


def _plain_compile(device: str, steps: int, inner: str, limit_s: float) -> dict:
    """{"compile_ms": median ms per step} from a child process, or {"note": "did not compile in N s"} when it is still
    compiling at the limit (the child is killed: the demo never waits on it)."""
    command = [sys.executable, "-m", "pipelines.fuse.demo", "--plain", device, "--steps", str(steps), "--inner", inner]
    try:
        child = subprocess.run(
            command,
            cwd=Path(__file__).resolve().parents[2],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            timeout=limit_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"note": f"did not compile in {limit_s:.0f} s (stopped; plain torch.compile unrolls the loop)"}
    if child.returncode != 0:
        return {"note": f"plain torch.compile failed (exit {child.returncode})"}
    return {"compile_ms": round(json.loads(child.stdout)["compile_ms"], 3)}


def _run_in_interpreter(steps: int, inner: str | None, compile_limit_s: float) -> dict:
    """The CPU demo in a child process started with TRITON_INTERPRET=1: this process imported triton for the GPU
    (torch.library.triton_op does when the runtime is imported), and that cannot be undone in place."""
    command = [
        sys.executable, "-m", "pipelines.fuse.demo", "--steps", str(steps), "--compile-limit", str(compile_limit_s)
    ] + (["--inner", inner] if inner else [])  # fmt: skip
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
            f"  nn.EmbeddingBag (eager)   {result['embedding_bag_ms']:10.3f} ms/step",
            f"  torch.compile             {result['compile_ms']:10.3f} ms/step"
            if result["compile_ms"] is not None
            else f"  torch.compile             {result['compile_note']}",
            f"  torch.compile + liger_fuse{result['pass_ms']:10.3f} ms/step "
            f"(first step {result['pass_first_step_s']:.2f} s, {result['pass_graphs_compiled']} graphs compiled)",
            f"  replaced: {replaced}",
            f"  kernels: {', '.join(f'{k} ({v})' for k, v in result.get('replaced_by', {}).items()) or 'none'}",
            f"  left alone: {', '.join(f'{k} ({v})' for k, v in result.get('declined', {}).items()) or 'nothing'}",
            f"  loss max |diff| vs eager: {result['loss_max_abs_diff']:.2e}; gradients match: {result['grads_match']}",
        ]
    )


if __name__ == "__main__":  # the CPU demo's interpreter process (see _run_in_interpreter)
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--inner", default=None)
    parser.add_argument("--compile-limit", type=float, default=PLAIN_COMPILE_LIMIT_S)
    parser.add_argument("--plain", metavar="DEVICE", help="only plain torch.compile's time (the bounded child)")
    args = parser.parse_args()
    if args.plain:
        print(json.dumps({"compile_ms": plain_compile_ms(args.plain, args.steps, args.inner)}))
    else:
        print(json.dumps(run("cpu", args.steps, args.inner, args.compile_limit)))
