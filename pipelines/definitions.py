"""The public function or class a `file.py:NAME` spec names (the kernel and chunked-loss specs), read with ast."""

from __future__ import annotations

import ast
import difflib
from pathlib import Path

from pipelines.outcome import PipelineError


def named_definition(path: Path, text: str, qual: str) -> str:
    """`qual` (`f`, `Class`, `Class.method`) when the file defines its first part at top level; the file's one public
    definition when `qual` is empty; else the refusal, with the names it does define."""
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as exc:
        raise PipelineError(f"{path} does not parse: {exc}") from exc
    defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    # a file's one definition is picked among its public ones; a name given explicitly may be private
    # (Liger's test_swiglu.py holds its reference as `_ref_silu_mul`)
    candidates = [name for name in defined if not name.startswith("_")]
    if not qual:
        if len(candidates) != 1:
            raise PipelineError(
                f"{path} defines {len(candidates)} public functions/classes; say which one",
                hint=f"{text}:NAME with NAME one of {', '.join(candidates) or '(none)'}",
            )
        return candidates[0]
    if qual.split(".")[0] not in defined:
        close = difflib.get_close_matches(qual, candidates, n=3)
        raise PipelineError(
            f"{path} defines no function or class {qual!r}",
            hint=f"did you mean {', '.join(close)}?" if close else f"it defines: {', '.join(candidates) or '(none)'}",
        )
    return qual
