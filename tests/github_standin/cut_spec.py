"""Cut GitHub's official REST description down to the operations liger-bot calls.

The stand-in (`tests/github_standin/server.py`) validates every request and response against the result,
`tests/github_standin/api.github.com.cut.json`, committed beside this script. Regenerate it with:

    cd /tmp && npm pack @octokit/openapi@23.0.2 && tar xzf octokit-openapi-23.0.2.tgz package/generated/api.github.com.json
    python tests/github_standin/cut_spec.py /tmp/package/generated/api.github.com.json

Adding an operation: add its (method, path) to OPERATIONS and rerun. Everything the operations reference
($ref to schemas, parameters, responses, headers) comes along; `examples` are dropped (size only).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

OUTPUT = Path(__file__).with_name("api.github.com.cut.json")

OPERATIONS = (
    ("post", "/app/installations/{installation_id}/access_tokens"),
    ("get", "/repos/{owner}/{repo}/installation"),
    ("get", "/repos/{owner}/{repo}"),
    ("get", "/repos/{owner}/{repo}/collaborators/{username}/permission"),
    ("post", "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions"),
    ("post", "/repos/{owner}/{repo}/pulls/comments/{comment_id}/reactions"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
    ("post", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
    ("get", "/repos/{owner}/{repo}/issues/comments/{comment_id}"),
    ("patch", "/repos/{owner}/{repo}/issues/comments/{comment_id}"),
    ("get", "/repos/{owner}/{repo}/issues"),
    ("post", "/repos/{owner}/{repo}/issues"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}"),
    ("patch", "/repos/{owner}/{repo}/issues/{issue_number}"),
    ("post", "/repos/{owner}/{repo}/issues/{issue_number}/labels"),
    ("get", "/repos/{owner}/{repo}/contents/{path}"),
    ("put", "/repos/{owner}/{repo}/contents/{path}"),
    ("get", "/repos/{owner}/{repo}/git/ref/{ref}"),
    ("post", "/repos/{owner}/{repo}/git/refs"),
    ("post", "/repos/{owner}/{repo}/git/trees"),
    ("post", "/repos/{owner}/{repo}/git/commits"),
    ("get", "/repos/{owner}/{repo}/pulls"),
    ("post", "/repos/{owner}/{repo}/pulls"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}"),
    ("patch", "/repos/{owner}/{repo}/pulls/{pull_number}"),
    ("get", "/repos/{owner}/{repo}/actions/workflows/{workflow_id}"),
    ("post", "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches"),
    ("get", "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/runs"),
    ("get", "/repos/{owner}/{repo}/actions/runs/{run_id}"),
    ("get", "/repos/{owner}/{repo}/actions/runs/{run_id}/artifacts"),
    ("get", "/repos/{owner}/{repo}/actions/artifacts/{artifact_id}/{archive_format}"),
)


def refs_in(node) -> set[str]:
    """Every `$ref` target under `node`."""
    found: set[str] = set()
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("$ref"), str):
                found.add(item["$ref"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def resolve(spec: dict, ref: str):
    assert ref.startswith("#/"), ref
    node = spec
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def drop_examples(node):
    if isinstance(node, dict):
        return {k: drop_examples(v) for k, v in node.items() if k not in ("examples", "example")}
    if isinstance(node, list):
        return [drop_examples(v) for v in node]
    return node


def cut(spec: dict) -> dict:
    paths: dict = {}
    for method, path in OPERATIONS:
        operation = spec["paths"][path][method]
        paths.setdefault(path, {})[method] = drop_examples(operation)
    components: dict = {}
    pending = refs_in(paths)
    seen: set[str] = set()
    while pending:
        ref = pending.pop()
        if ref in seen:
            continue
        seen.add(ref)
        section, name = ref.removeprefix("#/components/").split("/", 1)
        node = drop_examples(resolve(spec, ref))
        components.setdefault(section, {})[name] = node
        pending |= refs_in(node) - seen
    return {
        "openapi": spec["openapi"],
        "info": {**spec["info"], "x-cut-by": "tests/github_standin/cut_spec.py"},
        "servers": spec["servers"],
        "paths": paths,
        "components": {section: dict(sorted(items.items())) for section, items in sorted(components.items())},
    }


def allow_null_in_nullable_enums(spec: dict) -> list[str]:
    """PATCH (visible on purpose): GitHub marks some enums `nullable: true` without listing `null` among the
    values (a check run's `conclusion`, an issue's `state_reason`, ...). openapi-core follows the letter of
    OpenAPI 3.0 and rejects `null` there, while GitHub sends it. We add `None` to each such enum and record
    every patched location in `info.x-patched-nullable-enums`."""
    patched: list[str] = []

    def walk(node, pointer: str) -> None:
        if isinstance(node, dict):
            if node.get("nullable") is True and isinstance(node.get("enum"), list) and None not in node["enum"]:
                node["enum"].append(None)
                patched.append(pointer)
            for key, value in node.items():
                walk(value, f"{pointer}/{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{pointer}/{index}")

    walk(spec, "#")
    spec["info"]["x-patched-nullable-enums"] = patched
    return patched


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("full_spec", help="generated/api.github.com.json from the npm package @octokit/openapi")
    parser.add_argument("--output", default=str(OUTPUT))
    args = parser.parse_args(argv)
    spec = json.loads(Path(args.full_spec).read_text())
    small = cut(spec)
    patched = allow_null_in_nullable_enums(small)
    Path(args.output).write_text(json.dumps(small, indent=1, sort_keys=False) + "\n")
    size = Path(args.output).stat().st_size
    print(f"{len(OPERATIONS)} operations, {sum(map(len, small['components'].values()))} components, {size} bytes")
    print(f"patched {len(patched)} nullable enums to accept null:")
    for pointer in patched:
        print(f"  {pointer}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
