"""SPEC -> the loss to chunk, and the name every generated file derives from.

Three forms:
  1. `path/in/repo.py:Class` inside the target repository: a reference class of Liger's tests, built on
     `test/utils.py:HFAlignmentLoss` (its `alignment_loss` is the loss), e.g. `test/chunked_loss/test_dpo_loss.py:HFDPOLoss`
  2. `file.py[:function]` anywhere: a plain function of the chosen / rejected log-probs, as TRL writes it
  3. `trl:<trainer>:<loss_type>`: a loss type of the installed TRL, read from its source (`trl:dpo:ipo`)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from dataclasses import replace
from pathlib import Path

from pipelines.definitions import named_definition
from pipelines.kernel.spec import validate_name
from pipelines.outcome import PipelineError

_QUALNAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# a reference class's prefix and suffix are not part of the loss's name: HFDPOLoss -> dpo, HFAPOZeroLoss -> apo_zero
_CLASS_AFFIXES = (("HF", "Loss"), ("Torch", "Loss"), ("", "Loss"))


class SpecKind:
    REPO = "reference in the target repository"
    FILE = "file holding a loss function"
    TRL = "TRL loss type"


@dataclass(frozen=True)
class Spec:
    kind: str
    text: str  # the SPEC as given
    name: str  # the loss's snake_case name: <name>_loss.py, Liger<Pascal>Function
    path: Path | None = None  # the file (absolute) for REPO and FILE
    qualname: str = ""  # the class or function in that file; the loss_type for TRL
    trainer: str = ""  # TRL's trainer (`dpo`) for TRL specs
    variants: tuple[tuple[str, str], ...] = ()  # (loss_type, qualname) of a family: one class, a loss_type switch


def resolve(text: str, repo: Path, name: str | None = None) -> Spec:
    text = text.strip()
    if not text:
        raise PipelineError("empty SPEC", hint="liger-bot chunked-loss trl:dpo:ipo --repo DIR")
    if text.startswith("trl:"):
        return _trl(text, name)
    path_part, _, qual = text.partition(":")
    if not path_part.endswith(".py"):
        raise PipelineError(
            f"{text!r} is neither path/to/file.py[:name] nor trl:<trainer>:<loss_type>",
            hint="e.g. test/chunked_loss/test_dpo_loss.py:HFDPOLoss or trl:dpo:ipo",
        )
    variants = _variants(qual)
    if variants:
        qual = variants[0][1]
    if qual and not _QUALNAME.match(qual):
        raise PipelineError(f"{qual!r} is not a Python name", hint="SPEC is path/to/file.py:Class_or_function")
    inside = (repo / path_part).resolve()
    if not Path(path_part).is_absolute() and inside.is_file() and inside.is_relative_to(repo.resolve()):
        return _with_variants(_file_spec(SpecKind.REPO, text, inside, qual, name), variants)
    outside = Path(path_part).expanduser()
    if outside.is_file():
        return _with_variants(_file_spec(SpecKind.FILE, text, outside.resolve(), qual, name), variants)
    raise PipelineError(
        f"{path_part} does not exist (looked in {repo} and the current directory)",
        hint="give a path inside the target repository, or an existing file holding the loss function",
    )


def _trl(text: str, name: str | None) -> Spec:
    parts = text.split(":")
    if len(parts) != 3 or not all(parts[1:]):
        raise PipelineError(f"{text!r} is not trl:<trainer>:<loss_type>", hint="e.g. trl:dpo:ipo")
    _, trainer, loss_type = parts
    if "," in loss_type:  # trl:dpo:sigmoid,hinge,ipo: one class switching on loss_type, as Liger's DPO does
        types = tuple(t.strip() for t in loss_type.split(","))
        variants = tuple((t, t) for t in types)
        return Spec(
            SpecKind.TRL, text, validate_name(name or trainer), qualname=types[0], trainer=trainer, variants=variants
        )
    default = f"{loss_type}" if trainer == "dpo" else f"{trainer}_{loss_type}"
    return Spec(SpecKind.TRL, text, validate_name(name or default), qualname=loss_type, trainer=trainer)


def _variants(qual: str) -> tuple[tuple[str, str], ...]:
    """`sigmoid=HFDPOLoss,hinge=HFHingeLoss` (or `HFDPOLoss,HFHingeLoss`: named after the classes) -> a family."""
    if "," not in qual and "=" not in qual:
        return ()
    found = []
    for item in qual.split(","):
        loss_type, equals, name = item.strip().partition("=")
        name = name if equals else loss_type
        loss_type = loss_type if equals else loss_name(name)
        if not _QUALNAME.match(name) or not _QUALNAME.match(loss_type):
            raise PipelineError(
                f"{item!r} is not loss_type=Name", hint="e.g. file.py:sigmoid=HFDPOLoss,hinge=HFHingeLoss"
            )
        found.append((loss_type, name))
    return tuple(found)


def _with_variants(spec: Spec, variants: tuple[tuple[str, str], ...]) -> Spec:
    if not variants:
        return spec
    for _, name in variants[1:]:
        _file_spec(spec.kind, spec.text, spec.path, name, spec.name)  # each must exist
    return replace(spec, variants=variants)


def loss_name(identifier: str) -> str:
    """`HFDPOLoss` -> `dpo`, `HFAPOZeroLoss` -> `apo_zero`, `ipo_loss` -> `ipo`."""
    from pipelines.kernel.spec import snake

    for prefix, suffix in _CLASS_AFFIXES:
        if identifier.startswith(prefix) and identifier.endswith(suffix) and len(identifier) > len(prefix + suffix):
            identifier = identifier[len(prefix) : len(identifier) - len(suffix)]
            break
    words = snake(identifier).removesuffix("_loss")
    return words


def _file_spec(kind: str, text: str, path: Path, qual: str, name: str | None) -> Spec:
    qual = named_definition(path, text, qual)
    return Spec(kind, text, validate_name(name or loss_name(qual)), path, qual)
