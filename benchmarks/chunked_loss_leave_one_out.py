"""Leave-one-out for the chunked-loss pipeline: regenerate DPO, ORPO, CPO, SimPO and KTO from the reference classes
in Liger's own `test/chunked_loss/` files, then run Liger's *own* test file for each against the generated class.

    python -m benchmarks.chunked_loss_leave_one_out [LOSS ...] [--workdir DIR] [--select all|reference] [--eager] [--small]

Each loss is generated under a new name (`--name loo_<loss>`, so Liger's hand-written class stays beside it),
into one checkout, one pipeline run after the other. Then Liger's test file is copied with its three imports of the
hand-written class swapped for the generated one (`import LigerFusedLinearLooDPOLoss as LigerFusedLinearDPOLoss`),
and pytest runs the copy. `--select reference` keeps the tests whose torch side is the reference class the loss was
generated from (DPO's other loss types are other reference classes, generated separately); `--eager` runs with
TORCHDYNAMO_DISABLE=1 (torch.compile of Liger's chunk takes tens of seconds per case on a CPU host; the math is the
same). Writes DIR/results.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from pipelines import target
from pipelines.chunked_loss import act
from pipelines.chunked_loss import pipeline
from pipelines.outcome import PipelineError
from pipelines.subprocesses import run_command

# loss -> (SPEC, settings, Liger's class stem, the -k expression of the tests built on that reference class)
CASES = {
    # Liger's DPO is ten loss types behind one `loss_type` switch, each a reference class of its test file
    "dpo": (
        "test/chunked_loss/test_dpo_loss.py:sigmoid=HFDPOLoss,apo_zero=HFAPOZeroLoss,apo_down=HFAPODownLoss,"
        "sppo_hard=HFSPPPOHARDLoss,nca_pair=HFNCAPAIRLoss,hinge=HFHingeLoss,bco_pair=HFBCOPAIRLoss,"
        "robust=HFRobustLoss,exo_pair=HFEXOPAIRLoss,discopop=HFDiscoPOPLoss",
        (),
        "DPO",
        "",
    ),
    "orpo": ("test/chunked_loss/test_orpo_loss.py:HFORPOLoss", (), "ORPO", ""),
    "cpo": ("test/chunked_loss/test_cpo_loss.py:HFCPOLoss", (), "CPO", "not simpo"),
    # TRL (and HFCPOLoss) call SimPO's margin simpo_gamma; Liger's SimPO module calls it gamma
    "simpo": (
        "test/chunked_loss/test_cpo_loss.py:HFCPOLoss",
        ("loss_type=simpo", "rename.simpo_gamma=gamma"),
        "SimPO",
        "",
    ),
    "kto": ("test/chunked_loss/test_kto_loss.py:HFKTOLoss", (), "KTO", ""),
}


def swapped_test(checkout: Path, loss: str, stem: str) -> Path:
    """Liger's test file for `loss` with the hand-written class's imports pointing at the generated one."""
    generated = act.names(f"loo_{loss}")
    original = checkout / f"test/chunked_loss/test_{loss}_loss.py"
    text = original.read_text()
    swaps = {
        f"from liger_kernel.chunked_loss import LigerFusedLinear{stem}Loss": (
            f"from liger_kernel.chunked_loss import {generated['module_class']} as LigerFusedLinear{stem}Loss"
        ),
        f"from liger_kernel.chunked_loss.{loss}_loss import LigerFusedLinear{stem}Function": (
            f"from liger_kernel.chunked_loss.loo_{loss}_loss import {generated['function_class']} "
            f"as LigerFusedLinear{stem}Function"
        ),
        f"from liger_kernel.chunked_loss.functional import liger_fused_linear_{loss}": (
            f"from liger_kernel.chunked_loss.functional import {generated['functional_name']} "
            f"as liger_fused_linear_{loss}"
        ),
    }
    for old, new in swaps.items():
        if old not in text:
            raise RuntimeError(f"{original}: no line {old!r} to swap")
        text = text.replace(old, new)
    path = checkout / f"test/chunked_loss/test_{loss}_loss_swapped.py"
    path.write_text(text)
    return path


def run_tests(checkout: Path, test: Path, select: str, eager: bool) -> dict:
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(test)]
    argv += ["-k", select] if select else []
    env = {"PYTHONPATH": f"{checkout / 'src'}:{checkout}", "CUDA_VISIBLE_DEVICES": ""}
    if eager:
        env["TORCHDYNAMO_DISABLE"] = "1"
    started = time.time()
    result = run_command(argv, cwd=checkout, env=env, timeout=3600)
    summary = next((line for line in reversed(result.output.splitlines()) if " in " in line and "=" in line), "")
    failures = [line for line in result.output.splitlines() if line.startswith("FAILED")]
    return {
        "command": " ".join(argv[2:]),
        "env": env,
        "ok": result.ok,
        "summary": summary.strip("= "),
        "failures": failures[:20],
        "seconds": round(time.time() - started, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("losses", nargs="*", default=list(CASES))
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/liger-bot-chunked-loo"))
    parser.add_argument("--select", choices=("all", "reference"), default="reference")
    parser.add_argument("--eager", action="store_true", help="TORCHDYNAMO_DISABLE=1 for Liger's tests")
    parser.add_argument("--small", action="store_true", help="leave out Liger's large shape (8, 128, 1024, 4096)")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    checkout = args.workdir / "liger-kernel"
    if not checkout.exists():
        target.fetch(checkout)
    results = {}
    for loss in args.losses:
        spec, settings, stem, select = CASES[loss]
        row: dict = {"spec": spec, "settings": list(settings)}
        try:
            if not (checkout / act.LossFiles.of(f"loo_{loss}").loss).exists():
                run = pipeline.run(
                    spec, checkout, f"loo_{loss}", args.workdir / f"out-{loss}", lambda _: None, settings
                )
                row["gates"] = {g.name: g.status.value for g in run.gates}
            test = swapped_test(checkout, loss, stem)
            selection = select if args.select == "reference" else ""
            if args.small:  # a CPU host's time: the same cases at Liger's small shapes only
                selection = f"({selection}) and not 8-128-1024-4096" if selection else "not 8-128-1024-4096"
            row["liger_test"] = run_tests(checkout, test, selection, args.eager)
            test.unlink()
        except PipelineError as exc:
            row["refused"] = str(exc)
        results[loss] = row
        print(json.dumps({loss: row}, indent=2), flush=True)
    out = args.workdir / "results.json"
    previous = json.loads(out.read_text()) if out.exists() else {}
    out.write_text(json.dumps({**previous, **results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
