"""Webhook acknowledgement latency and durability of `liger-bot serve` (waitress, bot/server.py) on 127.0.0.1.

    python benchmarks/webhook_latency.py [--scenario all|sequential|burst|slow|kill|floor] [--json]

The server is the real `liger-bot serve`, started as its own process (so it can be SIGKILLed), on a SQLite
database and the SQLite huey queue in a temporary folder, as it runs by default. Each delivery is the published
`issue_comment.created` example with its own comment id, X-GitHub-Delivery and X-Hub-Signature-256. The client is
one asyncio process writing pre-built requests on raw sockets (a thread per client would cost the server the CPU
it is being measured on). Scenarios:

- sequential: N deliveries one after another on one kept-alive connection (p50 / p99 ack).
- burst: N deliveries (default 500) sent at once, each on its own connection: all 2xx? p99 ack?
- slow: 150 clients hold connections sending a byte a second (reconnecting when the read deadline cuts them) while
  deliveries go on 10 at a time: their p99 ack.
- kill: a burst of 2000 on 50 connections; the server is SIGKILLed once 500 are acknowledged; every delivery
  acknowledged with a 2xx must be in the database afterwards (the worker's sweep queues what the queue lost).
- floor (not in `all`): the burst against a stand-in that answers 202 as soon as it has read a request, doing
  nothing else (asyncio, no HMAC, no database): what this client on this host measures with a server that costs
  almost nothing, the bound under any figure of the real server.

Figures are bounded: every client call has a timeout, the script takes about 40 s in all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.webhook import signature  # noqa: E402

SECRET = "benchmark-secret"
PATH = "/api/github/webhooks"
PAYLOAD = json.loads((ROOT / "tests" / "fixtures" / "webhooks" / "issue_comment.created.json").read_text())


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))] if ordered else float("nan")


def delivery(index: int) -> tuple[str, bytes]:
    """(delivery id, the whole HTTP request) of one signed issue_comment delivery."""
    payload = {**PAYLOAD, "comment": {**PAYLOAD["comment"], "id": 10_000 + index, "body": f"/liger autopatch m{index}"}}
    body = json.dumps(payload).encode()
    delivery_id = str(uuid.uuid4())
    head = (
        f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"X-GitHub-Event: issue_comment\r\nX-GitHub-Delivery: {delivery_id}\r\n"
        f"X-Hub-Signature-256: {signature(SECRET, body)}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return delivery_id, head.encode() + body


class Server:
    """`liger-bot serve` in its own process, on a free port, with its files in `folder`."""

    def __init__(self, folder: Path):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.database = folder / "bot.db"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
            "WEBHOOK_SECRET": SECRET,
            "DATABASE_URL": f"sqlite:///{self.database}",
            "QUEUE_PATH": str(folder / "queue.db"),
            "LOG_LEVEL": "warning",
        }
        code = "import sys; from bot.cli import program; import os; sys.exit(int(program(sys.argv[1:], os.environ)))"
        argv = [sys.executable, "-c", code, "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        self.process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the server did not start: " + self.process.stderr.read().decode()[-2000:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def stored_deliveries(self) -> set[str]:
        with sqlite3.connect(self.database) as db:
            tables = [row[0] for row in db.execute("select name from sqlite_master where type='table'")]
            table = next(t for t in tables if "deliver" in t)
            return {row[0] for row in db.execute(f"select id from {table}")}


async def send(port: int, request: bytes, reader_writer=None, timeout: float = 15.0) -> tuple[int, float]:
    """(status, ms from the first byte sent to the answer's status line) of one request on a new connection."""
    started = time.perf_counter()
    try:
        reader, writer = reader_writer or await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
        writer.write(request)
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout)
        status = int(line.split()[1]) if line.startswith(b"HTTP/1.1 ") else 0
        if reader_writer is None:
            writer.close()
        else:
            await _drain_answer(reader)
    except (TimeoutError, OSError, IndexError, ValueError):
        status = 0
    return status, (time.perf_counter() - started) * 1000


async def _drain_answer(reader) -> None:
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)


def summary(results: list[tuple[int, float]]) -> dict:
    timings = [ms for _, ms in results]
    statuses: dict[str, int] = {}
    for status, _ in results:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    return {
        "deliveries": len(results),
        "all_2xx": all(200 <= status < 300 for status, _ in results),
        "statuses": statuses,
        "p50_ms": round(percentile(timings, 50), 2),
        "p99_ms": round(percentile(timings, 99), 2),
        "max_ms": round(max(timings), 2),
    }


async def sequential(port: int, count: int) -> dict:
    reader_writer = await asyncio.open_connection("127.0.0.1", port)
    for index in range(20):  # warm-up: not counted
        await send(port, delivery(-index - 1)[1], reader_writer)
    results = [await send(port, delivery(i)[1], reader_writer) for i in range(count)]
    reader_writer[1].close()
    return summary(results)


async def burst(port: int, count: int) -> dict:
    await sequential(port, 20)  # warm the server up (imports, SQLite, the first connections)
    requests = [delivery(100_000 + i)[1] for i in range(count)]
    results = await asyncio.gather(*(send(port, request) for request in requests))
    return summary(list(results))


async def slow_client(port: int, stop: asyncio.Event, counters: dict) -> None:
    head = f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n".encode()
    while not stop.is_set():
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            counters["connections"] += 1
            for byte in head + b"x" * 100000:
                if stop.is_set():
                    break
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(1.0)
            writer.close()
        except OSError:
            counters["cut"] += 1  # the read deadline closed it: come back, as an attacker would
            await asyncio.sleep(0.1)


async def slow(port: int, count: int, holders: int = 150) -> dict:
    await sequential(port, 20)
    stop, counters = asyncio.Event(), {"connections": 0, "cut": 0}
    clients = [asyncio.create_task(slow_client(port, stop, counters)) for _ in range(holders)]
    await asyncio.sleep(2.0)  # all of them connected and dribbling
    results: list[tuple[int, float]] = []
    requests = [delivery(200_000 + i)[1] for i in range(count)]
    for start in range(0, count, 10):
        results += await asyncio.gather(*(send(port, r) for r in requests[start : start + 10]))
        await asyncio.sleep(0.02)
    stop.set()
    await asyncio.gather(*clients, return_exceptions=True)
    return {**summary(results), "slow_clients": holders, "slow_connections_opened": counters["connections"]}


async def kill(server: Server, count: int = 2000, connections: int = 50, kill_after: int = 500) -> dict:
    await sequential(server.port, 5)
    pending = [delivery(300_000 + i) for i in range(count)]
    acknowledged: list[str] = []
    answered = asyncio.Event()

    async def client(queue: list) -> None:
        while queue:
            delivery_id, request = queue.pop()
            status, _ = await send(server.port, request, timeout=5)
            if 200 <= status < 300:
                acknowledged.append(delivery_id)
                if len(acknowledged) >= kill_after:
                    answered.set()

    tasks = [asyncio.create_task(client(pending)) for _ in range(connections)]
    await asyncio.wait_for(answered.wait(), 60)
    server.process.send_signal(signal.SIGKILL)  # mid-burst: requests are in flight on every connection
    await asyncio.gather(*tasks, return_exceptions=True)
    server.process.wait()
    stored = server.stored_deliveries()
    lost = [d for d in acknowledged if d not in stored]
    return {"acknowledged": len(acknowledged), "stored": len(stored), "acknowledged_but_lost": len(lost)}


STAND_IN = """
import asyncio, sys
ANSWER = b"HTTP/1.1 202 Accepted\\r\\nContent-Type: application/json\\r\\nContent-Length: 2\\r\\n\\r\\n{}"
class Answer(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buffer, self.length = transport, b"", None
    def data_received(self, data):
        self.buffer += data
        while True:
            if self.length is None:
                end = self.buffer.find(b"\\r\\n\\r\\n")
                if end < 0:
                    return
                head, self.buffer = self.buffer[:end].lower(), self.buffer[end + 4:]
                at = head.find(b"content-length:")
                self.length = int(head[at + 15:].split(b"\\r\\n")[0]) if at >= 0 else 0
            if len(self.buffer) < self.length:
                return
            self.buffer, self.length = self.buffer[self.length:], None
            self.transport.write(ANSWER)
async def main():
    server = await asyncio.get_running_loop().create_server(Answer, "127.0.0.1", int(sys.argv[1]), backlog=2048)
    await server.serve_forever()
asyncio.run(main())
"""


def floor(count: int) -> dict:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-c", STAND_IN, str(port)])
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        return {**asyncio.run(burst(port, count)), "server": "stand-in: answers 202 once a request is read"}
    finally:
        process.kill()
        process.wait()


def run(scenario: str, count: int) -> dict:
    if scenario == "floor":
        return floor(count)
    with tempfile.TemporaryDirectory(prefix="liger-bot-bench-") as folder:
        server = Server(Path(folder))
        try:
            if scenario == "sequential":
                return asyncio.run(sequential(server.port, count))
            if scenario == "burst":
                return asyncio.run(burst(server.port, count))
            if scenario == "slow":
                return asyncio.run(slow(server.port, count))
            return asyncio.run(kill(server))
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="all", choices=["all", "sequential", "burst", "slow", "kill", "floor"])
    parser.add_argument("--deliveries", type=int, help="sequential 1000, burst 500, slow 300")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    counts = {"sequential": 1000, "burst": 500, "slow": 300, "kill": 2000, "floor": 500}
    scenarios = [name for name in counts if name != "floor"] if args.scenario == "all" else [args.scenario]
    figures = {name: run(name, args.deliveries or counts[name]) for name in scenarios}
    figures["cpus"] = os.cpu_count()
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for name, result in figures.items():
        print(f"{name}: {result}")


if __name__ == "__main__":
    main()
