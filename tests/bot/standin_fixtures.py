"""Fixtures for tests that talk to GitHub: a stand-in API, a smart-HTTP git remote, a PyGithub-backed forge.

Import them into a conftest with `from tests.bot.standin_fixtures import *  # noqa: F401,F403`.

- `app_key_pair`: (private PEM, public PEM) of a fresh RSA key, once per session.
- `github_standin`: the stand-in on 127.0.0.1 with one seeded repository `STANDIN_REPO` (a bare repo
  served by `git_remote`, holding our workflow templates), the App's public key, and `STANDIN_MAINTAINER`
  as a write collaborator. Fails the test if any request or answer broke GitHub's REST description.
- `git_remote`: the smart-HTTP git server; it accepts `x-access-token` + any unexpired installation token.
- `github_app` / `github_forge`: PyGithub clients pointed at the stand-in, no pacing, PyGithub's retry off,
  and a RetryPolicy whose sleeps are recorded in `github_app.retry_sleeps` instead of slept.
- `seed_repository(standin, git_remote, owner, name, checkout)`: another repository, e.g. from `liger_checkout`.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.forge.base import RepoRef
from bot.forge.github import TOKEN_USERNAME
from bot.forge.github import AppCredentials
from bot.forge.github import GitHubApp
from bot.forge.github import HttpPolicy
from bot.forge.github import RetryPolicy
from pipelines.git import Git
from tests.git_http.server import GitHttpServer
from tests.github_standin.server import StandIn

__all__ = [
    "APP_ID",
    "BOT_BRANCH",
    "STANDIN_MAINTAINER",
    "STANDIN_REPO",
    "app_key_pair",
    "bot_checkout",
    "git_remote",
    "github_app",
    "github_forge",
    "github_standin",
    "make_seed_checkout",
    "seed_repository",
]

APP_ID = 31337
BOT_BRANCH = "liger-bot/autopatch-nemotron"
STANDIN_REPO = RepoRef("linkedin", "Liger-Kernel")
STANDIN_MAINTAINER = "maintainer"
WORKFLOWS = Path(__file__).resolve().parents[2] / ".github" / "workflows"
SHIPPED_WORKFLOWS = ("liger-bot-verify.yml", "liger-bot-scan.yml")


@pytest.fixture(scope="session")
def app_key_pair() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private.decode(), public.decode()


@pytest.fixture
def github_standin(app_key_pair, tmp_path):
    standin = StandIn(APP_ID, app_key_pair[1]).start()
    yield standin
    standin.stop()
    assert not standin.violations, "requests or answers outside GitHub's REST description:\n" + "\n".join(
        standin.violations
    )


@pytest.fixture
def git_remote(github_standin, tmp_path):
    def authenticate(username: str, password: str) -> bool:
        return username == TOKEN_USERNAME and github_standin.token_valid(password)

    server = GitHttpServer(tmp_path / "remotes", authenticate).start()
    seed = tmp_path / "seed"
    make_seed_checkout(seed)
    seed_repository(github_standin, server, STANDIN_REPO.owner, STANDIN_REPO.name, seed)
    github_standin.repos[STANDIN_REPO.full_name].collaborators[STANDIN_MAINTAINER] = "write"
    yield server
    server.stop()


def make_seed_checkout(path: Path) -> Path:
    """A one-commit repository on `main` holding our shipped workflow templates and a README."""
    (path / ".github" / "workflows").mkdir(parents=True)
    for name in SHIPPED_WORKFLOWS:
        shutil.copy(WORKFLOWS / name, path / ".github" / "workflows" / name)
    (path / "README.md").write_text("# Liger-Kernel (stand-in seed)\n")
    git = ["git", "-C", str(path), "-c", "user.name=Seed", "-c", "user.email=seed@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "seed"], check=True)
    return path


def seed_repository(standin: StandIn, server: GitHttpServer, owner: str, name: str, checkout: Path):
    bare = server.create_bare(owner, name, seed=checkout)
    repo = standin.add_repo(owner, name, bare, server.repo_url(owner, name))
    for workflow in SHIPPED_WORKFLOWS:
        standin.add_workflow(repo.full_name, workflow)
    return repo


@pytest.fixture
def github_app(github_standin, git_remote, app_key_pair):
    sleeps: list[float] = []
    credentials = AppCredentials(str(APP_ID), app_key_pair[0], github_standin.url)
    app = GitHubApp(credentials, HttpPolicy.for_tests(), RetryPolicy(sleep=sleeps.append))
    app.retry_sleeps = sleeps
    return app


@pytest.fixture
def bot_checkout(tmp_path, git_remote):
    """A clone of the seeded repository with BOT_BRANCH checked out: one commit by the bot, not pushed yet."""
    path = tmp_path / "work"
    bare = git_remote.bare_path(STANDIN_REPO.owner, STANDIN_REPO.name)
    subprocess.run(["git", "clone", "-q", str(bare), str(path)], check=True)
    git = Git(path)
    git.checkout(BOT_BRANCH, create_from="main")
    (path / "patch.py").write_text("x = 1\n")
    git.commit_all("autopatch nemotron")
    return path


@pytest.fixture
def github_forge(github_app, github_standin):
    return github_app.forge(github_standin.installation_id)
