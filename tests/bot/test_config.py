"""Environment configuration (probot's names) and the repo's `.github/liger-bot.yml`."""

from __future__ import annotations

import pytest

from bot.config import DEFAULT_WEBHOOK_PATH
from bot.config import RepoConfig
from bot.config import hide_secrets_from_children
from bot.config import load_config
from bot.config import parse_repo_config
from pipelines.outcome import PipelineError


def test_refuses_to_start_without_a_webhook_secret():
    with pytest.raises(PipelineError, match="WEBHOOK_SECRET is not set"):
        load_config({})


def test_probot_names_and_defaults(tmp_path):
    key = tmp_path / "app.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----\n")
    config = load_config(
        {"WEBHOOK_SECRET": "s", "APP_ID": "42", "PRIVATE_KEY_PATH": str(key), "PORT": "8080", "LOG_LEVEL": "warn"}
    )
    assert (config.webhook_path, config.port, config.log_level, config.app_id) == (
        DEFAULT_WEBHOOK_PATH,
        8080,
        "WARNING",
        "42",
    )
    assert config.private_key.startswith("-----BEGIN") and config.can_authenticate
    inline = load_config(
        {"WEBHOOK_SECRET": "s", "PRIVATE_KEY": "line1\\nline2", "GITHUB_API_URL": "http://127.0.0.1:9/"}
    )
    assert inline.private_key == "line1\nline2" and inline.github_api_url == "http://127.0.0.1:9"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PORT": "http"}, "PORT"),
        ({"WEBHOOK_PATH": "hooks"}, "must start with"),
        ({"LOG_LEVEL": "loud"}, "not a log level"),
    ],
)
def test_bad_environment_is_refused(env, message):
    with pytest.raises(PipelineError, match=message):
        load_config({"WEBHOOK_SECRET": "s", **env})


def test_repo_config_full():
    config = parse_repo_config(
        "autonomous: true\nrunner: {kind: actions, labels: [self-hosted, h100]}\nlimits: {prs_per_hour: 1, open_prs: 3}\n"
        "approvers: ['@lead', 'Other']\n"
    )
    assert config == RepoConfig(True, "actions", ("self-hosted", "h100"), 1, 3, ("lead", "Other"))
    assert config.may_approve("other") and not config.may_approve("someone")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("autonomous: yes please", "autonomous must be true or false"),
        ("limits: {prs_per_hour: -1}", "limits.prs_per_hour"),
        ("runner: {kind: k8s}", "runner.kind"),
        ("[1, 2]", "must be a mapping"),
        ("autonomous: [", "not valid YAML"),
        ("colour: blue", "unknown keys ignored: colour"),
    ],
)
def test_a_bad_repo_config_falls_back_to_defaults_and_says_why(text, problem):
    config = parse_repo_config(text)
    assert config.autonomous is False and config.prs_per_hour == 2
    assert any(problem in p for p in config.problems)


def test_the_worker_hides_the_apps_secrets_from_the_processes_it_starts():
    environ = {
        "PRIVATE_KEY": "-----BEGIN",
        "WEBHOOK_SECRET": "s",
        "DATABASE_URL": "postgresql://u:pw@db/x",
        "PATH": "/bin",
    }
    config = load_config(environ)
    assert hide_secrets_from_children(environ) == ["PRIVATE_KEY", "WEBHOOK_SECRET", "DATABASE_URL"]
    assert environ == {"PATH": "/bin"}
    assert config.private_key == "-----BEGIN" and config.webhook_secret == "s"  # the worker itself keeps them


# --- red team, finding 6: a repo config that raised out of the parser -------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a: " + "[" * 5000 + "]" * 5000, "could not be read (RecursionError)"),  # deeper than the parser recurses
        ("a: " + "[" * 50 + "]" * 50, "nests deeper than"),
        ("limits: {prs_per_hour: " + "9" * 5000 + "}", "could not be read (ValueError)"),  # past int's digit limit
        ("limits: {prs_per_hour: " + "9" * 300 + "}", "from 0 to 1000"),
        ("x: '" + "y" * 70_000 + "'", "larger than 64 KiB"),
        ("1: a\nfoo: b\n", "unknown keys ignored: 1, foo"),  # keys of mixed types could not be sorted
        ("runner: {kind: [local]}", "runner.kind must be local or actions"),
        ("runner: {labels: [" + ", ".join(["gpu"] * 50) + "]}", "at most 20 label names"),
    ],
    ids=["deep", "nested", "5000-digits", "huge-number", "huge-file", "mixed-keys", "kind-list", "many-labels"],
)
def test_a_hostile_repo_config_never_raises_defaults_and_one_problem(text, problem):
    config = parse_repo_config(text)
    assert config.autonomous is False and config.prs_per_hour == 2 and config.runner == "local"
    assert any(problem in p for p in config.problems), config.problems


def test_a_delivery_reads_the_repo_config_once():
    from bot.runtime import Context

    class CountingRuntime:
        reads = 0

        def repo_config(self, repo, installation_id):
            self.reads += 1
            return parse_repo_config("autonomous: true\n")

    runtime = CountingRuntime()
    payload = {"repository": {"owner": {"login": "o"}, "name": "r"}, "installation": {"id": 7}}
    ctx = Context("issue_comment", "created", payload, "d-1", runtime)
    assert ctx.repo_config() is ctx.repo_config() and ctx.repo_config().autonomous
    assert runtime.reads == 1
    assert Context("issue_comment", "created", payload, "d-2", runtime).repo_config() and runtime.reads == 2
