"""`path/to/model.py:Factory` -> (model, example inputs). The factory returns `(model, example_inputs_tuple)`."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

from pipelines.outcome import PipelineError

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse(spec: str) -> tuple[Path, str]:
    path, sep, factory = spec.rpartition(":")
    if not sep or not path.endswith(".py") or not _IDENTIFIER.match(factory):
        raise PipelineError(f"{spec!r} is not path/to/model.py:Factory", hint="e.g. examples/model.py:make_model")
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise PipelineError(f"{file} does not exist", hint="give the path of the Python file that defines the factory")
    return file, factory


def load(spec: str):
    file, factory_name = parse(spec)
    module_name = f"liger_fuse_model_{abs(hash(str(file)))}"
    loader = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(loader)
    sys.modules[module_name] = module  # inspect.getsource needs the module registered
    loader.loader.exec_module(module)
    factory = getattr(module, factory_name, None)
    if factory is None:
        raise PipelineError(f"{file} defines no {factory_name}", hint="name a function returning (model, inputs)")
    made = factory()
    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[1], tuple)):
        raise PipelineError(f"{factory_name}() must return (model, example_inputs_tuple)", hint="return model, (x,)")
    return made
