"""`liger-bot perf KERNEL --repo DIR [--pass P] [--target-speedup X] [--profile-only]`: make an existing kernel of
the target faster (LinkedIn's liger-kernel-perf: profile -> launch sweep and structural variants -> finalise)."""

from __future__ import annotations

import argparse
import json

from pipelines.outcome import ExitStatus
from pipelines.outcome import gates_table


def register(subparsers) -> None:
    parser = subparsers.add_parser("perf", help="profile and optimise an existing kernel of the target on a GPU")
    parser.add_argument("kernel", help="the stem of src/liger_kernel/ops/KERNEL.py, e.g. fused_add_rms_norm")
    parser.add_argument("--repo", required=True, help="the Liger-Kernel checkout (clean)")
    parser.add_argument("--pass", dest="target_pass", default="backward", choices=("forward", "backward", "full"))
    parser.add_argument(
        "--target-speedup", type=float, default=1.0, help="stop when the target pass is X times torch.compile's speed"
    )
    parser.add_argument(
        "--size", action="append", help="a target size ROWSxHIDDEN beside the benchmark's own (default 4096x16384)"
    )
    parser.add_argument("--max-variants", type=int, default=8, help="variant budget (at most 8)")
    parser.add_argument("--tests-k", help="pytest -k for each variant's tests (the final gate runs the whole file)")
    parser.add_argument("--final-tests-k", help=argparse.SUPPRESS)  # the final gate is the whole file
    parser.add_argument(
        "--test-workers",
        type=int,
        default=0,
        help="pytest-xdist workers for the kernel's unit tests where xdist is installed (default 0: serial)",
    )
    parser.add_argument("--budget-s", type=float, help="start no new variant after this many seconds")
    parser.add_argument("--no-ncu", action="store_true", help="skip Nsight Compute even where ncu is installed")
    parser.add_argument("--no-script", action="store_true", help="skip the benchmark script's own CSV run")
    parser.add_argument(
        "--only-sizes", action="store_true", help="time the --size sizes only, not the benchmark script's own"
    )
    parser.add_argument(
        "--interpret",
        action="store_true",
        help="a CPU dry run of the whole loop under TRITON_INTERPRET=1 (wall-clock times: tests the pipeline, "
        "claims no speed)",
    )
    parser.add_argument(
        "--out",
        help="the workspace: variants, notes, measurements, PR body (default DIR/../<DIR name>.liger-bot/perf-KERNEL)",
    )
    parser.add_argument("--profile-only", action="store_true", help="print what can be read without a GPU")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=perf_command)


def perf_command(args, ui) -> ExitStatus:
    from pipelines.perf import pipeline

    options = pipeline.Options(
        target_pass=args.target_pass,
        target_speedup=args.target_speedup,
        sizes=tuple(args.size or pipeline.DEFAULT_TARGET_SIZES),
        max_variants=args.max_variants,
        tests_k=args.tests_k,
        final_tests_k=args.final_tests_k,
        test_workers=args.test_workers,
        ncu=not args.no_ncu,
        script=not args.no_script,
        benchmark_sizes=not args.only_sizes,
        interpret=args.interpret,
        budget_s=args.budget_s,
    )
    if args.profile_only:
        _, profile = pipeline.understand(args.kernel, args.repo, options, require_clean=False)
        ui.result(json.dumps(profile.to_json(), indent=2) if args.json else profile.to_markdown())
        return ExitStatus.OK
    result = pipeline.run(args.kernel, args.repo, options, args.out, progress=ui.progress)
    if args.json:
        ui.result(json.dumps(result.to_json(), indent=2))
    else:
        where = f"branch {result.branch}" if result.branch else "no branch (nothing kept)"
        ui.result(f"{where}; best {result.best}; {result.stop}; {result.seconds:.0f} s; workspace {result.out_dir}")
        if result.gates:
            ui.result(gates_table(result.gates))
    return ExitStatus.GATE_FAILED if result.failed else ExitStatus.OK
