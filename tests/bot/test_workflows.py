"""The workflow templates we ship: schema-valid, actionlint-clean, and no expression ever inside a `run:`."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

WORKFLOWS = Path(__file__).resolve().parents[2] / ".github" / "workflows"
TEMPLATES = sorted(WORKFLOWS.glob("liger-bot-*.yml"))
BIN = Path(sys.executable).parent
UNTRUSTED = re.compile(r"\$\{\{[^}]*\b(inputs|github\.event|github\.head_ref)\b")


def tool(name: str) -> str:
    found = BIN / name if (BIN / name).exists() else shutil.which(name)
    assert found, f"{name} is a dev dependency (pip install -e '.[dev]')"
    return str(found)


def test_both_templates_are_shipped():
    assert [p.name for p in TEMPLATES] == ["liger-bot-scan.yml", "liger-bot-verify.yml"]


def test_templates_match_the_github_workflow_schema():
    proc = subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *map(str, TEMPLATES)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_templates_pass_actionlint():
    proc = subprocess.run([tool("actionlint"), "-no-color", *map(str, TEMPLATES)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_would_catch_an_injection(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on:\n  workflow_dispatch:\n    inputs:\n      x:\n        type: string\n"
        "jobs:\n  j:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ github.event.issue.title }}\n"
    )
    proc = subprocess.run([tool("actionlint"), "-no-color", str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0 and "untrusted" in proc.stdout


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_no_untrusted_expression_inside_run(template):
    workflow = yaml.safe_load(template.read_text())
    for job in workflow["jobs"].values():
        for step in job.get("steps", []):
            assert not UNTRUSTED.search(step.get("run", "")), f"{step.get('name')}: pass it through env:"
    for line in template.read_text().splitlines():
        if line.strip().startswith("run:"):
            assert "${{" not in line


def test_verify_workflow_runs_only_the_bots_branch_with_read_only_token():
    workflow = yaml.safe_load((WORKFLOWS / "liger-bot-verify.yml").read_text())
    on = workflow[True]  # YAML 1.1 reads `on` as true
    assert list(on) == ["workflow_dispatch"]  # never pull_request(_target): no fork code on GPU runners
    assert workflow["permissions"] == {"contents": "read"}
    steps = workflow["jobs"]["verify"]["steps"]
    guard = steps[0]
    assert "refs/heads/liger-bot/*" in guard["run"] and "exit 1" in guard["run"]
    checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout"))
    assert checkout["with"]["ref"] == "${{ github.ref }}" and "repository" not in checkout["with"]
    assert checkout["with"]["persist-credentials"] is False
    assert "self-hosted" in on["workflow_dispatch"]["inputs"]["runner_labels"]["default"]
    upload = steps[-1]
    assert upload["with"]["name"] == "liger-bot-report" and upload["with"]["path"] == "liger-bot-out/"


def test_scan_workflow_is_a_cron_that_runs_no_repository_code():
    workflow = yaml.safe_load((WORKFLOWS / "liger-bot-scan.yml").read_text())
    assert workflow[True]["schedule"][0]["cron"]
    assert workflow["permissions"] == {}
    assert not any("uses" in step for step in workflow["jobs"]["tick"]["steps"])


def test_app_manifest_asks_for_least_permissions():
    manifest = yaml.safe_load((WORKFLOWS.parents[1] / "bot" / "app.yml").read_text())
    assert manifest["default_permissions"] == {
        "metadata": "read",
        "issues": "write",
        "pull_requests": "write",
        "contents": "write",
        "actions": "write",
    }
    assert "workflows" not in manifest["default_permissions"]  # the bot never edits .github/workflows
    assert set(manifest["default_events"]) == {
        "issue_comment",
        "pull_request_review_comment",
        "pull_request_review",
        "issues",
        "workflow_run",
    }
