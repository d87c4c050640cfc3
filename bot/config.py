"""Configuration: the App's environment (probot's names where they exist) and a repo's `.github/liger-bot.yml`.

The repo file is read from the default branch only (never a PR branch), so a pull request cannot change who
may approve or switch the repo to autonomous.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

import yaml

from bot.forge import redact
from pipelines.llm.settings import LlmSettings
from pipelines.llm.settings import parse_llm
from pipelines.outcome import PipelineError

DEFAULT_WEBHOOK_PATH = "/api/github/webhooks"
DEFAULT_API_URL = "https://api.github.com"
MAX_PAYLOAD_BYTES = 25 * 1024 * 1024  # GitHub caps webhook payloads at 25 MB
REPO_CONFIG_PATH = ".github/liger-bot.yml"


@dataclass(frozen=True)
class AppConfig:
    webhook_secret: str
    app_id: str = ""
    private_key: str = ""
    webhook_path: str = DEFAULT_WEBHOOK_PATH
    host: str = "0.0.0.0"
    port: int = 3000
    log_level: str = "INFO"
    database_url: str = "sqlite:///liger-bot.db"
    redis_url: str = ""  # set: the queue runs on Redis (several hosts); empty: SQLite beside the database
    queue_path: str = "liger-bot-queue.db"
    github_api_url: str = DEFAULT_API_URL
    work_dir: str = "liger-bot-work"  # target checkouts of running jobs
    max_payload_bytes: int = MAX_PAYLOAD_BYTES
    lease_seconds: float = 120.0  # a running job whose worker stopped heartbeating for this long is recovered
    max_resumes: int = 2  # resumes after a worker died mid-stage; then the job fails with a message
    server_threads: int = 16  # `serve`: requests handled at once (and so at most the deliveries one commit stores)
    connection_limit: int = 1000  # `serve`: open connections at most
    read_timeout: float = 10.0  # `serve`: seconds a client has to send one whole request
    # the optional anthropic provider: on for a repo only when its .github/liger-bot.yml names it too
    anthropic_api_key: str = field(default="", repr=False)
    anthropic_base_url: str = ""  # "": the SDK's default (api.anthropic.com)

    @property
    def can_authenticate(self) -> bool:
        return bool(self.app_id and self.private_key)

    @property
    def server_limits(self):
        from bot.server import ServerLimits

        return ServerLimits(
            threads=self.server_threads,
            connection_limit=self.connection_limit,
            max_body=self.max_payload_bytes,
            read_timeout=self.read_timeout,
        )


def _from_file(env: Mapping[str, str], name: str, hint: str) -> str:
    """The secret in the file `{name}_PATH` names, or "" where it names none."""
    path = env.get(f"{name}_PATH")
    if not path:
        return ""
    try:
        return Path(path).expanduser().read_text()
    except OSError as exc:
        raise PipelineError(f"{name}_PATH {path}: {exc.strerror}", hint=hint) from None


def _private_key(env: Mapping[str, str]) -> str:
    if env.get("PRIVATE_KEY"):
        # probot accepts the key with literal "\n" (how most secret stores keep one line)
        return env["PRIVATE_KEY"].replace("\\n", "\n")
    return _from_file(env, "PRIVATE_KEY", "point it at the App's .pem file (mode 0400)")


def _webhook_secret(env: Mapping[str, str]) -> str:
    return env.get("WEBHOOK_SECRET") or _from_file(env, "WEBHOOK_SECRET", "a file holding only the secret").strip()


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise PipelineError(f"{name}={raw!r} is not a whole number") from None


def load_config(env: Mapping[str, str] = os.environ, require_secret: bool = True) -> AppConfig:
    """The App's configuration from the environment. Without WEBHOOK_SECRET the server refuses to start."""
    secret = _webhook_secret(env)
    if require_secret and not secret:
        raise PipelineError(
            "WEBHOOK_SECRET is not set: the App refuses to accept unsigned webhooks",
            hint="set WEBHOOK_SECRET_PATH (or WEBHOOK_SECRET) to the secret of the GitHub App's webhook",
        )
    path = env.get("WEBHOOK_PATH") or DEFAULT_WEBHOOK_PATH
    if not path.startswith("/"):
        raise PipelineError(f"WEBHOOK_PATH={path!r} must start with '/'")
    level = (env.get("LOG_LEVEL") or "info").upper()
    if level not in ("TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL", "CRITICAL"):
        raise PipelineError(f"LOG_LEVEL={level!r} is not a log level", hint="one of debug, info, warn, error")
    private_key = _private_key(env)
    anthropic_key = env.get("ANTHROPIC_API_KEY", "")
    for held in (secret, private_key, anthropic_key):  # whatever leaves a process of the App is redacted of these
        redact.remember(held)
    return AppConfig(
        webhook_secret=secret,
        app_id=env.get("APP_ID", ""),
        private_key=private_key,
        webhook_path=path,
        host=env.get("HOST") or "0.0.0.0",
        port=_int(env, "PORT", 3000),
        log_level={"TRACE": "DEBUG", "WARN": "WARNING", "FATAL": "CRITICAL"}.get(level, level),
        database_url=env.get("DATABASE_URL") or "sqlite:///liger-bot.db",
        redis_url=env.get("REDIS_URL", ""),
        queue_path=env.get("QUEUE_PATH") or "liger-bot-queue.db",
        github_api_url=(env.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/"),
        work_dir=env.get("WORK_DIR") or "liger-bot-work",
        lease_seconds=float(_int(env, "JOB_LEASE_SECONDS", 120)),
        server_threads=max(1, _int(env, "SERVER_THREADS", 16)),
        connection_limit=max(1, _int(env, "CONNECTION_LIMIT", 1000)),
        read_timeout=float(max(1, _int(env, "READ_TIMEOUT_SECONDS", 10))),
        anthropic_api_key=anthropic_key,
        anthropic_base_url=env.get("ANTHROPIC_BASE_URL", ""),
    )


# What the worker must not hand to the processes it starts: verify gates run the target repository's code.
SECRET_VARIABLES = ("PRIVATE_KEY", "WEBHOOK_SECRET", "DATABASE_URL", "REDIS_URL", "ANTHROPIC_API_KEY")


def hide_secrets_from_children(environ) -> list[str]:
    """Drop the App's secrets from `environ` (os.environ in the worker) once the config holds them; returns their
    names. Subprocesses inherit the environment, and a test suite of the target can print it. This does not change
    /proc/<pid>/environ (the environment the process started with): pass secrets by file (PRIVATE_KEY_PATH,
    WEBHOOK_SECRET_PATH), and run stage children as another user (bot.isolation) so they cannot read /proc."""
    hidden = [name for name in SECRET_VARIABLES if name in environ]
    for name in hidden:
        del environ[name]
    return hidden


def configure_logging(config: AppConfig) -> None:
    logging.basicConfig(level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    redact.install_handler_filters()  # every line the App logs, from any library, without secrets
    # one access-log line per delivery only when debugging (probot logs requests at debug too)
    logging.getLogger("werkzeug").setLevel("DEBUG" if config.log_level == "DEBUG" else "WARNING")
    logging.getLogger("waitress.queue").setLevel("ERROR")  # "task queue depth" warnings under a burst are expected


# --- the repo's .github/liger-bot.yml ---------------------------------------------------------------------


@dataclass(frozen=True)
class RepoConfig:
    autonomous: bool = False  # False: the checkpoint after understand waits for `/liger approve`
    runner: str = "local"  # local | actions
    runner_labels: tuple[str, ...] = ("self-hosted", "gpu")
    prs_per_hour: int = 2
    max_open_prs: int = 5
    approvers: tuple[str, ...] = ()  # empty: anyone with write permission may approve
    llm: LlmSettings = field(default_factory=LlmSettings)  # the optional provider (off unless named here)
    problems: tuple[str, ...] = field(default=(), compare=False)  # what was wrong in the file (defaults used)

    def may_approve(self, login: str) -> bool:
        return not self.approvers or login.lower() in {a.lower() for a in self.approvers}


def _labels(value, problems: list[str]) -> tuple[str, ...] | None:
    if isinstance(value, str):
        value = [value]
    if (
        not isinstance(value, list)
        or len(value) > MAX_LABELS
        or not all(isinstance(v, str) and v.strip() and len(v) <= MAX_NAME for v in value)
    ):
        problems.append(f"runner.labels must be a list of at most {MAX_LABELS} label names")
        return None
    return tuple(v.strip() for v in value)


MAX_REPO_CONFIG_BYTES = 64 * 1024
MAX_REPO_CONFIG_DEPTH = 8  # the file's shape is two levels deep; anything deeper is not a config
MAX_LIMIT = 1000  # prs_per_hour, open_prs: more than this is a typo, not a policy
MAX_LABELS, MAX_APPROVERS, MAX_NAME = 20, 100, 100


def _positive_int(value, name: str, problems: list[str]) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LIMIT:
        problems.append(f"{name} must be a whole number from 0 to {MAX_LIMIT}")
        return None
    return value


def _depth(value, limit: int) -> int:
    """How deep `value` nests, counted no further than `limit + 1` (no recursion: a deep file cannot crash it)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        todo.extend((child, depth + 1) for child in children)
    return deepest


def _load(text: str) -> tuple[object, str | None]:
    """The parsed file, or why there is none. Never raises: the file is the target repository's to write."""
    if len(text.encode("utf-8", "replace")) > MAX_REPO_CONFIG_BYTES:
        return None, f"{REPO_CONFIG_PATH} is larger than {MAX_REPO_CONFIG_BYTES // 1024} KiB"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return None, f"{REPO_CONFIG_PATH} is not valid YAML ({exc.__class__.__name__})"
    except (RecursionError, ValueError, TypeError, OverflowError, MemoryError) as exc:
        # nesting deeper than the parser recurses, a number past int's digit limit, an unhashable key
        return None, f"{REPO_CONFIG_PATH} could not be read ({exc.__class__.__name__})"
    if _depth(data, MAX_REPO_CONFIG_DEPTH) > MAX_REPO_CONFIG_DEPTH:
        return None, f"{REPO_CONFIG_PATH} nests deeper than {MAX_REPO_CONFIG_DEPTH} levels"
    return data, None


def parse_repo_config(text: str | None) -> RepoConfig:
    """`.github/liger-bot.yml` -> RepoConfig. A bad file never stops the bot: defaults, with the problems listed."""
    try:
        return _parse_repo_config(text)
    except Exception as exc:  # a shape no check foresaw: still defaults and a problem, never a failed job
        return RepoConfig(problems=(f"{REPO_CONFIG_PATH} could not be read ({exc.__class__.__name__})",))


def _parse_repo_config(text: str | None) -> RepoConfig:
    if not text:
        return RepoConfig()
    data, problem = _load(text)
    if problem:
        return RepoConfig(problems=(problem,))
    if data is None:
        return RepoConfig()
    if not isinstance(data, dict):
        return RepoConfig(problems=(f"{REPO_CONFIG_PATH} must be a mapping",))
    problems: list[str] = []
    values: dict = {}
    if "autonomous" in data:
        if isinstance(data["autonomous"], bool):
            values["autonomous"] = data["autonomous"]
        else:
            problems.append("autonomous must be true or false")
    runner = data.get("runner") or {}
    if isinstance(runner, dict):
        if isinstance(runner.get("kind", "local"), str) and runner.get("kind", "local") in ("local", "actions"):
            values["runner"] = runner.get("kind", "local")
        else:
            problems.append("runner.kind must be local or actions")
        if "labels" in runner and (labels := _labels(runner["labels"], problems)):
            values["runner_labels"] = labels
    else:
        problems.append("runner must be a mapping (kind, labels)")
    limits = data.get("limits") or {}
    if isinstance(limits, dict):
        for key, attr in (("prs_per_hour", "prs_per_hour"), ("open_prs", "max_open_prs")):
            if key in limits and (number := _positive_int(limits[key], f"limits.{key}", problems)) is not None:
                values[attr] = number
    else:
        problems.append("limits must be a mapping (prs_per_hour, open_prs)")
    approvers = data.get("approvers")
    if approvers is not None:
        if (
            isinstance(approvers, list)
            and len(approvers) <= MAX_APPROVERS
            and all(isinstance(a, str) and len(a) <= MAX_NAME for a in approvers)
        ):
            values["approvers"] = tuple(a.lstrip("@") for a in approvers)
        else:
            problems.append("approvers must be a list of GitHub logins")
    if "llm" in data:
        values["llm"] = parse_llm(data["llm"], problems)
    known = ("autonomous", "runner", "limits", "approvers", "llm")
    unknown = sorted(str(key)[:40] for key in data if key not in known)
    if unknown:
        shown = ", ".join(unknown[:10]) + (f" and {len(unknown) - 10} more" if len(unknown) > 10 else "")
        problems.append(f"unknown keys ignored: {shown}")
    return RepoConfig(**values, problems=tuple(problems))
