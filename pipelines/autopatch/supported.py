"""The target's registry of supported models (`MODEL_TYPE_TO_APPLY_LIGER_FN` in its monkey-patch module), read from
source with ast, never imported: the one reader the CLI, the scan, the pipeline's refusal and removal share."""

from __future__ import annotations

import ast
from pathlib import Path

from pipelines.outcome import PipelineError

REGISTRY_NAME = "MODEL_TYPE_TO_APPLY_LIGER_FN"


def registry_dict(source: str, where: str = "the monkey-patch module") -> ast.Dict:
    """The registry's dict literal (a plain or annotated assignment at the top level)."""
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(getattr(t, "id", None) == REGISTRY_NAME for t in targets) and isinstance(node.value, ast.Dict):
            return node.value
    raise PipelineError(f"{where} has no {REGISTRY_NAME} dict", hint="is this a Liger-Kernel checkout?")


def apply_functions(source: str, where: str = "the monkey-patch module") -> dict[str, str]:
    """model_type -> the apply_liger_kernel_to_* function its entry names."""
    node = registry_dict(source, where)
    return {
        k.value: v.id
        for k, v in zip(node.keys, node.values, strict=True)
        if isinstance(k, ast.Constant) and isinstance(k.value, str) and isinstance(v, ast.Name)
    }


def supported_models(monkey_patch: Path) -> dict[str, str]:
    return apply_functions(monkey_patch.read_text(), str(monkey_patch))
