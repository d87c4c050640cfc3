"""`liger-bot demo recsys [--device cpu|cuda] [--steps N] [--json] [--profile DIR | --forms]`: added to `demo` by bot/cli/demo.py."""

from __future__ import annotations

import json
import signal

from pipelines.outcome import ExitStatus


def add_recsys_parser(verbs) -> None:
    recsys = verbs.add_parser("recsys", help="naive partitioned mean pooling: eager vs torch.compile vs our pass")
    recsys.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    recsys.add_argument("--steps", type=int, default=10, help="training steps per variant (default %(default)s)")
    recsys.add_argument("--json", action="store_true", help="print the figures as JSON")
    recsys.add_argument(
        "--compile-limit",
        type=float,
        default=30.0,
        metavar="S",
        help="stop plain torch.compile of the naive loop after S seconds and say so (default %(default)s)",
    )
    recsys.add_argument(
        "--profile",
        metavar="DIR",
        help="instead: profile EmbeddingBag eager / compiled and our pass (torch.profiler), write DIR/profile.md + .json",
    )
    recsys.add_argument(
        "--forms",
        action="store_true",
        help="instead: the encoder written five ways, each with our pass, beside EmbeddingBag / segment_reduce / "
        "index_add (each variant in its own process, alternating rounds; then all of them in one process, "
        "alternating step by step: the figures judged)",
    )
    recsys.add_argument("--rounds", type=int, default=1, help="per-process rounds for --forms (default %(default)s)")
    recsys.add_argument(
        "--form-limit",
        type=float,
        default=90.0,
        metavar="S",
        help="stop one --forms variant after S seconds and say so (default %(default)s)",
    )
    recsys.set_defaults(handler=recsys_command)


def recsys_command(args, ui) -> ExitStatus:
    from pipelines.fuse import demo  # imports torch: not needed for --help

    if args.profile:
        from pathlib import Path

        from pipelines.fuse import demo_profile

        ui.progress(f"profiling the recsys step on {args.device} ({args.steps} steps per variant)")
        report = demo_profile.profile(args.device, max(args.steps, 1), Path(args.profile))
        ui.result(json.dumps(report) if args.json else demo_profile.to_markdown(report))
        return ExitStatus.OK

    if args.forms:
        return forms_command(args, ui)
    ui.progress(f"running the recsys encoder on {args.device} ({args.steps} steps per variant)")
    result = demo.run(args.device, max(args.steps, 2), compile_limit_s=args.compile_limit)
    ui.result(json.dumps(result) if args.json else demo.to_text(result))
    return ExitStatus.OK if result["grads_match"] else ExitStatus.GATE_FAILED


def forms_command(args, ui) -> ExitStatus:
    from pipelines.fuse import demo_forms

    ui.progress(f"the recsys encoder written five ways on {args.device}: {args.rounds} rounds x 9 variants")

    def progress(label, round_index, result):
        if label == "interleaved":
            figure = ", ".join(f"{k} {v:.3f}" for k, v in result.get("step_ms", {}).items()) or result.get("note", "")
            ui.progress(f"all variants in one process, alternating step by step: {result['status']} {figure}")
            return
        figure = f"{result['step_ms']:.3f} ms/step" if result["status"] == "ok" else result.get("note", "")
        replaced = ", ".join(f"{k} x{v}" for k, v in result.get("replaced", {}).items())
        ui.progress(
            f"round {round_index + 1}: {label}: {result['status']} {figure}" + (f" ({replaced})" if replaced else "")
        )

    def stop(_signum, _frame):  # a timeout's SIGTERM: report what finished, as Ctrl-C does
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        report = demo_forms.run(
            args.device, max(args.steps, 2), max(args.rounds, 1), limit_s=args.form_limit, on_result=progress
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
    ui.result(json.dumps(report) if args.json else demo_forms.to_text(report))
    if report["interrupted"]:
        return ExitStatus.INTERRUPTED
    return ExitStatus.OK if report["none_crashed"] and report["grads_match"] else ExitStatus.GATE_FAILED
