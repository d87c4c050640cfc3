"""act: write a pass (pattern / replacement pair + registration) for one unmatched chain into the target."""

from __future__ import annotations

import re
from pathlib import Path

from pipelines.outcome import PipelineError
from pipelines.render import render

PASS_DIR = Path("src/liger_kernel/fuse_passes")
RUNTIME_DIR = PASS_DIR / "runtime"  # liger_fuse's runtime, copied: the passes and training code import it there
RUNTIME_SOURCE = Path(__file__).with_name("runtime")
RUNTIME_PACKAGE = "liger_kernel.fuse_passes.runtime"
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")


def pass_name(ops: tuple[str, ...]) -> str:
    words = [op.split(":", 1)[1].strip("_").lower() for op in ops]
    name = "_".join(re.sub(r"[^a-z0-9]", "", w) for w in words)
    return validate_name(f"fused_{name}"[:48].rstrip("_"))


def validate_name(name: str) -> str:
    if not _NAME.match(name):
        raise PipelineError(f"{name!r} is not a snake_case pass name", hint="letters, digits and _; at most 48")
    return name


def pattern_source(ops: tuple[str, ...], op_args: list[list[str | None]]) -> tuple[list[str], list[str]]:
    """(parameters, body lines) of `*_pattern` for a linear chain. op_args: per op, the arguments after the
    chained one: None for a tensor (a new parameter), else the literal's source text."""
    params, body, previous = ["x"], [], "x"
    for i, (op, rest) in enumerate(zip(ops, op_args, strict=False)):
        kind, target = op.split(":", 1)
        args = []
        for literal in rest:
            if literal is None:
                params.append(f"e{len(params) - 1}")
                args.append(params[-1])
            else:
                args.append(literal)
        if kind == "call_method":
            call = f"{previous}.{target}({', '.join(args)})"
        else:
            call = _function_call(target, [previous, *args])
        body.append(f"v{i} = {call}")
        previous = f"v{i}"
    body.append(f"return {previous}")
    return params, body


def _function_call(target: str, args: list[str]) -> str:
    module = "operator" if target in ("add", "mul", "sub", "truediv") else "torch"
    if target in ("silu", "gelu", "relu", "softplus"):
        module = "torch.nn.functional"
    return f"{module}.{target}({', '.join(args)})"


def write_pass(root: Path, model_spec: str, ops: tuple[str, ...], op_args: list[list[str | None]]) -> Path:
    name = pass_name(ops)
    params, body = pattern_source(ops, op_args)
    text = render("fuse/fuse_pass.py.j2", name=name, ops=list(ops), params=params, body=body, model_spec=model_spec)
    compile(text, name, "exec")  # a template bug fails here, not in the user's training run
    path = root / PASS_DIR / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    init = path.parent / "__init__.py"
    if not init.exists():
        init.write_text(render("fuse/fuse_passes_init.py.j2"))
    path.write_text(text)
    return path


def write_runtime(root: Path) -> list[Path]:
    """Copy the runtime (relative imports only, torch and triton its only dependencies) into the target, so that
    neither the passes nor the training job that compiles with them needs liger-bot installed."""
    dest = root / RUNTIME_DIR
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for source in sorted(RUNTIME_SOURCE.iterdir()):
        if source.suffix not in (".py", ".json"):
            continue
        text = source.read_text().replace("pipelines.fuse.runtime", RUNTIME_PACKAGE)
        if source.name == "__init__.py":
            text = text.replace(
                '"""liger_fuse runtime:', '"""liger_fuse runtime (copied by liger-bot fuse; do not edit):', 1
            )
        (dest / source.name).write_text(text)
        written.append(dest / source.name)
    return written
