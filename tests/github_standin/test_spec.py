"""The committed cut of GitHub's REST description: small, fast to load, and patched only where it says so."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.github_standin import cut_spec
from tests.github_standin import spec


def test_cut_spec_holds_exactly_our_operations():
    document = spec.spec_dict()
    served = {(method, path) for path, item in document["paths"].items() for method in item}
    assert served == set(cut_spec.OPERATIONS)
    assert document["info"]["version"] == "23.0.2"


def test_the_cut_spec_is_small_and_builds_a_validator():
    """The cut keeps the stand-in's spec small (the full description is ~10 MB); its load time, ~0.2 s, is a speed
    figure for a benchmark, not a timed test: on a loaded 2-core host it swung past 2 s."""
    document = json.loads(spec.SPEC_PATH.read_text())
    assert len(document["paths"]) <= 40 and spec.SPEC_PATH.stat().st_size < 1_000_000
    code = "import json; from openapi_core import OpenAPI; from tests.github_standin import spec; "
    code += "print(len(OpenAPI.from_dict(json.loads(spec.SPEC_PATH.read_text())).spec / 'paths'))"
    built = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert int(built) == len(document["paths"])


def test_nullable_enum_patch_is_visible_and_accepts_null():
    document = spec.spec_dict()
    patched = document["info"]["x-patched-nullable-enums"]
    assert "#/components/schemas/issue/properties/state_reason" in patched
    assert None in document["components"]["schemas"]["issue"]["properties"]["state_reason"]["enum"]
    issue = spec.example("issue", state_reason=None)
    assert json.loads(json.dumps(issue))["state_reason"] is None
