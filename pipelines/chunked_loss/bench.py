"""GPU benchmark of a generated chunked loss against its unfused reference: time and peak memory of one full
forward + backward, bf16, at a size where the logits matter (hidden 4096, vocab 128256, 8 x 1,024 tokens).

The two sides are the generated test's own `LigerLMHead<Name>` and `TorchLMHead<Name>` (the full-logits reference),
so the benchmark measures exactly what the tests proved equal. `--against module:Class` adds a third side, e.g.
Liger's hand-written class in a leave-one-out run (`test.chunked_loss.test_dpo_loss:LigerLMHeadDPO`). Writes
benchmark.json and benchmark.md into --out.

    python -m pipelines.chunked_loss.bench --repo TARGET --out DIR ipo [--tokens 1024 --sequences 8 --hidden 4096]
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
from pathlib import Path

import torch

from pipelines.chunked_loss.act import pascal


def load(repo: Path, name: str) -> dict:
    for entry in (str(repo), str(repo / "src")):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    test = importlib.import_module(f"test.chunked_loss.test_{name}_loss")
    return {"liger": getattr(test, f"LigerLMHead{pascal(name)}"), "torch": getattr(test, f"TorchLMHead{pascal(name)}")}


def _class(spec: str):
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _inputs(sequences: int, tokens: int, hidden: int, vocab: int, takes_labels: bool):
    x = torch.randn(sequences, tokens, hidden, device="cuda", dtype=torch.bfloat16)
    ref_x = torch.randn(sequences, tokens, hidden, device="cuda", dtype=torch.bfloat16)
    y = torch.randint(0, vocab, (sequences, tokens), device="cuda")
    extras = {"preference_labels": torch.arange(sequences, device="cuda") % 2 == 0} if takes_labels else {}
    return x, ref_x, y, extras


def measure(cls, x, ref_x, y, extras: dict, hidden: int, vocab: int, reps: int) -> dict:
    module = cls(H=hidden, V=vocab, dtype=torch.bfloat16).to("cuda")
    params = inspect.signature(module.forward).parameters
    call_extras = {k: v for k, v in extras.items() if k in params}
    for name in params:  # an extra tensor input of the loss (KTO's kl)
        if name not in ("x", "ref_x", "y") and name not in call_extras and params[name].default is None:
            call_extras[name] = torch.zeros(1, device="cuda", dtype=torch.bfloat16)

    def step():
        inp = x.detach().requires_grad_(True)
        loss = module(inp, ref_x, y, **call_extras)[0]
        loss.backward()

    step()  # warm up (and torch.compile on the liger side)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    module.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    torch.cuda.empty_cache()
    return {"ms": sorted(times)[len(times) // 2], "peak_mb": peak}


def markdown(result: dict) -> str:
    shape = (
        f"{result['sequences']} x {result['tokens']} tokens, hidden {result['hidden']}, vocab {result['vocab']}, bf16"
    )
    rows = [shape, "", "| side | fwd+bwd ms (median) | peak MB above inputs | memory vs unfused |", "|---|---|---|---|"]
    unfused = result["sides"]["torch"]["peak_mb"]
    for side, figures in result["sides"].items():
        saving = 100 * (1 - figures["peak_mb"] / unfused)
        rows.append(f"| {side} | {figures['ms']:.2f} | {figures['peak_mb']:.0f} | {saving:+.1f}% less |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("--repo", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--sequences", type=int, default=8, help="chosen and rejected together (pairs x 2)")
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--against", action="append", default=[], metavar="MODULE:CLASS")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    sides = load(args.repo.resolve(), args.name)
    sides |= {spec.rpartition(":")[2]: _class(spec) for spec in args.against}
    takes_labels = "preference_labels" in inspect.signature(sides["liger"].forward).parameters
    x, ref_x, y, extras = _inputs(args.sequences, args.tokens, args.hidden, args.vocab, takes_labels)
    result = {
        "name": args.name,
        "sequences": args.sequences,
        "tokens": args.tokens,
        "hidden": args.hidden,
        "vocab": args.vocab,
        "device": torch.cuda.get_device_name(),
        "sides": {
            side: measure(cls, x, ref_x, y, extras, args.hidden, args.vocab, args.reps) for side, cls in sides.items()
        },
    }
    (args.out / "benchmark.json").write_text(json.dumps(result, indent=2))
    (args.out / "benchmark.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
