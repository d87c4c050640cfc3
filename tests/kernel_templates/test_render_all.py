"""Every template in kernel_templates/ renders with sample contexts and the result parses (Python) or is non-empty.

Sample contexts live in tests/kernel_templates/samples/<folder>.py as `samples() -> [(label, context)]`, built by
the owning pipeline's own context functions; every template folder must have one.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from functools import cache

import pytest

from pipelines import render


@cache
def folder_samples(folder: str) -> list[tuple[str, dict]]:
    return importlib.import_module(f"tests.kernel_templates.samples.{folder}").samples()


@pytest.mark.parametrize("template", render.template_names())
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


def test_every_template_folder_has_samples():
    folders = {name.split("/", 1)[0] for name in render.template_names()}
    assert folders >= {"autopatch", "kernel", "fuse", "chunked_loss"}
    for folder in folders:
        assert importlib.util.find_spec(f"tests.kernel_templates.samples.{folder}"), f"add samples/{folder}.py"
