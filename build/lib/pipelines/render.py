"""Render Jinja templates from `kernel_templates/`: undefined names are errors, never empty strings."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import jinja2

import kernel_templates

TEMPLATE_ROOT = Path(kernel_templates.__file__).parent


@cache
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_ROOT),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)


def template_names() -> list[str]:
    return sorted(str(p.relative_to(TEMPLATE_ROOT)) for p in TEMPLATE_ROOT.rglob("*.j2"))
