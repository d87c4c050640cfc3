"""SPEC -> the PyTorch op to turn into a kernel, and the names every generated file derives from.

Three forms, tried in this order:
  1. a transformers activation name (a key of `transformers.activations.ACT2FN`): `relu2`, `gelu_pytorch_tanh`
  2. `path/to/file.py:function_or_Module` inside the target repository (`test/transformers/test_rms_norm.py:LlamaRMSNorm`)
  3. a file holding a PyTorch function, anywhere (`op.py` or `op.py:name`; the App writes a comment's code block there)
"""

from __future__ import annotations

import difflib
import keyword
import re
from dataclasses import dataclass
from pathlib import Path

from pipelines.definitions import named_definition
from pipelines.outcome import PipelineError

_SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
_QUALNAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# words Liger spells in capitals (LigerReLUSquared, LigerRMSNorm, LigerSiLUMul, LigerGELUMul, LigerDyT)
ACRONYMS = {"relu": "ReLU", "gelu": "GELU", "silu": "SiLU", "rms": "RMS", "glu": "GLU", "mlp": "MLP", "dyt": "DyT"}
ACRONYMS |= {"prelu": "PReLU", "xielu": "XIELU", "l2": "L2", "tvd": "TVD", "jsd": "JSD", "kl": "KL"}


class SpecKind:
    ACTIVATION = "transformers activation"
    REPO = "file in the target repository"
    FILE = "file holding a PyTorch function"


@dataclass(frozen=True)
class Spec:
    kind: str
    text: str  # the SPEC as given
    name: str  # the kernel's snake_case name
    path: Path | None = None  # the file (absolute) for REPO and FILE
    qualname: str = ""  # the function or nn.Module class in that file; the ACT2FN key for ACTIVATION
    module_path: str = ""  # importable dotted path for REPO specs (test.transformers.test_rms_norm)


def validate_name(name: str) -> str:
    """A kernel name becomes file names and identifiers: snake_case only."""
    if not _SNAKE.match(name) or len(name) > 48 or keyword.iskeyword(name):
        raise PipelineError(
            f"{name!r} is not a valid kernel name", hint="use snake_case letters and digits, e.g. --name relu_squared"
        )
    return name


def pascal(name: str) -> str:
    """`relu2` -> `ReLU2`, `gemma_rms_norm` -> `GemmaRMSNorm`: the Liger{Pascal}Function spelling."""
    parts = []
    for word in name.split("_"):
        letters = re.match(r"[a-z]*", word).group(0)
        parts.append(ACRONYMS[letters] + word[len(letters) :] if letters in ACRONYMS else word.capitalize())
    return "".join(parts)


def snake(identifier: str) -> str:
    """`GemmaRMSNorm` -> `gemma_rms_norm`, `l2_normalize` stays."""
    words = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", identifier)
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", words)
    return re.sub(r"_+", "_", words).strip("_").lower()


def activation_names() -> list[str]:
    from transformers.activations import ACT2CLS

    return sorted(ACT2CLS)


def resolve(text: str, repo: Path, name: str | None = None) -> Spec:
    text = text.strip()
    if not text:
        raise PipelineError("empty SPEC", hint="liger-bot kernel relu2 --repo DIR")
    path_part, _, qual = text.partition(":")
    if not path_part.endswith(".py"):
        return _activation(text, name)
    if qual and not all(_QUALNAME.match(p) for p in qual.split(".")):
        raise PipelineError(f"{qual!r} is not a Python name", hint="SPEC is path/to/file.py:function_or_Module")
    inside = (repo / path_part).resolve()
    if not Path(path_part).is_absolute() and inside.is_file() and inside.is_relative_to(repo.resolve()):
        return _file_spec(SpecKind.REPO, text, inside, qual, name, repo.resolve())
    outside = Path(path_part).expanduser()
    if outside.is_file():
        return _file_spec(SpecKind.FILE, text, outside.resolve(), qual, name, None)
    raise PipelineError(
        f"{path_part} does not exist (looked in {repo} and the current directory)",
        hint="give a path inside the target repository, or an existing file holding the function",
    )


def _activation(text: str, name: str | None) -> Spec:
    known = activation_names()
    if text not in known:
        close = difflib.get_close_matches(text, known, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else f"known activations: {', '.join(known)}"
        raise PipelineError(f"{text!r} is not a transformers activation (ACT2FN) nor a path to a .py file", hint=hint)
    return Spec(SpecKind.ACTIVATION, text, validate_name(name or text), qualname=text)


def _file_spec(kind: str, text: str, path: Path, qual: str, name: str | None, repo: Path | None) -> Spec:
    qual = named_definition(path, text, qual)
    module_path = ""
    if repo is not None:
        rel = path.relative_to(repo)
        parts = rel.with_suffix("").parts
        module_path = ".".join(parts[1:] if parts[0] == "src" else parts)
    return Spec(kind, text, validate_name(name or snake(qual.split(".")[-1])), path, qual, module_path)
