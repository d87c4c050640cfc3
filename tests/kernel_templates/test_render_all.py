"""Every template in kernel_templates/ renders with sample contexts and the result parses (Python) or is non-empty.

Sample contexts live in tests/kernel_templates/samples/<folder>.py as `samples() -> [(label, context)]`; a
template folder without one is an expected failure (strict xfail) until its owner adds it.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from functools import cache

import pytest

from pipelines import render


@cache
def folder_samples(folder: str) -> list[tuple[str, dict]] | None:
    try:
        module = importlib.import_module(f"tests.kernel_templates.samples.{folder}")
    except ModuleNotFoundError:
        return None
    return module.samples()


def _cases():
    for name in render.template_names():
        folder = name.split("/", 1)[0]
        has_samples = importlib.util.find_spec(f"tests.kernel_templates.samples.{folder}") is not None
        marks = (
            ()
            if has_samples
            else pytest.mark.xfail(
                reason=f"no sample contexts: add tests/kernel_templates/samples/{folder}.py", strict=True
            )
        )
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("template", list(_cases()))
def test_template_renders_and_parses(template):
    contexts = folder_samples(template.split("/", 1)[0])
    assert contexts, f"no sample contexts for {template}"
    for label, context in contexts:
        text = render.render(template, **context)
        if template.endswith(".py.j2"):
            try:
                ast.parse(text)
            except SyntaxError as exc:
                pytest.fail(f"{template} rendered with the {label} sample does not parse: {exc}\n{text}")
        else:
            assert text.strip(), f"{template} rendered empty with the {label} sample"


def test_templates_exist():
    assert any(name.startswith("autopatch/") for name in render.template_names())
