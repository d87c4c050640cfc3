"""`liger-bot serve`'s production server (bot/server.py, waitress) against hostile clients, and webhook bodies of the
wrong shape. Small and fast: the load figures (500 concurrent deliveries, 150 slow clients, SIGKILL mid-burst) are
measured by benchmarks/webhook_latency.py, outside CI."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from bot.app import create_app
from bot.server import ServerLimits
from bot.server import make_server
from bot.server import shutdown
from bot.webhook import signature
from tests.bot.app_fixtures import SECRET
from tests.bot.app_fixtures import comment_payload

LIMITS = ServerLimits(threads=2, connection_limit=100, max_body=1024 * 1024, read_timeout=2.0, idle_timeout=5)


@pytest.fixture
def strict(app):
    """The App's server with small limits: 2 threads, 1 MiB bodies, 2 s to send a request."""
    httpd = make_server(create_app(app.runtime), "127.0.0.1", 0, LIMITS)
    thread = threading.Thread(target=httpd.run, daemon=True)
    thread.start()
    yield httpd.effective_port
    shutdown(httpd)


def request_head(path: str, body_length: int | None, event: str = "issue_comment", extra: str = "") -> bytes:
    length = f"Content-Length: {body_length}\r\n" if body_length is not None else "Transfer-Encoding: chunked\r\n"
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-GitHub-Event: {event}\r\n"
        f"X-GitHub-Delivery: d-{time.monotonic_ns()}\r\n{extra}{length}\r\n"
    ).encode()


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def read_answer(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    try:
        return sock.recv(65536)
    except (ConnectionResetError, TimeoutError):
        return b""


def signed_post(port: int, path: str, body: bytes, event: str = "issue_comment") -> int:
    head = request_head(path, len(body), event, f"X-Hub-Signature-256: {signature(SECRET, body)}\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head + body)
        return status_of(read_answer(sock))


def test_a_body_over_the_limit_is_refused_before_it_is_sent(strict, app):
    path = app.runtime.config.webhook_path
    with socket.create_connection(("127.0.0.1", strict), timeout=10) as sock:
        sock.sendall(request_head(path, 30 * 1024 * 1024))  # says 30 MiB, sends none of it
        assert status_of(read_answer(sock)) == 413
    with socket.create_connection(("127.0.0.1", strict), timeout=10) as sock:  # chunked: no length to go by
        sock.sendall(request_head(path, None))
        chunk = b"%x\r\n%s\r\n" % (64 * 1024, b"x" * 64 * 1024)
        sent = 0
        try:
            while sent < 8 * 1024 * 1024:
                sock.sendall(chunk)
                sent += 64 * 1024
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = read_answer(sock)
        assert status_of(answer) == 413 or answer == b""  # refused while streaming, the rest never read
        assert sent < 8 * 1024 * 1024
    assert app.runtime.queue.pending() == 0


def test_a_client_that_sends_a_byte_at_a_time_is_cut_off_at_the_read_deadline(strict, app):
    slow = socket.create_connection(("127.0.0.1", strict), timeout=10)
    head = request_head(app.runtime.config.webhook_path, 100)
    started, cut = time.monotonic(), False
    try:
        for byte in head + b"{" * 100:
            slow.sendall(bytes([byte]))
            time.sleep(0.1)
            if time.monotonic() - started > 8:
                break
    except (BrokenPipeError, ConnectionResetError):
        cut = True
    elapsed = time.monotonic() - started
    if not cut:
        cut = read_answer(slow) == b""
    slow.close()
    assert cut and elapsed < 6, f"a slow client kept its connection {elapsed:.1f}s (deadline 2s)"


def test_slow_clients_hold_no_thread_signed_deliveries_still_ack(strict, app):
    path = app.runtime.config.webhook_path
    slow = []
    for _ in range(20):  # ten times the server's two threads, each holding an unfinished request
        sock = socket.create_connection(("127.0.0.1", strict), timeout=10)
        sock.sendall(request_head(path, 1000)[:-10])
        slow.append(sock)
    try:
        started = time.monotonic()
        body = json.dumps(comment_payload("/liger help")).encode()
        assert signed_post(strict, path, body) == 202
        assert time.monotonic() - started < 1.0
    finally:
        for sock in slow:
            sock.close()


@pytest.mark.parametrize(
    ("event", "body"),
    [
        ("ping", b"[]"),  # a signed ping whose body is a list: 500 on werkzeug's server before
        ("ping", b'"zen"'),
        ("issue_comment", b'{"action": ["created"]}'),
        ("issue_comment", b"[" * 100_000 + b"]" * 100_000),  # deeper than Python recurses
        ("issue_comment", b'{"action": "created", "n": ' + b"9" * 5000 + b"}"),  # past int's digit limit
        ("issue_comment", b"\xff\xfe not utf-8"),
    ],
    ids=["ping-list", "ping-string", "action-list", "deep", "huge-number", "not-utf8"],
)
def test_a_signed_body_of_the_wrong_shape_is_400_never_500(server, app, event, body):
    answer = server.deliver(event, body)
    assert answer.status_code == 400, answer.text
    assert app.runtime.queue.pending() == 0


def test_shutdown_closes_the_listener_even_when_the_loop_lost_its_trigger(app):
    """A trigger already closed under the loop (EBADF on the pull) must not leave the listening socket open."""
    httpd = make_server(create_app(app.runtime), "127.0.0.1", 0, LIMITS)
    port = httpd.effective_port
    httpd.trigger.close()  # as the loop does when poll reports the trigger's descriptor invalid
    shutdown(httpd, timeout=1.0)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
