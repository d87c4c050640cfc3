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


def test_loads_and_validates_well_under_a_second():
    """Parsing the file and building openapi-core's validator (imports excluded: they are paid once anyway)."""
    code = (
        "import time, json; from openapi_core import OpenAPI; from tests.github_standin import spec; "
        "t = time.perf_counter(); OpenAPI.from_dict(json.loads(spec.SPEC_PATH.read_text())); "
        "print(time.perf_counter() - t)"
    )
    seconds = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert seconds < 1.0  # about 0.2 s here


def test_nullable_enum_patch_is_visible_and_accepts_null():
    document = spec.spec_dict()
    patched = document["info"]["x-patched-nullable-enums"]
    assert "#/components/schemas/issue/properties/state_reason" in patched
    assert None in document["components"]["schemas"]["issue"]["properties"]["state_reason"]["enum"]
    issue = spec.example("issue", state_reason=None)
    assert json.loads(json.dumps(issue))["state_reason"] is None
