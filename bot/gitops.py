"""The worker's git work, all of it: a bare mirror per repository and a fresh clone of it for each stage
(`GitWorkspace`), pushing the bot's branch to the forge's git remote, and noticing when a person has pushed to it.

Credentials travel in the remote URL (`https://x-access-token:TOKEN@host/owner/repo.git`), but that URL is
handed to git through `GIT_CONFIG_*` environment entries (a named remote), not argv, so it never shows in a
process list; every line git prints is redacted before it reaches a log or an exception.

The push never runs from the job's checkout: target code ran there (as the stage user) and could have planted a
hook, a config (`core.fsmonitor`, `core.sshCommand`, an `insteadOf`) or a gitfile. `push_branch` fetches the one
branch into a fresh bare repository (git's upload-pack, which is safe to run on an untrusted repository, is all
that touches the checkout) and pushes from there. Every git command here runs with hooks off
(`core.hooksPath=/dev/null`), fsmonitor off and only the protocols it needs (`protocol.allow=never`, then http(s)
for the remote and `file` for the one local fetch); the token exists only in the environment of the commands that
talk to the remote.

Renovate's rule: once the remote branch holds a commit the bot did not make, the bot stops rewriting it.
A commit is the bot's when it is the head the bot last pushed, or when its committer is the bot's identity.
"""

from __future__ import annotations

import enum
import fcntl
import os
import shlex
import shutil
import subprocess
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from bot.forge import redact
from bot.forge.base import Forge
from bot.forge.base import RepoRef
from pipelines.git import BOT_IDENTITY
from pipelines.git import Git
from pipelines.git import GitError
from pipelines.outcome import PipelineError
from pipelines.target import Checkout
from pipelines.target import open_checkout

REMOTE = "liger-bot-push"
_CHECK_REF = "refs/liger-bot/remote-head"
# git config for every command here: no hook, no fsmonitor, no transport but the ones named
HARDENED = {
    "core.hooksPath": "/dev/null",
    "core.fsmonitor": "false",
    "protocol.allow": "never",
    "protocol.https.allow": "always",
    "protocol.http.allow": "always",  # GitHub is https; the tests' git http-backend is http on 127.0.0.1
    "credential.helper": "",  # never hand the token to a credential store
}


class PushOutcome(str, enum.Enum):
    PUSHED = "pushed"
    UP_TO_DATE = "up to date"
    HUMAN_PUSHED = "a person pushed to the branch"


@dataclass(frozen=True)
class PushResult:
    outcome: PushOutcome
    branch: str
    head: str  # what the remote branch points at afterwards
    foreign_commits: tuple[str, ...] = ()  # the commits that stopped us, when HUMAN_PUSHED

    @property
    def message(self) -> str:
        if self.outcome is not PushOutcome.HUMAN_PUSHED:
            return f"{self.branch}: {self.outcome.value} ({self.head[:12]})"
        shown = ", ".join(sha[:12] for sha in self.foreign_commits[:5])
        return (
            f"someone else pushed to `{self.branch}` ({shown}), so liger-bot stops rewriting it; "
            f"delete the branch or close the PR to let the bot start over"
        )


def credentialed_url(url: str, credentials: tuple[str, str] | None) -> str:
    if credentials is None or not url.startswith(("http://", "https://")):
        return url
    user, password = (urllib.parse.quote(part, safe="") for part in credentials)
    redact.remember(credentials[1])
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


class Remote:
    """A git remote reached from a local checkout with credentials that never leave this object unredacted."""

    def __init__(self, checkout: Path, url: str, credentials: tuple[str, str] | None = None):
        self.checkout = Path(checkout)
        self.display_url = redact.redact(url)
        self._url = credentialed_url(url, credentials)
        # the forge's own remote may be a local path (the local forge, tests): then, and only then, `file` too
        self._transport = {} if url.startswith(("http://", "https://")) else {"protocol.file.allow": "always"}

    def git(self, *args: str) -> str:
        name, email = BOT_IDENTITY
        config = {
            **HARDENED,
            **self._transport,
            f"remote.{REMOTE}.url": self._url,
            "user.name": name,
            "user.email": email,
            "commit.gpgsign": "false",
        }
        proc = _run_git(self.checkout, config, args)
        if proc.returncode != 0:
            detail = redact.redact(proc.stderr.strip().replace(self._url, self.display_url))
            raise GitError(f"git {args[0]} to {self.display_url} failed: {detail}")
        return proc.stdout

    def head(self, branch: str) -> str | None:
        line = self.git("ls-remote", REMOTE, f"refs/heads/{branch}").strip()
        return line.split()[0] if line else None

    def fetch(self, branch: str) -> str:
        self.git("fetch", "-q", "--no-tags", REMOTE, f"+refs/heads/{branch}:{_CHECK_REF}")
        return self.git("rev-parse", _CHECK_REF).strip()


def _run_git(cwd: Path, config: dict[str, str], args) -> subprocess.CompletedProcess:
    """git with `config` given as command-line config (GIT_CONFIG_*: not argv, so no process list shows a token;
    and protected, so a repository's own config cannot override it)."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "GIT_CONFIG_NOSYSTEM": "1"}
    env["GIT_CONFIG_COUNT"] = str(len(config))
    for index, (key, value) in enumerate(config.items()):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def take_branch(checkout: Path, branch: str, clean: Path) -> None:
    """Copy `branch` of `checkout` (a tree target code could write) into the new bare repository `clean`."""
    source = Path(checkout).resolve()
    local = {**HARDENED, "protocol.file.allow": "always"}
    # upload-pack, the only git that reads the checkout, runs no hook and no code of it; the stage user owns the
    # checkout, so trust it (and only it) there. git clears GIT_CONFIG_* for a local upload-pack: argv it is.
    trust = " ".join(f"-c safe.directory={shlex.quote(str(path))}" for path in (source, source / ".git"))
    steps = (
        ("init", "-q", "--bare", str(clean)),
        ("-C", str(clean), "fetch", "-q", "--no-tags", "--no-recurse-submodules",
         f"--upload-pack=git {trust} upload-pack", str(source), f"+refs/heads/{branch}:refs/heads/{branch}"),
    )  # fmt: skip
    for args in steps:
        proc = _run_git(clean.parent, local, args)
        if proc.returncode != 0:
            raise GitError(f"could not take {branch} from the job's checkout: {redact.redact(proc.stderr.strip())}")


def foreign_commits(remote: Remote, remote_head: str, local_head: str) -> list[str]:
    """Commits on the remote branch, not in our history, whose committer is not the bot."""
    _, bot_email = BOT_IDENTITY
    log = remote.git("log", "--format=%H %ce", remote_head, "--not", local_head)
    return [sha for sha, _, email in (line.partition(" ") for line in log.splitlines()) if email != bot_email]


def push_branch(
    checkout: Path,
    branch: str,
    url: str,
    credentials: tuple[str, str] | None = None,
    last_pushed: str | None = None,
) -> PushResult:
    """Push the local `branch` to `url`, replacing what the bot pushed before, never what a person pushed. The push
    runs from a clean copy of the branch, never from `checkout` itself."""
    with tempfile.TemporaryDirectory(prefix="liger-bot-push-") as scratch:
        clean = Path(scratch) / "clean.git"
        take_branch(checkout, branch, clean)
        return _push_from(clean, branch, url, credentials, last_pushed)


def _push_from(
    clean: Path, branch: str, url: str, credentials: tuple[str, str] | None, last_pushed: str | None
) -> PushResult:
    remote = Remote(clean, url, credentials)
    local_head = remote.git("rev-parse", f"refs/heads/{branch}").strip()
    remote_head = remote.head(branch)
    if remote_head == local_head:
        return PushResult(PushOutcome.UP_TO_DATE, branch, local_head)
    if remote_head is not None and remote_head != last_pushed:
        remote.fetch(branch)
        strangers = foreign_commits(remote, remote_head, local_head)
        if strangers:
            return PushResult(PushOutcome.HUMAN_PUSHED, branch, remote_head, tuple(strangers))
    # the lease makes a push that raced with a person's push fail instead of overwriting it
    lease = f"--force-with-lease=refs/heads/{branch}:{remote_head or ''}"
    remote.git("push", "-q", lease, REMOTE, f"refs/heads/{branch}:refs/heads/{branch}")
    return PushResult(PushOutcome.PUSHED, branch, local_head)


# --- the worker's checkouts: a bare mirror per repository, a fresh clone of it per stage -------------------------


class GitWorkspace:
    """Checkouts under `root`, one folder per job, made fresh for each stage (a stage never trusts leftovers).

    Each repository has a bare mirror under `root/mirrors`, fetched incrementally; a job's checkout is a local
    clone of it (hardlinks), so a stage costs a fetch of what changed, not a download of the repository.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _mirror(self, forge: Forge, repo: RepoRef, branch: str) -> Path:
        mirror = self.root / "mirrors" / f"{repo.owner}__{repo.name}.git"
        mirror.parent.mkdir(parents=True, exist_ok=True)
        with open(mirror.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # workers on one host share the mirror
            if not (mirror / "HEAD").exists():
                mirror.mkdir(exist_ok=True)
                Git(mirror).run("init", "-q", "--bare")
            remote = Remote(mirror, forge.clone_url(repo), forge.push_credentials(repo))
            remote.git("fetch", "-q", "--no-tags", "--prune", REMOTE, f"+refs/heads/{branch}:refs/heads/{branch}")
        return mirror

    def checkout(self, forge: Forge, repo: RepoRef, branch: str, name: str) -> Checkout:
        mirror = self._mirror(forge, repo, branch)
        dest = self.root / name
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)  # a stage child (another user) may reach its own folder, not list the others
        # --no-hardlinks: the stage user will own the checkout's files, never an object shared with the mirror
        argv = ["git", "-c", "core.hooksPath=/dev/null", "clone", "-q", "--no-hardlinks", "-b", branch]
        proc = subprocess.run([*argv, str(mirror), str(dest)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise PipelineError(f"could not check out {repo.full_name}@{branch}: {proc.stderr.strip()[-300:]}")
        return open_checkout(dest)

    def push(self, forge: Forge, repo: RepoRef, checkout: Checkout, branch: str, last_pushed: str | None):
        return push_branch(checkout.root, branch, forge.clone_url(repo), forge.push_credentials(repo), last_pushed)

    def discard(self, name: str) -> None:
        shutil.rmtree(self.root / name, ignore_errors=True)

    def out_dir(self, job_id: int) -> Path:
        """Where a pipeline writes beside the checkout (reports, benchmark tables): never inside the target."""
        return self.root / f"job-{job_id}.out"

    def discard_job(self, job_id: int) -> None:
        for name in (f"job-{job_id}", f"job-{job_id}.out", f"job-{job_id}.liger-bot"):
            self.discard(name)
