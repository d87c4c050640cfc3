"""The production HTTP server for `liger-bot serve`: waitress, with limits a hostile client cannot get around.

waitress reads requests on one event loop (poll) and hands a worker thread only a request it has read whole, so
a slow client holds a socket and a buffer, never a thread: 150 clients sending a byte a second do not slow the
deliveries beside them. On top of waitress's own limits this adds a deadline for reading one request
(`read_timeout`): waitress's `channel_timeout` closes only connections that send nothing, and a byte a second is
not nothing.

Limits: `connection_limit` open connections (waitress stops accepting above it; the kernel's backlog holds the
rest), `max_body` bytes of body (413 as soon as Content-Length says more, or as soon as a chunked body grows past
it, before the rest is read), `max_header` bytes of headers (431), `read_timeout` seconds to send one request,
`idle_timeout` seconds of silence on a kept-alive connection.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass

from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerLimits:
    threads: int = 16  # requests handled at once; each waits on the group commit, so this bounds a commit's batch
    connection_limit: int = 1000
    max_body: int = 25 * 1024 * 1024  # GitHub caps webhook payloads at 25 MB
    max_header: int = 64 * 1024
    read_timeout: float = 10.0  # seconds to send one whole request, headers and body
    idle_timeout: int = 30  # seconds a kept-alive connection may stay silent


class _DeadlineChannel(HTTPChannel):
    """A connection that remembers when the request it is reading began."""

    reading_since: float | None = None

    def received(self, data) -> bool:
        if data and self.request is None:
            self.reading_since = time.monotonic()
        try:
            return super().received(data)
        finally:
            if self.request is None:  # the request was read whole (or there was none)
                self.reading_since = None


class _DeadlineServer(TcpWSGIServer):
    channel_class = _DeadlineChannel
    read_timeout = ServerLimits.read_timeout

    def maintenance(self, now) -> None:
        super().maintenance(now)
        cutoff = time.monotonic() - self.read_timeout
        for channel in list(self.active_channels.values()):
            since = getattr(channel, "reading_since", None)
            if since is not None and since < cutoff:
                log.info("closing a connection from %s: no whole request in %.0fs", channel.addr, self.read_timeout)
                channel.will_close = True


def make_server(app, host: str, port: int, limits: ServerLimits | None = None) -> _DeadlineServer:
    """A bound, not yet running server (`.run()` serves; `.effective_port` is the port, when `port` is 0)."""
    limits = limits or ServerLimits()
    dispatcher = ThreadedTaskDispatcher()
    dispatcher.set_thread_count(limits.threads)
    server = _DeadlineServer(
        app,
        dispatcher=dispatcher,
        host=host,
        port=port,
        threads=limits.threads,
        connection_limit=limits.connection_limit,
        max_request_body_size=limits.max_body,
        max_request_header_size=limits.max_header,
        channel_timeout=limits.idle_timeout,
        cleanup_interval=1,  # how often deadlines are checked (seconds)
        backlog=2048,
        asyncore_use_poll=True,  # select() stops at 1024 descriptors
        ident="liger-bot",
        expose_tracebacks=False,
        clear_untrusted_proxy_headers=True,
    )
    server.read_timeout = limits.read_timeout
    return server


def serve_until_stopped(server: _DeadlineServer) -> None:
    """Serve until SIGINT or SIGTERM (how a process manager stops it), then close the listening socket."""

    def stop(_signum, _frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.close()


def shutdown(server: _DeadlineServer, timeout: float = 5.0) -> None:
    """Stop a server that `run()`s in another thread: everything is closed from inside its own loop."""
    closed = threading.Event()

    def close_all() -> None:
        for dispatcher in list(server._map.values()):  # the listener, every connection, and last the trigger
            if dispatcher is not server.trigger:
                dispatcher.close()
        server.trigger.close()
        closed.set()

    try:
        server.trigger.pull_trigger(close_all)
    except OSError:  # the trigger is gone, so its loop is too (a poll error closes it): close the rest from here
        close_all()
    closed.wait(timeout)
    server.task_dispatcher.shutdown(timeout=timeout)
