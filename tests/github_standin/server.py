"""A local GitHub stand-in: a Flask app that keeps state for liger-bot's flows and checks every exchange.

Every request is validated against GitHub's REST description (`spec.py`) before it is served, and every
answer before it is sent. A request the real API would reject gets a 4xx and is recorded in `violations`;
the fixtures fail the test on any violation. Auth is checked like GitHub does it: `/app/...` needs the App's
JWT (RS256, verified with the App's public key); everything else needs an unexpired installation token.

Branches and files are read from real bare repositories (served to git by `tests/git_http`), so a push over
HTTP is what the API then reports; a file written through the contents API is a real commit there. Faults can
be injected per route: `fail(...)` answers an error instead of serving (a rate limit), `fail(..., after=True)`
serves the request and then loses the answer (a 502 after the write landed, the case where a blind retry makes
a duplicate).

The stand-in is github.com too: a repository's `html_url` points at it, and its file links
(`/{owner}/{repo}/blob/{sha}/{path}?raw=true`, what a PR body's image loads) answer the file's bytes, outside
the REST checks as GitHub's web is.
"""

from __future__ import annotations

import base64
import hashlib
import io
import itertools
import json
import mimetypes
import os
import re
import secrets
import subprocess
import threading
import time
import zipfile
import zlib
from dataclasses import dataclass
from dataclasses import field
from datetime import UTC
from datetime import datetime
from pathlib import Path

import jwt
import yaml
from flask import Flask
from flask import Response
from flask import request
from werkzeug.serving import WSGIRequestHandler
from werkzeug.serving import make_server

from tests.github_standin import spec

JSON = "application/json; charset=utf-8"
WEB_FILE = re.compile(r"^/(?!repos/|app/)([^/]+)/([^/]+)/blob/([0-9a-f]{40})/(.+)$")  # github.com/o/r/blob/sha/path


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Fault:
    method: str
    path: re.Pattern
    status: int
    headers: dict
    body: dict
    after: bool
    times: int


@dataclass
class RepoState:
    owner: str
    name: str
    id: int
    bare: Path  # the bare git repository this repo's branches and files are read from
    clone_url: str
    default_branch: str = "main"
    collaborators: dict[str, str] = field(default_factory=dict)  # login -> admin | maintain | write | triage | read
    workflows: dict[str, int] = field(default_factory=dict)  # file name -> workflow id

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"

    def git(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "--git-dir", str(self.bare), *args], capture_output=True)

    def ref_sha(self, ref: str) -> str | None:
        proc = self.git("rev-parse", "--verify", "-q", f"refs/{ref}^{{commit}}")
        return proc.stdout.decode().strip() if proc.returncode == 0 else None

    def file(self, path: str, ref: str) -> bytes | None:
        proc = self.git("show", f"{ref}:{path}")
        return proc.stdout if proc.returncode == 0 else None

    def commit_file(self, branch: str, path: str, data: bytes, message: str, author: str) -> str:
        """A commit on `branch` that adds or replaces `path`, made with git's plumbing in the bare repository."""
        parent = self.ref_sha(f"heads/{branch}")
        blob = self._plumbing(["hash-object", "-w", "--stdin"], data)
        index = {"GIT_INDEX_FILE": str(self.bare / f"standin-index-{secrets.token_hex(4)}")}
        try:
            self._plumbing(["read-tree", parent], env=index)
            self._plumbing(["update-index", "--add", "--cacheinfo", f"100644,{blob},{path}"], env=index)
            tree = self._plumbing(["write-tree"], env=index)
        finally:
            Path(index["GIT_INDEX_FILE"]).unlink(missing_ok=True)
        who = {"GIT_AUTHOR_NAME": author, "GIT_AUTHOR_EMAIL": f"{author}@users.noreply.github.com"}
        who |= {"GIT_COMMITTER_NAME": author, "GIT_COMMITTER_EMAIL": who["GIT_AUTHOR_EMAIL"]}
        commit = self._plumbing(["commit-tree", tree, "-p", parent, "-m", message], env=who)
        self._plumbing(["update-ref", f"refs/heads/{branch}", commit, parent])  # fails if the branch moved
        return commit

    def write_tree(self, files: dict[str, bytes]) -> str:
        """A tree of top-level files (what POST git/trees without base_tree makes from inline content)."""
        entries = "".join(
            f"100644 blob {self._plumbing(['hash-object', '-w', '--stdin'], data)}\t{path}\n"
            for path, data in sorted(files.items())
        )
        return self._plumbing(["mktree"], entries.encode())

    def commit_tree(self, tree: str, parents: list[str], message: str, author: str) -> str:
        who = {"GIT_AUTHOR_NAME": author, "GIT_AUTHOR_EMAIL": f"{author}@users.noreply.github.com"}
        who |= {"GIT_COMMITTER_NAME": author, "GIT_COMMITTER_EMAIL": who["GIT_AUTHOR_EMAIL"]}
        parent_args = [arg for parent in parents for arg in ("-p", parent)]
        return self._plumbing(["commit-tree", tree, *parent_args, "-m", message], env=who)

    def _plumbing(self, args: list[str], data: bytes | None = None, env: dict | None = None) -> str:
        proc = subprocess.run(
            ["git", "--git-dir", str(self.bare), *args],
            input=data,
            capture_output=True,
            env={**os.environ, **(env or {})},
            check=True,
        )
        return proc.stdout.decode().strip()


class StandIn:
    def __init__(self, app_id: int, public_key_pem: str, app_slug: str = "liger-bot", installation_id: int = 4242):
        self.app_id = app_id
        self.public_key_pem = public_key_pem
        self.app_slug = app_slug
        self.installation_id = installation_id
        self.token_ttl = 3600.0  # seconds; tests shorten it to see a refresh
        self.repos: dict[str, RepoState] = {}
        self.issues: dict[str, dict[int, dict]] = {}  # full_name -> number -> issue (PRs included)
        self.comments: dict[int, dict] = {}
        self.review_comments: dict[int, dict] = {}
        self.reactions: list[dict] = []
        self.runs: dict[int, dict] = {}
        self.artifacts: dict[int, dict] = {}
        self.tokens: dict[str, float] = {}  # token -> expiry (epoch s)
        self.violations: list[str] = []
        self.log: list[tuple[str, str, int]] = []  # (method, path, status) per request served
        self.faults: list[Fault] = []
        self._ids = itertools.count(1000)
        self._lock = threading.RLock()
        self.app = build_app(self)
        self._server = make_server("127.0.0.1", 0, self.app, threaded=True, request_handler=_QuietHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def start(self) -> StandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- seeding and inspection (tests call these directly) ------------------------------------------------------

    def add_repo(self, owner: str, name: str, bare: Path, clone_url: str, default_branch: str = "main") -> RepoState:
        repo = RepoState(owner, name, next(self._ids), Path(bare), clone_url, default_branch)
        self.repos[repo.full_name] = repo
        self.issues[repo.full_name] = {}
        return repo

    def add_workflow(self, full_name: str, file_name: str) -> int:
        workflow_id = next(self._ids)
        self.repos[full_name].workflows[file_name] = workflow_id
        return workflow_id

    def add_issue(self, full_name: str, title: str, body: str, user: str) -> int:
        return self._new_issue(self.repos[full_name], title, body, user)["number"]

    def add_comment(self, full_name: str, number: int, body: str, user: str) -> int:
        return self._new_comment(self.repos[full_name], number, body, user)["id"]

    def add_review_comment(self, full_name: str, pull_number: int, body: str, user: str) -> int:
        comment_id = next(self._ids)
        self.review_comments[comment_id] = {"id": comment_id, "pull": pull_number, "body": body, "user": user}
        return comment_id

    def fail(self, method: str, path: str, status: int, headers=None, body=None, after=False, times=1) -> None:
        """Answer the next `times` requests matching `method` and the regex `path` with `status`."""
        message = (body or {}).get("message") or {403: "You have exceeded a secondary rate limit."}.get(
            status, "Server Error"
        )
        self.faults.append(
            Fault(
                method.upper(),
                re.compile(path),
                status,
                dict(headers or {}),
                body or {"message": message},
                after,
                times,
            )
        )

    def count(self, method: str, path_regex: str, status: int | None = None) -> int:
        pattern = re.compile(path_regex)
        return sum(1 for m, p, s in self.log if m == method and pattern.search(p) and (status is None or s == status))

    def pulls(self, full_name: str) -> list[dict]:
        return [i for i in self.issues[full_name].values() if "pull" in i]

    def token_valid(self, token: str) -> bool:
        return self.tokens.get(token, 0) > time.time()

    def complete_run(self, run_id: int, conclusion: str, artifacts: dict[str, dict[str, bytes]] | None = None) -> dict:
        """Finish a dispatched run, attaching artifacts ({name: {member: bytes}}); returns the workflow_run webhook."""
        with self._lock:
            run = self.runs[run_id]
            run.update(status="completed", conclusion=conclusion, updated_at=_now())
            for name, members in (artifacts or {}).items():
                archive = io.BytesIO()
                with zipfile.ZipFile(archive, "w") as bundle:
                    for member, data in members.items():
                        bundle.writestr(member, data)
                artifact_id = next(self._ids)
                self.artifacts[artifact_id] = {
                    "id": artifact_id,
                    "run": run_id,
                    "name": name,
                    "zip": archive.getvalue(),
                }
            return self.workflow_run_event(run_id)

    def workflow_run_event(self, run_id: int) -> dict:
        run = self.runs[run_id]
        repo = self.repos[run["repo"]]
        return {
            "action": "completed" if run["status"] == "completed" else "requested",
            "workflow_run": self._run_json(run),
            "workflow": self._workflow_json(repo, run["workflow_file"]),
            "repository": self._repo_json(repo, "repository"),
            "installation": {"id": self.installation_id, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uNDI0Mg=="},
            "sender": self._user(f"{self.app_slug}[bot]"),
        }

    # -- state changes ------------------------------------------------------------------------------------------------

    def _new_issue(self, repo: RepoState, title: str, body: str | None, user: str, pull: dict | None = None) -> dict:
        with self._lock:
            number = len(self.issues[repo.full_name]) + 1
            issue = {
                "id": next(self._ids),
                "number": number,
                "title": title,
                "body": body,
                "user": user,
                "state": "open",
            }
            if pull is not None:
                issue["pull"] = pull
            self.issues[repo.full_name][number] = issue
            return issue

    def _new_comment(self, repo: RepoState, number: int, body: str, user: str) -> dict:
        with self._lock:
            comment = {"id": next(self._ids), "repo": repo.full_name, "issue": number, "body": body, "user": user}
            comment["created_at"] = comment["updated_at"] = _now()
            self.comments[comment["id"]] = comment
            return comment

    def _new_run(self, repo: RepoState, workflow_file: str, ref: str, inputs: dict, actor: str = "") -> dict:
        with self._lock:
            run_id = next(self._ids)
            title = self._run_name(repo, workflow_file, ref, inputs)
            run = {"id": run_id, "repo": repo.full_name, "workflow_file": workflow_file, "ref": ref, "inputs": inputs}
            run.update(status="queued", conclusion=None, created_at=_now(), updated_at=_now(), title=title)
            run.update(
                sha=repo.ref_sha(f"heads/{ref}"), actor=actor or f"{self.app_slug}[bot]", event="workflow_dispatch"
            )
            self.runs[run_id] = run
            return run

    def add_run(self, full_name: str, workflow_file: str, ref: str, **claims) -> dict:
        """A run the App did not dispatch (a person's, a fork's, a push's): `claims` override sha, actor, event,
        head_repository (a full name) and created_at of a run made as a dispatch would."""
        run = self._new_run(self.repos[full_name], workflow_file, ref, {}, actor=claims.pop("actor", ""))
        run.update(claims)
        return run

    def _run_name(self, repo: RepoState, workflow_file: str, ref: str, inputs: dict) -> str:
        definition = self._workflow_definition(repo, workflow_file, ref) or {}
        template = str(definition.get("run-name") or definition.get("name") or workflow_file)
        return re.sub(r"\$\{\{\s*inputs\.(\w+)\s*\}\}", lambda m: str(inputs.get(m.group(1), "")), template)

    def _workflow_definition(self, repo: RepoState, workflow_file: str, ref: str) -> dict | None:
        text = repo.file(f".github/workflows/{workflow_file}", ref)
        if text is None:
            return None
        definition = yaml.safe_load(text)
        # YAML 1.1 reads the key `on` as True
        definition["on"] = definition.pop(True, definition.get("on"))
        return definition

    # -- JSON shapes (every answer also passes the response validation) -------------------------------------------

    def _user(self, login: str) -> dict:
        user_id = int(hashlib.sha256(login.encode()).hexdigest()[:7], 16)
        api = f"{self.url}/users/{login}"
        kind = "Bot" if login.endswith("[bot]") else "User"
        return spec.example(
            "simple-user", login=login, id=user_id, type=kind, url=api, html_url=f"https://github.com/{login}"
        )

    def _repo_json(self, repo: RepoState, schema: str = "full-repository") -> dict:
        api = f"{self.url}/repos/{repo.full_name}"
        return spec.example(
            schema,
            id=repo.id,
            name=repo.name,
            full_name=repo.full_name,
            owner=self._user(repo.owner),
            private=False,
            default_branch=repo.default_branch,
            url=api,
            html_url=f"{self.url}/{repo.full_name}",  # the stand-in serves the web's raw file links too
            clone_url=repo.clone_url,
            pulls_url=f"{api}/pulls{{/number}}",
            issues_url=f"{api}/issues{{/number}}",
        )

    def _issue_json(self, repo: RepoState, issue: dict) -> dict:
        api = f"{self.url}/repos/{repo.full_name}/issues/{issue['number']}"
        shape = spec.example(
            "issue",
            id=issue["id"],
            number=issue["number"],
            title=issue["title"],
            body=issue["body"],
            state=issue["state"],
            user=self._user(issue["user"]),
            url=api,
            comments_url=f"{api}/comments",
            repository_url=f"{self.url}/repos/{repo.full_name}",
            html_url=f"https://github.com/{repo.full_name}/issues/{issue['number']}",
            labels=[self._label_json(repo, label) for label in issue.get("labels", [])],
            comments=sum(
                1 for c in self.comments.values() if c["repo"] == repo.full_name and c["issue"] == issue["number"]
            ),
        )
        if "pull" in issue:
            pull_api = f"{self.url}/repos/{repo.full_name}/pulls/{issue['number']}"
            shape["pull_request"] = {"url": pull_api, "html_url": None, "diff_url": None, "patch_url": None}
        return shape

    def _label_json(self, repo: RepoState, label: str) -> dict:
        return spec.example(
            "label",
            id=zlib.crc32(label.encode()),
            name=label,
            url=f"{self.url}/repos/{repo.full_name}/labels/{label}",
            color="ededed",
            default=False,
        )

    def _comment_json(self, comment: dict) -> dict:
        api = f"{self.url}/repos/{comment['repo']}/issues/comments/{comment['id']}"
        return spec.example(
            "issue-comment",
            id=comment["id"],
            body=comment["body"],
            user=self._user(comment["user"]),
            url=api,
            issue_url=f"{self.url}/repos/{comment['repo']}/issues/{comment['issue']}",
            html_url=f"https://github.com/{comment['repo']}/issues/{comment['issue']}#issuecomment-{comment['id']}",
            created_at=comment["created_at"],
            updated_at=comment["updated_at"],
        )

    def _pull_json(self, repo: RepoState, issue: dict, schema: str = "pull-request") -> dict:
        pull = issue["pull"]
        api = f"{self.url}/repos/{repo.full_name}/pulls/{issue['number']}"

        def side(ref: str) -> dict:
            sha = repo.ref_sha(f"heads/{ref}") or "0" * 40
            return {"ref": ref, "sha": sha, "label": f"{repo.owner}:{ref}", "repo": self._repo_json(repo, "repository")}

        return spec.example(
            schema,
            id=issue["id"],
            number=issue["number"],
            title=issue["title"],
            body=issue["body"],
            state=issue["state"],
            draft=pull["draft"],
            user=self._user(issue["user"]),
            url=api,
            html_url=f"https://github.com/{repo.full_name}/pull/{issue['number']}",
            issue_url=f"{self.url}/repos/{repo.full_name}/issues/{issue['number']}",
            head=side(pull["head"]),
            base=side(pull["base"]),
        )

    def _workflow_json(self, repo: RepoState, file_name: str) -> dict:
        workflow_id = repo.workflows[file_name]
        return spec.example(
            "workflow",
            id=workflow_id,
            name=file_name,
            path=f".github/workflows/{file_name}",
            state="active",
            url=f"{self.url}/repos/{repo.full_name}/actions/workflows/{workflow_id}",
        )

    def _run_json(self, run: dict) -> dict:
        repo = self.repos[run["repo"]]
        api = f"{self.url}/repos/{repo.full_name}/actions/runs/{run['id']}"
        return spec.example(
            "workflow-run",
            id=run["id"],
            name=run["workflow_file"],
            display_title=run["title"],
            head_branch=run["ref"],
            head_sha=run["sha"] or "0" * 40,
            path=f".github/workflows/{run['workflow_file']}",
            event=run["event"],
            actor=self._user(run["actor"]),
            triggering_actor=self._user(run["actor"]),
            status=run["status"],
            conclusion=run["conclusion"],
            workflow_id=repo.workflows[run["workflow_file"]],
            url=api,
            artifacts_url=f"{api}/artifacts",
            workflow_url=f"{self.url}/repos/{repo.full_name}/actions/workflows/{repo.workflows[run['workflow_file']]}",
            created_at=run["created_at"],
            updated_at=run["updated_at"],
            repository=self._repo_json(repo, "minimal-repository"),
            head_repository=self._head_repository_json(repo, run.get("head_repository")),
        )

    def _head_repository_json(self, repo: RepoState, fork: str | None) -> dict:
        shape = self._repo_json(repo, "minimal-repository")
        if fork:  # a fork's run: the commit comes from another repository
            owner, _, name = fork.partition("/")
            shape.update(full_name=fork, name=name, owner=self._user(owner), fork=True, id=repo.id + 1)
        return shape

    def _artifact_json(self, repo: RepoState, artifact: dict) -> dict:
        api = f"{self.url}/repos/{repo.full_name}/actions/artifacts/{artifact['id']}"
        return spec.example(
            "artifact",
            id=artifact["id"],
            name=artifact["name"],
            size_in_bytes=len(artifact["zip"]),
            url=api,
            archive_download_url=f"{api}/zip",
            expired=False,
        )


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, *args, **kwargs) -> None:
        pass


def _blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _json(data, status: int = 200, headers: dict | None = None) -> Response:
    return Response(json.dumps(data), status=status, headers=headers or {}, content_type=JSON)


def _error(status: int, message: str, headers: dict | None = None) -> Response:
    body = {"message": message, "documentation_url": "https://docs.github.com/rest", "status": str(status)}
    return _json(body, status, headers)


def build_app(standin: StandIn) -> Flask:  # noqa: C901 - one route table, read top to bottom
    app = Flask("github-standin")

    def repo_or_404(owner: str, name: str) -> RepoState:
        repo = standin.repos.get(f"{owner}/{name}")
        if repo is None:
            raise _Abort(_error(404, "Not Found"))
        return repo

    def issue_or_404(repo: RepoState, number: int) -> dict:
        issue = standin.issues[repo.full_name].get(number)
        if issue is None:
            raise _Abort(_error(404, "Not Found"))
        return issue

    def body() -> dict:
        return request.get_json(silent=True) or {}

    def bot_login() -> str:
        return f"{standin.app_slug}[bot]"

    def not_the_api() -> bool:
        """The blob store and github.com's file links: outside the REST description, as on GitHub."""
        return request.path.startswith("/_blobs/") or WEB_FILE.match(request.path) is not None

    # -- the checks around every request ------------------------------------------------------------------------

    @app.before_request
    def check_request():
        if not_the_api():
            return None
        errors = spec.request_errors(request)
        if errors:
            standin.violations.append(f"{request.method} {request.full_path}: " + "; ".join(errors))
            return _error(
                422, "stand-in: request does not match GitHub's REST description: " + "; ".join(errors)[:2000]
            )
        denied = check_auth()
        if denied is not None:
            return denied
        fault = take_fault(after=False)
        if fault is not None:
            return _json(fault.body, fault.status, fault.headers)
        return None

    def check_auth() -> Response | None:
        scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
        if request.path.startswith("/app/") or request.path.endswith("/installation"):
            if scheme.lower() != "bearer":
                return _error(401, "A JSON web token could not be decoded")
            try:
                claims = jwt.decode(
                    credential, standin.public_key_pem, algorithms=["RS256"], options={"require": ["iat", "exp", "iss"]}
                )
            except jwt.PyJWTError as error:
                return _error(401, f"A JSON web token could not be decoded: {error}")
            if str(claims["iss"]) != str(standin.app_id) or claims["exp"] - claims["iat"] > 660:
                return _error(401, "'Issuer' claim ('iss') must be the App id; expiration at most ten minutes")
            return None
        if scheme.lower() not in ("token", "bearer") or not standin.token_valid(credential):
            return _error(401, "Bad credentials")
        return None

    def take_fault(after: bool) -> Fault | None:
        with standin._lock:
            for fault in standin.faults:
                if fault.after == after and fault.method == request.method and fault.path.search(request.path):
                    fault.times -= 1
                    if fault.times <= 0:
                        standin.faults.remove(fault)
                    return fault
        return None

    @app.after_request
    def check_response(response: Response) -> Response:
        if not not_the_api() and response.status_code < 400:
            errors = spec.response_errors(request, response)
            if errors:
                standin.violations.append(f"answer to {request.method} {request.path}: " + "; ".join(errors))
                response = _error(500, "stand-in: its own answer does not match GitHub's REST description")
            else:
                fault = take_fault(after=True)
                if fault is not None:
                    response = _json(fault.body, fault.status, fault.headers)
        standin.log.append((request.method, request.path, response.status_code))
        return response

    @app.errorhandler(_Abort)
    def aborted(abort: _Abort) -> Response:
        return abort.response

    # -- App authentication ----------------------------------------------------------------------------------------

    @app.post("/app/installations/<int:installation_id>/access_tokens")
    def access_token(installation_id: int):
        if installation_id != standin.installation_id:
            return _error(404, "Not Found")
        token = "ghs_" + secrets.token_urlsafe(27).replace("-", "a").replace("_", "b")[:36]
        expires = time.time() + standin.token_ttl
        standin.tokens[token] = expires
        expires_at = datetime.fromtimestamp(expires, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        grant = spec.example("installation-token", token=token, expires_at=expires_at, repository_selection="all")
        grant["permissions"] = {"issues": "write", "pull_requests": "write", "contents": "write", "actions": "write"}
        return _json(grant, 201)

    @app.get("/repos/<owner>/<name>/installation")
    def repo_installation(owner: str, name: str):
        repo_or_404(owner, name)
        account = standin._user(owner)
        api = f"{standin.url}/app/installations/{standin.installation_id}"
        return _json(
            spec.example(
                "installation",
                id=standin.installation_id,
                account=account,
                app_id=standin.app_id,
                app_slug=standin.app_slug,
                access_tokens_url=f"{api}/access_tokens",
            )
        )

    # -- repositories, refs, contents, permissions ------------------------------------------------------------------

    @app.get("/repos/<owner>/<name>")
    def get_repo(owner: str, name: str):
        return _json(standin._repo_json(repo_or_404(owner, name)))

    @app.get("/repos/<owner>/<name>/git/ref/<path:ref>")
    def get_ref(owner: str, name: str, ref: str):
        repo = repo_or_404(owner, name)
        sha = repo.ref_sha(ref)
        if sha is None:
            return _error(404, "Not Found")
        api = f"{standin.url}/repos/{repo.full_name}/git/refs/{ref}"
        shape = spec.example("git-ref", ref=f"refs/{ref}", url=api)
        shape["object"] = {
            "type": "commit",
            "sha": sha,
            "url": f"{standin.url}/repos/{repo.full_name}/git/commits/{sha}",
        }
        return _json(shape)

    @app.get("/repos/<owner>/<name>/contents/<path:path>")
    def get_content(owner: str, name: str, path: str):
        repo = repo_or_404(owner, name)
        ref = request.args.get("ref", repo.default_branch)
        data = repo.file(path, ref)
        if data is None:
            return _error(404, "Not Found")
        api = f"{standin.url}/repos/{repo.full_name}/contents/{path}?ref={ref}"
        blob_sha = _blob_sha(data)
        links = {"self": api, "git": None, "html": None}
        return _json(
            spec.example(
                "content-file",
                type="file",
                encoding="base64",
                size=len(data),
                name=path.rsplit("/", 1)[-1],
                path=path,
                content=base64.b64encode(data).decode(),
                sha=blob_sha,
                url=api,
                _links=links,
            )
        )

    @app.post("/repos/<owner>/<name>/git/refs")
    def create_ref(owner: str, name: str):
        repo = repo_or_404(owner, name)
        data = body()
        ref = data["ref"]
        if not ref.startswith("refs/") or ref.count("/") < 2:
            return _error(422, f"{ref} is not a valid ref name.")
        if repo.ref_sha(ref.removeprefix("refs/")) is not None:
            return _error(422, "Reference already exists")
        if repo.git("update-ref", ref, data["sha"], "0" * 40).returncode != 0:
            return _error(422, "Object does not exist")
        api = f"{standin.url}/repos/{repo.full_name}/git/{ref}"
        shape = spec.example("git-ref", ref=ref, url=api)
        shape["object"] = {"type": "commit", "sha": data["sha"], "url": f"{api}/commits/{data['sha']}"}
        return _json(shape, 201, {"Location": api})

    @app.post("/repos/<owner>/<name>/git/trees")
    def create_tree(owner: str, name: str):
        """Inline-content blobs at the top level, no base_tree: what starting an orphan branch needs."""
        repo = repo_or_404(owner, name)
        data = body()
        entries = data["tree"]
        if data.get("base_tree") or any(
            "content" not in e or e.get("type") != "blob" or "/" in e["path"] for e in entries
        ):
            return _error(422, "the stand-in makes top-level trees of inline blobs only")
        tree = repo.write_tree({e["path"]: e["content"].encode() for e in entries})
        api = f"{standin.url}/repos/{repo.full_name}/git"
        listed = [
            {"path": e["path"], "mode": e["mode"], "type": "blob", "sha": _blob_sha(e["content"].encode())}
            for e in entries
        ]
        return _json({"sha": tree, "url": f"{api}/trees/{tree}", "tree": listed, "truncated": False}, 201)

    @app.post("/repos/<owner>/<name>/git/commits")
    def create_commit(owner: str, name: str):
        repo = repo_or_404(owner, name)
        data = body()
        if repo.git("cat-file", "-e", f"{data['tree']}^{{tree}}").returncode != 0:
            return _error(422, "Tree SHA does not exist")
        commit = repo.commit_tree(data["tree"], data.get("parents", []), data["message"], bot_login())
        api = f"{standin.url}/repos/{repo.full_name}/git"
        who = {"name": bot_login(), "email": f"{bot_login()}@users.noreply.github.com", "date": _now()}
        answer = spec.example(
            "git-commit",
            sha=commit,
            url=f"{api}/commits/{commit}",
            html_url=f"{standin.url}/{repo.full_name}/commit/{commit}",
            author=who,
            committer=who,
            message=data["message"],
            tree={"sha": data["tree"], "url": f"{api}/trees/{data['tree']}"},
        )
        answer["parents"] = [
            {"sha": sha, "url": f"{api}/commits/{sha}", "html_url": f"{standin.url}/{repo.full_name}/commit/{sha}"}
            for sha in data.get("parents", [])
        ]
        return _json(answer, 201)

    @app.put("/repos/<owner>/<name>/contents/<path:path>")
    def put_content(owner: str, name: str, path: str):
        repo = repo_or_404(owner, name)
        data = body()
        branch = data.get("branch") or repo.default_branch
        if repo.ref_sha(f"heads/{branch}") is None:
            return _error(404, f"Branch {branch} not found")
        content = base64.b64decode(data["content"], validate=True)
        with standin._lock:
            old = repo.file(path, f"refs/heads/{branch}")
            if old is not None and data.get("sha") != _blob_sha(old):
                missing = 'Invalid request.\n\n"sha" wasn\'t supplied.'
                return _error(422, missing) if "sha" not in data else _error(409, f"{path} does not match")
            commit = repo.commit_file(branch, path, content, data["message"], bot_login())
        api = f"{standin.url}/repos/{repo.full_name}"
        blob = _blob_sha(content)
        file = {"name": path.rsplit("/", 1)[-1], "path": path, "sha": blob, "size": len(content), "type": "file"}
        file |= {
            "url": f"{api}/contents/{path}?ref={branch}",
            "html_url": f"{standin.url}/{repo.full_name}/blob/{branch}/{path}",
        }
        answer = {
            "content": file,
            "commit": {"sha": commit, "url": f"{api}/git/commits/{commit}", "message": data["message"]},
        }
        return _json(answer, 200 if old is not None else 201)

    @app.get("/<owner>/<name>/blob/<sha>/<path:path>")
    def web_file(owner: str, name: str, sha: str, path: str):
        """github.com's link to a file at a commit; `?raw=true` answers the bytes (GitHub redirects to them)."""
        repo = repo_or_404(owner, name)
        data = repo.file(path, sha)
        if data is None or request.args.get("raw") != "true":
            return Response("Not Found", status=404)
        return Response(data, content_type=mimetypes.guess_type(path)[0] or "application/octet-stream")

    @app.get("/repos/<owner>/<name>/collaborators/<username>/permission")
    def collaborator_permission(owner: str, name: str, username: str):
        repo = repo_or_404(owner, name)
        role = repo.collaborators.get(username, "read")  # a public repository: everyone may read
        legacy = {"maintain": "write", "triage": "read"}.get(role, role)
        user = spec.merge(
            standin._user(username),
            {
                "permissions": {"pull": True, "push": role in ("admin", "maintain", "write"), "admin": role == "admin"},
                "role_name": role,
            },
        )
        return _json(spec.example("repository-collaborator-permission", permission=legacy, role_name=role, user=user))

    # -- issues and comments ------------------------------------------------------------------------------------------

    @app.get("/repos/<owner>/<name>/issues")
    def list_issues(owner: str, name: str):
        repo = repo_or_404(owner, name)
        state = request.args.get("state", "open")
        found = [i for i in standin.issues[repo.full_name].values() if state == "all" or i["state"] == state]
        return _json([standin._issue_json(repo, i) for i in sorted(found, key=lambda i: -i["number"])])

    @app.post("/repos/<owner>/<name>/issues")
    def create_issue(owner: str, name: str):
        repo = repo_or_404(owner, name)
        issue = standin._new_issue(repo, body()["title"], body().get("body"), bot_login())
        return _json(standin._issue_json(repo, issue), 201)

    @app.get("/repos/<owner>/<name>/issues/<int:number>")
    def get_issue(owner: str, name: str, number: int):
        repo = repo_or_404(owner, name)
        return _json(standin._issue_json(repo, issue_or_404(repo, number)))

    @app.patch("/repos/<owner>/<name>/issues/<int:number>")
    def update_issue(owner: str, name: str, number: int):
        repo = repo_or_404(owner, name)
        issue = issue_or_404(repo, number)
        issue.update({k: v for k, v in body().items() if k in ("title", "body", "state")})
        return _json(standin._issue_json(repo, issue))

    @app.post("/repos/<owner>/<name>/issues/<int:number>/labels")
    def add_labels(owner: str, name: str, number: int):
        repo = repo_or_404(owner, name)
        issue = issue_or_404(repo, number)
        given = body().get("labels") or []
        names = [label if isinstance(label, str) else label["name"] for label in given]
        issue["labels"] = list(dict.fromkeys([*issue.get("labels", []), *names]))  # a new name makes a new label
        return _json([standin._label_json(repo, label) for label in issue["labels"]])

    @app.get("/repos/<owner>/<name>/issues/<int:number>/comments")
    def list_comments(owner: str, name: str, number: int):
        repo = repo_or_404(owner, name)
        issue_or_404(repo, number)
        found = [c for c in standin.comments.values() if c["repo"] == repo.full_name and c["issue"] == number]
        return _json([standin._comment_json(c) for c in found])

    @app.post("/repos/<owner>/<name>/issues/<int:number>/comments")
    def create_comment(owner: str, name: str, number: int):
        repo = repo_or_404(owner, name)
        issue_or_404(repo, number)
        return _json(standin._comment_json(standin._new_comment(repo, number, body()["body"], bot_login())), 201)

    def comment_or_404(repo: RepoState, comment_id: int) -> dict:
        comment = standin.comments.get(comment_id)
        if comment is None or comment["repo"] != repo.full_name:
            raise _Abort(_error(404, "Not Found"))
        return comment

    @app.get("/repos/<owner>/<name>/issues/comments/<int:comment_id>")
    def get_comment(owner: str, name: str, comment_id: int):
        return _json(standin._comment_json(comment_or_404(repo_or_404(owner, name), comment_id)))

    @app.patch("/repos/<owner>/<name>/issues/comments/<int:comment_id>")
    def update_comment(owner: str, name: str, comment_id: int):
        comment = comment_or_404(repo_or_404(owner, name), comment_id)
        comment.update(body=body()["body"], updated_at=_now())
        return _json(standin._comment_json(comment))

    def react(kind: str, comment_id: int):
        content = body()["content"]
        mine = [r for r in standin.reactions if (r["kind"], r["comment"], r["content"]) == (kind, comment_id, content)]
        status = 200 if mine else 201
        if not mine:
            standin.reactions.append(
                {"id": next(standin._ids), "kind": kind, "comment": comment_id, "content": content, "user": bot_login()}
            )
            mine = standin.reactions[-1:]
        return _json(
            spec.example(
                "reaction", id=mine[0]["id"], content=content, user=standin._user(bot_login()), created_at=_now()
            ),
            status,
        )

    @app.post("/repos/<owner>/<name>/issues/comments/<int:comment_id>/reactions")
    def react_issue_comment(owner: str, name: str, comment_id: int):
        comment_or_404(repo_or_404(owner, name), comment_id)
        return react("issue_comment", comment_id)

    @app.post("/repos/<owner>/<name>/pulls/comments/<int:comment_id>/reactions")
    def react_review_comment(owner: str, name: str, comment_id: int):
        repo_or_404(owner, name)
        if comment_id not in standin.review_comments:
            return _error(404, "Not Found")
        return react("review_comment", comment_id)

    # -- pull requests ---------------------------------------------------------------------------------------------

    @app.get("/repos/<owner>/<name>/pulls")
    def list_pulls(owner: str, name: str):
        repo = repo_or_404(owner, name)
        state = request.args.get("state", "open")
        head = request.args.get("head")
        found = [i for i in standin.pulls(repo.full_name) if state == "all" or i["state"] == state]
        if head:
            head_owner, _, head_ref = head.partition(":")
            found = [i for i in found if head_owner == repo.owner and i["pull"]["head"] == head_ref]
        return _json([standin._pull_json(repo, i, "pull-request-simple") for i in found])

    @app.post("/repos/<owner>/<name>/pulls")
    def create_pull(owner: str, name: str):
        repo = repo_or_404(owner, name)
        data = body()
        head, base = data["head"].rpartition(":")[2], data["base"]
        for ref in (head, base):
            if repo.ref_sha(f"heads/{ref}") is None:
                return _json(
                    {
                        "message": "Validation Failed",
                        "errors": [
                            {"resource": "PullRequest", "field": "head" if ref == head else "base", "code": "invalid"}
                        ],
                    },
                    422,
                )
        if any(
            i["pull"]["head"] == head and i["pull"]["base"] == base and i["state"] == "open"
            for i in standin.pulls(repo.full_name)
        ):
            return _json(
                {
                    "message": "Validation Failed",
                    "errors": [
                        {
                            "resource": "PullRequest",
                            "code": "custom",
                            "message": f"A pull request already exists for {repo.owner}:{head}.",
                        }
                    ],
                },
                422,
            )
        issue = standin._new_issue(
            repo,
            data["title"],
            data.get("body"),
            bot_login(),
            pull={"head": head, "base": base, "draft": bool(data.get("draft"))},
        )
        return _json(standin._pull_json(repo, issue), 201)

    @app.get("/repos/<owner>/<name>/pulls/<int:number>")
    def get_pull(owner: str, name: str, number: int):
        repo = repo_or_404(owner, name)
        issue = issue_or_404(repo, number)
        if "pull" not in issue:
            return _error(404, "Not Found")
        return _json(standin._pull_json(repo, issue))

    @app.patch("/repos/<owner>/<name>/pulls/<int:number>")
    def update_pull(owner: str, name: str, number: int):
        repo = repo_or_404(owner, name)
        issue = issue_or_404(repo, number)
        if "pull" not in issue:
            return _error(404, "Not Found")
        issue.update({k: v for k, v in body().items() if k in ("title", "body", "state")})
        return _json(standin._pull_json(repo, issue))

    # -- Actions -------------------------------------------------------------------------------------------------------

    def workflow_or_404(repo: RepoState, workflow: str) -> str:
        for file_name, workflow_id in repo.workflows.items():
            if workflow in (file_name, str(workflow_id)):
                return file_name
        raise _Abort(_error(404, "Not Found"))

    @app.get("/repos/<owner>/<name>/actions/workflows/<workflow>")
    def get_workflow(owner: str, name: str, workflow: str):
        repo = repo_or_404(owner, name)
        return _json(standin._workflow_json(repo, workflow_or_404(repo, workflow)))

    @app.post("/repos/<owner>/<name>/actions/workflows/<workflow>/dispatches")
    def dispatch(owner: str, name: str, workflow: str):
        repo = repo_or_404(owner, name)
        file_name = workflow_or_404(repo, workflow)
        data = body()
        ref = data["ref"].removeprefix("refs/heads/")
        definition = standin._workflow_definition(repo, file_name, ref)
        if repo.ref_sha(f"heads/{ref}") is None or definition is None:
            return _error(422, f"No ref found for: {data['ref']}")
        trigger = (definition.get("on") or {}).get("workflow_dispatch")
        if not isinstance(definition.get("on"), dict) or "workflow_dispatch" not in definition["on"]:
            return _error(422, "Workflow does not have 'workflow_dispatch' trigger")
        declared = (trigger or {}).get("inputs") or {}
        inputs = data.get("inputs") or {}
        unexpected = sorted(set(inputs) - set(declared))
        if unexpected:
            return _error(422, f"Unexpected inputs provided: {unexpected}")
        missing = sorted(k for k, v in declared.items() if v.get("required") and "default" not in v and k not in inputs)
        if missing:
            return _error(422, f"Required input '{missing[0]}' not provided")
        filled = {k: str(inputs.get(k, v.get("default", ""))) for k, v in declared.items()}
        run = standin._new_run(repo, file_name, ref, filled, actor=bot_login())
        if data.get("return_run_details"):
            api = f"{standin.url}/repos/{repo.full_name}/actions/runs/{run['id']}"
            return _json(
                {
                    "workflow_run_id": run["id"],
                    "run_url": api,
                    "html_url": f"https://github.com/{repo.full_name}/actions/runs/{run['id']}",
                }
            )
        return Response(status=204)

    @app.get("/repos/<owner>/<name>/actions/workflows/<workflow>/runs")
    def list_runs(owner: str, name: str, workflow: str):
        repo = repo_or_404(owner, name)
        file_name = workflow_or_404(repo, workflow)
        found = [r for r in standin.runs.values() if r["repo"] == repo.full_name and r["workflow_file"] == file_name]
        if request.args.get("branch"):
            found = [r for r in found if r["ref"] == request.args["branch"]]
        if request.args.get("status"):
            found = [r for r in found if request.args["status"] in (r["status"], r["conclusion"])]
        if request.args.get("event"):
            found = [r for r in found if r["event"] == request.args["event"]]
        runs = [standin._run_json(r) for r in sorted(found, key=lambda r: -r["id"])]
        return _json({"total_count": len(runs), "workflow_runs": runs})

    @app.get("/repos/<owner>/<name>/actions/runs/<int:run_id>")
    def get_run(owner: str, name: str, run_id: int):
        repo_or_404(owner, name)
        if run_id not in standin.runs:
            return _error(404, "Not Found")
        return _json(standin._run_json(standin.runs[run_id]))

    @app.get("/repos/<owner>/<name>/actions/runs/<int:run_id>/artifacts")
    def list_artifacts(owner: str, name: str, run_id: int):
        repo = repo_or_404(owner, name)
        found = [a for a in standin.artifacts.values() if a["run"] == run_id]
        if request.args.get("name"):
            found = [a for a in found if a["name"] == request.args["name"]]
        return _json({"total_count": len(found), "artifacts": [standin._artifact_json(repo, a) for a in found]})

    @app.get("/repos/<owner>/<name>/actions/artifacts/<int:artifact_id>/<archive_format>")
    def download_artifact(owner: str, name: str, artifact_id: int, archive_format: str):
        repo_or_404(owner, name)
        if artifact_id not in standin.artifacts:
            return _error(404, "Not Found")
        # GitHub answers with a short-lived link to its blob store; so does the stand-in
        return Response(status=302, headers={"Location": f"{standin.url}/_blobs/artifacts/{artifact_id}.zip"})

    @app.get("/_blobs/artifacts/<int:artifact_id>.zip")
    def artifact_blob(artifact_id: int):
        return Response(standin.artifacts[artifact_id]["zip"], content_type="application/zip")

    return app


class _Abort(Exception):
    def __init__(self, response: Response):
        super().__init__(response.status)
        self.response = response
