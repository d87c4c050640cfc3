"""GitHub's REST description, cut to our operations: request/response validation and schema-shaped examples.

`example(schema_name)` builds the smallest object that satisfies a component schema (every required field,
in its format), so the stand-in answers in GitHub's full shape and only overlays the fields it keeps state for.
The stand-in validates its own answers too: a shape we got wrong fails the test, not a user later.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from pathlib import Path

from openapi_core import OpenAPI
from openapi_core.contrib.werkzeug import WerkzeugOpenAPIRequest
from openapi_core.contrib.werkzeug import WerkzeugOpenAPIResponse

SPEC_PATH = Path(__file__).with_name("api.github.com.cut.json")
SERVER = "https://api.github.com"  # the spec's server; the stand-in's own host is swapped for it when matching


@functools.cache
def spec_dict() -> dict:
    return json.loads(SPEC_PATH.read_text())


@functools.cache
def openapi() -> OpenAPI:
    return OpenAPI.from_dict(spec_dict())


# Path parameters that GitHub lets span several segments (`git/ref/heads/liger-bot/x`, `contents/a/b.py`);
# openapi-core matches one segment per parameter, so their slashes are escaped before matching.
_MULTI_SEGMENT_PARAMETERS = (re.compile(r"^(/repos/[^/]+/[^/]+/(?:git/ref|contents)/)(.+)$"),)


class GitHubRequest(WerkzeugOpenAPIRequest):
    """A werkzeug request seen as if it had been sent to api.github.com."""

    @property
    def host_url(self) -> str:
        return SERVER

    @property
    def path(self) -> str:
        path = super().path
        for pattern in _MULTI_SEGMENT_PARAMETERS:
            path = pattern.sub(lambda m: m.group(1) + m.group(2).replace("/", "%2F"), path)
        return path


def request_errors(request) -> list[str]:
    return [_describe(error) for error in openapi().iter_request_errors(GitHubRequest(request))]


def response_errors(request, response) -> list[str]:
    errors = openapi().iter_response_errors(GitHubRequest(request), WerkzeugOpenAPIResponse(response))
    return [_describe(error) for error in errors]


def _describe(error: Exception) -> str:
    causes = [str(cause) for cause in getattr(getattr(error, "__cause__", None), "schema_errors", ())]
    if not causes and error.__cause__ is not None:
        causes = [str(error.__cause__)]
    return f"{type(error).__name__}: {error}" + "".join(f"\n    {cause[:400]}" for cause in causes)


def _resolve(schema: dict) -> dict:
    while "$ref" in schema:
        node = spec_dict()
        for part in schema["$ref"][2:].split("/"):
            node = node[part]
        schema = node
    return schema


_STRING_FORMATS = {
    "date-time": "2026-01-01T00:00:00Z",
    "uri": "https://api.github.com/",
    "uri-template": "https://api.github.com/{id}",
    "email": "octocat@example.com",
}


def _synthesize(schema: dict):
    schema = _resolve(schema)
    if schema.get("nullable"):
        return None
    if "allOf" in schema:
        merged: dict = {}
        for part in schema["allOf"]:
            merged.update(_synthesize(part) or {})
        return merged
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return _synthesize(schema[key][0])
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "object")
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: _synthesize(properties.get(name, {"type": "string"})) for name in schema.get("required", ())}
    if kind == "array":
        return []
    if kind == "integer":
        return max(1, schema.get("minimum", 1))
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return False
    return _STRING_FORMATS.get(schema.get("format", ""), "x")


@functools.cache
def _example(name: str):
    return _synthesize({"$ref": f"#/components/schemas/{name}"})


def example(schema: str, /, **overlay):
    """A minimal valid `name` object with `overlay` merged in (nested dicts are merged, not replaced)."""
    return merge(copy.deepcopy(_example(schema)), overlay)


def merge(base, overlay):
    if not isinstance(base, dict) or not isinstance(overlay, dict):
        return copy.deepcopy(overlay)
    for key, value in overlay.items():
        base[key] = (
            merge(base.get(key), value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
        )
    return base
