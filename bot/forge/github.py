"""The GitHub forge, over PyGithub, authenticated as a GitHub App installation.

App id + private key -> a short-lived JWT -> an installation token, cached until shortly before it expires.
PyGithub's own retry is off (it would re-send a POST blindly); `RetryPolicy` retries here instead: reads
(and idempotent writes: PATCH, reactions) are retried after `retry-after` or a backoff on a secondary rate
limit (403), 429 and 5xx; a create is retried only after looking up whether the first attempt landed (the PR
by its head branch, a comment by its hidden marker, an issue by its title, a dispatched run by its branch, an
asset by its content-addressed path). Assets (a PR body's plot) are committed through the contents API to
ASSETS_BRANCH of the repository itself, never to the PR's branch, and linked at the commit that added them.
"""

from __future__ import annotations

import base64
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from datetime import UTC
from datetime import datetime
from typing import TypeVar

import requests
from github import Auth
from github import Consts
from github import Github
from github import GithubException
from github import GithubIntegration
from github import UnknownObjectException

from bot.forge import assets
from bot.forge import redact
from bot.forge.base import ForgeError
from bot.forge.base import Permission
from bot.forge.base import PullRequest
from bot.forge.base import RateLimited
from bot.forge.base import RepoRef
from bot.forge.base import WorkflowRun

log = logging.getLogger(__name__)
redact.install_log_filter("github.Requester", "github.GithubRetry", "urllib3.connectionpool", __name__)

DEFAULT_API_URL = "https://api.github.com"
MARKER_RE = re.compile(r"<!-- liger-bot:[^>]*? -->")
TOKEN_USERNAME = "x-access-token"
ASSETS_BRANCH = "liger-bot/assets"  # an orphan branch: a README and what publish_asset adds
ASSETS_DIR = "liger-bot-assets"
ASSETS_README = "Images liger-bot links from its pull requests (benchmark plots). Nothing else lives on this branch.\n"
_RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})

T = TypeVar("T")


@dataclass(frozen=True)
class AppCredentials:
    app_id: str
    private_key: str = field(repr=False)
    api_url: str = DEFAULT_API_URL


@dataclass(frozen=True)
class HttpPolicy:
    """Request pacing. Production keeps GitHub's recommended spacing; tests turn it off (`for_tests`)."""

    seconds_between_requests: float | None = Consts.DEFAULT_SECONDS_BETWEEN_REQUESTS
    seconds_between_writes: float | None = Consts.DEFAULT_SECONDS_BETWEEN_WRITES
    timeout: int = 15

    @classmethod
    def for_tests(cls) -> HttpPolicy:
        return cls(seconds_between_requests=None, seconds_between_writes=None, timeout=10)

    def client_kwargs(self) -> dict:
        return {
            "retry": None,  # never PyGithub's: it retries POSTs; RetryPolicy below decides
            "seconds_between_requests": self.seconds_between_requests,
            "seconds_between_writes": self.seconds_between_writes,
            "timeout": self.timeout,
            "user_agent": "liger-bot",
        }


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    backoff: float = 2.0  # seconds, doubled per attempt, for 5xx and connection errors
    secondary_wait: float = 60.0  # GitHub: wait at least a minute on a secondary limit without retry-after
    max_wait: float = 120.0  # longer than this and the job is deferred (RateLimited), not the worker blocked
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    clock: Callable[[], float] = field(default=time.time, compare=False)

    def wait_for(self, error: Exception, attempt: int) -> float | None:
        """Seconds to wait before trying again, or None when retrying cannot help."""
        if isinstance(error, requests.ConnectionError | requests.Timeout):
            return self.backoff * 2**attempt
        if not isinstance(error, GithubException):
            return None
        headers = {k.lower(): v for k, v in (error.headers or {}).items()}
        if "retry-after" in headers:
            return float(headers["retry-after"])
        if error.status in (403, 429) and headers.get("x-ratelimit-remaining") == "0":
            return max(0.0, float(headers.get("x-ratelimit-reset", 0)) - self.clock()) + 1
        if error.status == 403 and "secondary rate limit" in str(error.data).lower():
            return self.secondary_wait * 2**attempt
        if error.status in _RETRYABLE_STATUSES:
            return self.backoff * 2**attempt
        return None


class InstallationTokens:
    """Installation tokens per installation id, minted with the App's JWT and reused until `margin` before expiry."""

    def __init__(self, credentials: AppCredentials, http: HttpPolicy, margin: float = 300.0, clock=time.time):
        self.margin = margin
        self.clock = clock
        self.minted = 0
        self._integration = GithubIntegration(
            auth=Auth.AppAuth(credentials.app_id, credentials.private_key),
            base_url=credentials.api_url,
            **http.client_kwargs(),
        )
        self._cache: dict[int, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def token(self, installation_id: int) -> str:
        with self._lock:
            cached = self._cache.get(installation_id)
            if cached and cached[1] - self.margin > self.clock():
                return cached[0]
            grant = self._integration.get_access_token(installation_id)
            redact.remember(grant.token)
            self.minted += 1
            expires_at = grant.expires_at.replace(tzinfo=grant.expires_at.tzinfo or UTC).timestamp()
            self._cache[installation_id] = (grant.token, expires_at)
            return grant.token

    def installation_id(self, repo: RepoRef) -> int:
        return self.installation(repo).id

    def installation(self, repo: RepoRef):
        return self._integration.get_repo_installation(repo.owner, repo.name)


class _InstallationAuth(Auth.Auth):
    """PyGithub asks for `token` on every request, so a refreshed token is picked up without a new client."""

    def __init__(self, tokens: InstallationTokens, installation_id: int):
        self._tokens = tokens
        self._installation_id = installation_id

    @property
    def token_type(self) -> str:
        return "token"

    @property
    def token(self) -> str:
        return self._tokens.token(self._installation_id)

    @property
    def _masked_token(self) -> str:
        return "token (installation token removed)"


class GitHubApp:
    """One per process: the App's credentials, its token cache, and the policies every forge shares."""

    def __init__(self, credentials: AppCredentials, http: HttpPolicy | None = None, retry: RetryPolicy | None = None):
        self.credentials = credentials
        self.http = http or HttpPolicy()
        self.retry = retry or RetryPolicy()
        self.tokens = InstallationTokens(credentials, self.http)

    def forge(self, installation_id: int) -> GitHubForge:
        return GitHubForge(self, installation_id)

    def forge_for(self, repo: RepoRef) -> GitHubForge:
        """For the CLI and scheduled scans, where no webhook payload names the installation."""
        return self.forge(
            _with_retry(
                self.retry, f"find the installation of {repo.full_name}", lambda: self.tokens.installation_id(repo)
            )
        )


def _with_retry(
    policy: RetryPolicy, what: str, call: Callable[[], T], recover: Callable[[], T | None] | None = None
) -> T:
    """Run `call`; on a retryable failure wait, then (for a create) `recover` by looking up, then try again."""
    for attempt in range(policy.attempts):
        try:
            return call()
        except (GithubException, requests.ConnectionError, requests.Timeout) as error:
            failure = error
            wait = policy.wait_for(error, attempt)
        if wait is None:
            raise _forge_error(what, failure) from None
        if wait > policy.max_wait:
            raise RateLimited(f"{what}: GitHub asked to wait {wait:.0f}s", retry_at=policy.clock() + wait) from None
        log.warning("%s: %s; retrying in %.1fs", what, _summary(failure), wait)
        policy.sleep(wait)
        if recover is not None:
            found = recover()
            if found is not None:
                log.info("%s: the earlier attempt had landed; not sending it again", what)
                return found
    raise ForgeError(f"{what}: gave up after {policy.attempts} attempts ({_summary(failure)})", _status(failure))


def _status(error: Exception) -> int | None:
    return error.status if isinstance(error, GithubException) else None


def _summary(error: Exception) -> str:
    if isinstance(error, GithubException):
        message = error.data.get("message", "") if isinstance(error.data, dict) else ""
        return redact.redact(f"HTTP {error.status} {message}".strip())
    return redact.redact(type(error).__name__)


def _forge_error(what: str, error: Exception) -> ForgeError:
    return ForgeError(f"{what}: {_summary(error)}", _status(error))


class GitHubForge:
    """`bot.forge.base.Forge` for one App installation."""

    def __init__(self, app: GitHubApp, installation_id: int):
        self.app = app
        self.installation_id = installation_id
        self._actor: str | None = None  # the App's bot login, read once
        self._gh = Github(
            auth=_InstallationAuth(app.tokens, installation_id),
            base_url=app.credentials.api_url,
            lazy=True,
            **app.http.client_kwargs(),
        )

    # -- plumbing ---------------------------------------------------------------------------------------------

    def _call(self, what: str, call: Callable[[], T], recover: Callable[[], T | None] | None = None) -> T:
        return _with_retry(self.app.retry, what, call, recover)

    def _repo(self, repo: RepoRef):
        return self._gh.get_repo(repo.full_name)

    def _api(self, verb: str, path: str, parameters: dict | None = None, body: dict | None = None):
        _, data = self._gh.requester.requestJsonAndCheck(verb, path, parameters=parameters, input=body)
        return data

    # -- people and reactions ---------------------------------------------------------------------------------

    def permission(self, repo: RepoRef, username: str) -> Permission:
        def ask() -> Permission:
            try:
                role = self._repo(repo).get_collaborator_role_name(username)
            except UnknownObjectException:
                return Permission.NONE
            if role and role.upper() in Permission.__members__:
                return Permission.parse(role)
            # a custom role: its base permission is the legacy `permission` field
            return Permission.parse(self._repo(repo).get_collaborator_permission(username))

        return self._call(f"read {username}'s permission on {repo.full_name}", ask)

    def add_reaction(self, repo: RepoRef, comment_id: int, content: str, review_comment: bool = False) -> None:
        kind = "pulls" if review_comment else "issues"
        path = f"/repos/{repo.full_name}/{kind}/comments/{comment_id}/reactions"
        # GitHub answers 200 for a reaction that already exists, so sending it twice is harmless
        self._call(f"react to comment {comment_id}", lambda: self._api("POST", path, body={"content": content}))

    # -- comments -----------------------------------------------------------------------------------------------

    def create_comment(self, repo: RepoRef, issue_number: int, body: str) -> int:
        body = redact.redact(body)  # nothing the App posts carries a secret, whoever wrote the text
        marker = MARKER_RE.search(body)
        if marker:
            existing = self.find_comment(repo, issue_number, marker.group(0))
            if existing is not None:
                return existing
        else:
            marker_text = f"<!-- liger-bot:create={uuid.uuid4().hex} -->"
            body = f"{body}\n\n{marker_text}"
            marker = MARKER_RE.search(body)
        path = f"/repos/{repo.full_name}/issues/{issue_number}/comments"
        return self._call(
            f"comment on {repo.full_name}#{issue_number}",
            lambda: self._api("POST", path, body={"body": body})["id"],
            recover=lambda: self.find_comment(repo, issue_number, marker.group(0)),
        )

    def find_comment(self, repo: RepoRef, issue_number: int, marker: str) -> int | None:
        def look() -> int | None:
            comments = self._repo(repo).get_issue(issue_number).get_comments()
            return next((c.id for c in comments if marker in (c.body or "")), None)

        return self._call(f"find a comment on {repo.full_name}#{issue_number}", look)

    def edit_comment(self, repo: RepoRef, comment_id: int, body: str) -> None:
        body = redact.redact(body)  # nothing the App posts carries a secret, whoever wrote the text
        path = f"/repos/{repo.full_name}/issues/comments/{comment_id}"
        self._call(f"edit comment {comment_id}", lambda: self._api("PATCH", path, body={"body": body}))

    # -- repository contents --------------------------------------------------------------------------------------

    def default_branch(self, repo: RepoRef) -> str:
        return self._repository_field(repo, "default_branch")

    def clone_url(self, repo: RepoRef) -> str:
        return self._repository_field(repo, "clone_url")

    def _repository_field(self, repo: RepoRef, key: str) -> str:
        return self._call(f"read {repo.full_name}", lambda: self._api("GET", f"/repos/{repo.full_name}")[key])

    def push_credentials(self, repo: RepoRef) -> tuple[str, str]:
        token = self._call("mint an installation token", lambda: self.app.tokens.token(self.installation_id))
        return TOKEN_USERNAME, token

    def read_file(self, repo: RepoRef, path: str, ref: str) -> str | None:
        def read() -> str | None:
            try:
                content = self._repo(repo).get_contents(path, ref=ref)
            except UnknownObjectException:
                return None
            if isinstance(content, list) or content.type != "file":
                return None
            return content.decoded_content.decode()

        return self._call(f"read {path}@{ref} in {repo.full_name}", read)

    def branch_head(self, repo: RepoRef, branch: str) -> str | None:
        def head() -> str | None:
            try:
                return self._repo(repo).get_git_ref(f"heads/{branch}").object.sha
            except UnknownObjectException:
                return None

        return self._call(f"read branch {branch} of {repo.full_name}", head)

    # -- assets (a PR body's plot) ---------------------------------------------------------------------------------

    def publish_asset(self, repo: RepoRef, name: str, data: bytes) -> str:
        """A commit on ASSETS_BRANCH holds the file; the link is pinned to that commit, so it never changes."""
        path = f"{ASSETS_DIR}/{assets.stored_name(name, data)}"
        head = self.branch_head(repo, ASSETS_BRANCH)
        commit = (head and self._asset_at(repo, path, head)) or self._upload_asset(repo, path, data, head)
        return f"{self._repository_field(repo, 'html_url')}/blob/{commit}/{path}?raw=true"

    def _asset_commit(self, repo: RepoRef, path: str) -> str | None:
        """The head of ASSETS_BRANCH if it holds `path` already (content-addressed: the same bytes), else None."""
        head = self.branch_head(repo, ASSETS_BRANCH)
        return self._asset_at(repo, path, head) if head is not None else None

    def _asset_at(self, repo: RepoRef, path: str, head: str) -> str | None:
        def look() -> str | None:
            try:
                self._api("GET", f"/repos/{repo.full_name}/contents/{path}", {"ref": head})
            except UnknownObjectException:
                return None
            return head

        return self._call(f"look for {path} in {repo.full_name}", look)

    def _upload_asset(self, repo: RepoRef, path: str, data: bytes, head: str | None) -> str:
        if head is None:
            self._start_assets_branch(repo)
        content = {
            "message": f"liger-bot: add {path}",
            "content": base64.b64encode(data).decode(),
            "branch": ASSETS_BRANCH,
        }

        def upload() -> str:
            try:
                return self._api("PUT", f"/repos/{repo.full_name}/contents/{path}", body=content)["commit"]["sha"]
            except GithubException as error:
                # 422: the file is there (another worker uploaded the same bytes); 409: the branch moved meanwhile
                raced = self._asset_commit(repo, path) if error.status in (409, 422) else None
                if raced is not None:
                    return raced
                raise

        return self._call(f"publish {path} to {repo.full_name}", upload, recover=lambda: self._asset_commit(repo, path))

    def _start_assets_branch(self, repo: RepoRef) -> str:
        """An orphan branch holding a README and the assets only: no copy of the code, so no workflow of the target
        runs when the bot pushes to it."""
        readme = {"path": "README.md", "mode": "100644", "type": "blob", "content": ASSETS_README}
        tree = self._call(
            f"write the {ASSETS_BRANCH} tree in {repo.full_name}",
            lambda: self._api("POST", f"/repos/{repo.full_name}/git/trees", body={"tree": [readme]})["sha"],
        )  # a tree or commit written twice is the same object or an unreferenced one: safe to retry
        first = {"message": f"liger-bot: start {ASSETS_BRANCH}", "tree": tree, "parents": []}
        commit = self._call(
            f"commit the {ASSETS_BRANCH} root in {repo.full_name}",
            lambda: self._api("POST", f"/repos/{repo.full_name}/git/commits", body=first)["sha"],
        )
        ref = {"ref": f"refs/heads/{ASSETS_BRANCH}", "sha": commit}

        def create() -> str:
            try:
                return self._api("POST", f"/repos/{repo.full_name}/git/refs", body=ref)["object"]["sha"]
            except GithubException as error:
                raced = self.branch_head(repo, ASSETS_BRANCH) if error.status == 422 else None
                if raced is not None:  # another worker created it first
                    return raced
                raise

        return self._call(
            f"create {ASSETS_BRANCH} in {repo.full_name}", create, recover=lambda: self.branch_head(repo, ASSETS_BRANCH)
        )

    # -- pull requests ----------------------------------------------------------------------------------------------

    def find_pull_request(self, repo: RepoRef, head_branch: str) -> PullRequest | None:
        def look() -> PullRequest | None:
            pulls = self._repo(repo).get_pulls(state="open", head=f"{repo.owner}:{head_branch}")
            return next((_pull(p) for p in pulls if p.head.ref == head_branch), None)

        return self._call(f"find the PR from {head_branch} in {repo.full_name}", look)

    def open_pull_requests(self, repo: RepoRef, head_prefix: str) -> list[PullRequest]:
        def look() -> list[PullRequest]:
            pulls = self._repo(repo).get_pulls(state="open")
            return [_pull(p) for p in pulls if p.head.ref.startswith(head_prefix)]

        return self._call(f"list open PRs in {repo.full_name}", look)

    def ensure_pull_request(self, repo: RepoRef, head_branch: str, base: str, title: str, body: str) -> PullRequest:
        """The open PR from `head_branch`, its title and body brought up to date; a new draft PR only if none."""
        title, body = redact.redact(title), redact.redact(body)
        found = self.find_pull_request(repo, head_branch)
        if found is not None:
            path = f"/repos/{repo.full_name}/pulls/{found.number}"
            self._call(
                f"update PR #{found.number}", lambda: self._api("PATCH", path, body={"title": title, "body": body})
            )
            return found

        def create() -> PullRequest:
            try:
                return _pull(
                    self._repo(repo).create_pull(base=base, head=head_branch, title=title, body=body, draft=True)
                )
            except GithubException as error:
                if error.status == 422 and "already exists" in str(error.data):
                    # another worker won the race: the PR is there, and it is ours by branch name
                    raced = self.find_pull_request(repo, head_branch)
                    if raced is not None:
                        return raced
                raise

        return self._call(
            f"open a PR from {head_branch} in {repo.full_name}",
            create,
            recover=lambda: self.find_pull_request(repo, head_branch),
        )

    def add_labels(self, repo: RepoRef, number: int, labels: list[str]) -> None:
        path = f"/repos/{repo.full_name}/issues/{number}/labels"
        self._call(f"label #{number}", lambda: self._api("POST", path, body={"labels": list(labels)}))

    # -- issues (the scan dashboard) ------------------------------------------------------------------------------

    def find_issue(self, repo: RepoRef, title: str) -> int | None:
        def look() -> int | None:
            issues = self._repo(repo).get_issues(state="open")
            return next((i.number for i in issues if i.pull_request is None and i.title == title), None)

        return self._call(f"find issue {title!r} in {repo.full_name}", look)

    def create_issue(self, repo: RepoRef, title: str, body: str) -> int:
        title, body = redact.redact(title), redact.redact(body)
        path = f"/repos/{repo.full_name}/issues"
        return self._call(
            f"open issue {title!r} in {repo.full_name}",
            lambda: self._api("POST", path, body={"title": title, "body": body})["number"],
            recover=lambda: self.find_issue(repo, title),
        )

    def edit_issue(self, repo: RepoRef, number: int, body: str) -> None:
        body = redact.redact(body)  # nothing the App posts carries a secret, whoever wrote the text
        path = f"/repos/{repo.full_name}/issues/{number}"
        self._call(f"edit issue #{number}", lambda: self._api("PATCH", path, body={"body": body}))

    # -- Actions ---------------------------------------------------------------------------------------------------

    def dispatch_workflow(self, repo: RepoRef, workflow: str, ref: str, inputs: dict[str, str]) -> int | None:
        since = datetime.now(UTC).replace(microsecond=0)
        path = f"/repos/{repo.full_name}/actions/workflows/{workflow}/dispatches"
        answer = self._call(
            f"dispatch {workflow} on {ref} in {repo.full_name}",
            lambda: self._api("POST", path, body={"ref": ref, "inputs": inputs, "return_run_details": True}) or True,
            recover=lambda: self._dispatched_since(repo, workflow, ref, since),
        )
        return int(answer["workflow_run_id"]) if isinstance(answer, dict) and "workflow_run_id" in answer else None

    def _dispatched_since(self, repo: RepoRef, workflow: str, ref: str, since: datetime) -> bool | None:
        runs = self.workflow_runs(repo, workflow, ref)
        return True if any(run.created_at >= since.timestamp() for run in runs) else None

    def workflow_runs(self, repo: RepoRef, workflow: str, branch: str) -> list[WorkflowRun]:
        path = f"/repos/{repo.full_name}/actions/workflows/{workflow}/runs"
        parameters = {"branch": branch, "event": "workflow_dispatch", "per_page": 20}
        listing = self._call(f"list runs of {workflow} on {branch}", lambda: self._api("GET", path, parameters))
        runs = [WorkflowRun.from_json(run) for run in listing.get("workflow_runs") or []]
        return sorted(runs, key=lambda run: -run.id)

    def actor_login(self, repo: RepoRef) -> str:
        if self._actor is None:
            installation = self._call(
                f"read the App installation of {repo.full_name}",
                lambda: self.app.tokens.installation(repo),
            )
            self._actor = f"{installation.app_slug}[bot]"
        return self._actor

    def download_artifact(self, repo: RepoRef, run_id: int, name: str) -> bytes | None:
        """The artifact's zip archive as GitHub serves it, or None when the run uploaded no artifact `name`."""

        def download() -> bytes | None:
            listing = self._api("GET", f"/repos/{repo.full_name}/actions/runs/{run_id}/artifacts", {"name": name})
            found = [a for a in listing["artifacts"] if a["name"] == name and not a["expired"]]
            if not found:
                return None
            url = f"/repos/{repo.full_name}/actions/artifacts/{found[0]['id']}/zip"
            try:
                _, _, chunks = self._gh.requester.getStream(url, chunk_size=65536)
                return b"".join(chunks)
            except requests.HTTPError as error:  # the blob store answers outside PyGithub's error mapping
                raise GithubException(error.response.status_code, None, dict(error.response.headers)) from None

        return self._call(f"download artifact {name} of run {run_id}", download)


def _pull(pull) -> PullRequest:
    return PullRequest(pull.number, pull.head.ref, pull.base.ref, pull.html_url, bool(pull.draft))
