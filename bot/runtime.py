"""What a process of the App holds (config, database, queue, forges), and the probot-style `Context` a handler gets.

A handler never rebuilds owner/repo/number or a client: the context has them, and its `reply` looks up before it
creates, so a redelivered or retried event never posts a second comment.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from functools import cached_property

from bot.config import REPO_CONFIG_PATH
from bot.config import AppConfig
from bot.config import RepoConfig
from bot.config import parse_repo_config
from bot.forge.base import Forge
from bot.forge.base import RepoRef
from bot.jobs import Store
from bot.queue import Queue
from bot.queue import make_queue
from pipelines.outcome import PipelineError

ForgeFactory = Callable[[int | None], Forge]  # installation id -> a forge authenticated as that installation


def marker(kind: str, key: object) -> str:
    """A hidden line that lets the bot find its own comment again instead of posting a second one."""
    return f"<!-- liger-bot:{kind}:{key} -->"


def github_forge_factory(config: AppConfig) -> ForgeFactory:
    """Forges that talk to GitHub (or GITHUB_API_URL) as an installation of the App."""

    app = None

    def forge_for(installation_id: int | None) -> Forge:
        nonlocal app
        from bot.forge import github  # PyGithub loads only in processes that talk to GitHub

        if installation_id is None:
            raise PipelineError("this event names no App installation", hint="replay a payload with `installation.id`")
        if app is None:  # one per process: it caches installation tokens until shortly before they expire
            app = github.GitHubApp(github.AppCredentials(config.app_id, config.private_key, config.github_api_url))
        return app.forge(installation_id)

    return forge_for


@dataclass
class Runtime:
    config: AppConfig
    store: Store
    queue: Queue
    forge_for: ForgeFactory
    workspace: object = None  # bot.gitops.GitWorkspace; only workers need one
    _forges: dict = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: AppConfig, forge_for: ForgeFactory | None = None, immediate: bool = False) -> Runtime:
        store = Store(config.database_url)
        queue = make_queue(config.redis_url, config.queue_path, immediate=immediate)
        return cls(config, store, queue, forge_for or github_forge_factory(config))

    def forge(self, installation_id: int | None) -> Forge:
        # one forge per installation per process: its token is cached inside until shortly before expiry
        if installation_id not in self._forges:
            self._forges[installation_id] = self.forge_for(installation_id)
        return self._forges[installation_id]

    def repo_config(self, repo: RepoRef, installation_id: int | None) -> RepoConfig:
        forge = self.forge(installation_id)
        return parse_repo_config(forge.read_file(repo, REPO_CONFIG_PATH, forge.default_branch(repo)))


@dataclass
class Context:
    event: str
    action: str
    payload: dict
    delivery_id: str
    runtime: Runtime

    @property
    def log(self) -> logging.Logger:
        return logging.getLogger(f"bot.handlers.{self.event}")

    @cached_property
    def repo(self) -> RepoRef:
        repository = self.payload.get("repository") or {}
        return RepoRef(repository["owner"]["login"], repository["name"])

    @property
    def installation_id(self) -> int | None:
        return (self.payload.get("installation") or {}).get("id")

    @property
    def sender(self) -> dict:
        return self.payload.get("sender") or {}

    @property
    def forge(self) -> Forge:
        return self.runtime.forge(self.installation_id)

    @property
    def store(self) -> Store:
        return self.runtime.store

    @property
    def thread(self) -> int:
        """The issue or PR number the event belongs to."""
        for key in ("issue", "pull_request"):
            if key in self.payload:
                return int(self.payload[key]["number"])
        raise KeyError("this event has no issue or pull request")

    def repo_config(self) -> RepoConfig:
        """Read from the default branch once per delivery (probot's context.config): the handlers of one event
        see one file, and a second read costs no second pair of API calls."""
        return self._repo_config

    @cached_property
    def _repo_config(self) -> RepoConfig:
        return self.runtime.repo_config(self.repo, self.installation_id)

    def reply(self, body: str, key: str) -> int:
        """Comment on the thread once per `key` (a redelivery finds the first comment and edits it)."""
        tag = marker("reply", key)
        text = f"{body}\n\n{tag}"
        existing = self.forge.find_comment(self.repo, self.thread, tag)
        if existing is not None:
            self.forge.edit_comment(self.repo, existing, text)
            return existing
        return self.forge.create_comment(self.repo, self.thread, text)
