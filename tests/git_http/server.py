"""Bare git repositories served over smart HTTP by `git http-backend`, on 127.0.0.1, behind basic auth.

A small WSGI-to-CGI bridge under werkzeug's threaded server: the request body is read with werkzeug's
`get_input_stream` (git sends pushes chunked, with no Content-Length; `environ["wsgi.input"]` would hang).
`authenticate(username, password)` decides every request, so the GitHub stand-in can accept exactly the
installation tokens it issued.
"""

from __future__ import annotations

import base64
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from werkzeug.serving import WSGIRequestHandler
from werkzeug.serving import make_server
from werkzeug.wsgi import get_input_stream

HTTP_BACKEND = (
    Path(subprocess.run(["git", "--exec-path"], capture_output=True, text=True, check=True).stdout.strip())
    / "git-http-backend"
)


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, *args, **kwargs) -> None:
        pass


class GitHttpServer:
    def __init__(self, root: Path, authenticate: Callable[[str, str], bool]):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.authenticate = authenticate
        self.log: list[tuple[str, str, int, str]] = []  # (method, path, status, user) per request
        self._server = make_server("127.0.0.1", 0, self.wsgi, threaded=True, request_handler=_QuietHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def repo_url(self, owner: str, name: str) -> str:
        return f"{self.url}/{owner}/{name}.git"

    def bare_path(self, owner: str, name: str) -> Path:
        return self.root / owner / f"{name}.git"

    def create_bare(self, owner: str, name: str, seed: Path | None = None, default_branch: str = "main") -> Path:
        """A bare repository, optionally seeded with every branch of the checkout `seed`."""
        path = self.bare_path(owner, name)
        subprocess.run(["git", "init", "-q", "--bare", "-b", default_branch, str(path)], check=True)
        if seed is not None:
            subprocess.run(["git", "-C", str(seed), "push", "-q", str(path), "refs/heads/*:refs/heads/*"], check=True)
        return path

    def start(self) -> GitHttpServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- WSGI ------------------------------------------------------------------------------------------------------

    def wsgi(self, environ, start_response):
        user = self._user(environ.get("HTTP_AUTHORIZATION", ""))
        path = environ.get("PATH_INFO", "")
        if user is None:
            self.log.append((environ["REQUEST_METHOD"], path, 401, ""))
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="git"'), ("Content-Length", "0")])
            return [b""]
        body = get_input_stream(environ).read()
        status, headers, payload = self._backend(environ, user, body)
        self.log.append((environ["REQUEST_METHOD"], path, int(status.split()[0]), user))
        start_response(status, headers)
        return [payload]

    def _user(self, authorization: str) -> str | None:
        scheme, _, encoded = authorization.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            username, _, password = base64.b64decode(encoded).decode().partition(":")
        except ValueError:
            return None
        return username if self.authenticate(username, password) else None

    def _backend(self, environ, user: str, body: bytes) -> tuple[str, list[tuple[str, str]], bytes]:
        cgi_env = {
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": user,  # http-backend enables receive-pack (push) only for an authenticated user
            "REMOTE_ADDR": environ.get("REMOTE_ADDR", "127.0.0.1"),
            "REQUEST_METHOD": environ["REQUEST_METHOD"],
            "PATH_INFO": environ.get("PATH_INFO", ""),
            "QUERY_STRING": environ.get("QUERY_STRING", ""),
            "CONTENT_TYPE": environ.get("CONTENT_TYPE", ""),
            "CONTENT_LENGTH": str(len(body)),
            "GIT_PROTOCOL": environ.get("HTTP_GIT_PROTOCOL", ""),
            "HTTP_CONTENT_ENCODING": environ.get("HTTP_CONTENT_ENCODING", ""),
            "PATH": "/usr/bin:/bin:/usr/local/bin",
        }
        proc = subprocess.run([str(HTTP_BACKEND)], input=body, capture_output=True, env=cgi_env, timeout=60)
        head, _, payload = proc.stdout.partition(b"\r\n\r\n")
        status = "200 OK"
        headers: list[tuple[str, str]] = []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = value.strip()
            elif name:
                headers.append((name.strip(), value.strip()))
        headers.append(("Content-Length", str(len(payload))))
        return status, headers, payload
