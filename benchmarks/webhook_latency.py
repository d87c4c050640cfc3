"""Webhook acknowledgement latency: p50 / p99 over N signed deliveries to the server started on 127.0.0.1.

    python benchmarks/webhook_latency.py [--deliveries 1000] [--json]

The server is the real app (`bot.app.create_app`) under werkzeug's threaded server, on a SQLite database and
the SQLite huey queue in a temporary folder, exactly as `liger-bot serve` runs by default. Each delivery is the
published `issue_comment.created` example with a `/liger autopatch` comment, a fresh X-GitHub-Delivery and its
X-Hub-Signature-256. The forge raises if called: the webhook path must not talk to GitHub.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import requests
from werkzeug.serving import make_server

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.app import create_app  # noqa: E402
from bot.config import AppConfig  # noqa: E402
from bot.jobs import Store  # noqa: E402
from bot.queue import make_queue  # noqa: E402
from bot.runtime import Runtime  # noqa: E402
from bot.webhook import signature  # noqa: E402

SECRET = "benchmark-secret"
PAYLOAD = ROOT / "tests" / "fixtures" / "webhooks" / "issue_comment.created.json"


def no_github(_installation_id):
    raise AssertionError("the webhook path called GitHub")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def measure(deliveries: int, folder: Path) -> dict:
    config = AppConfig(
        webhook_secret=SECRET, database_url=f"sqlite:///{folder / 'bot.db'}", queue_path=str(folder / "queue.db")
    )
    runtime = Runtime(config, Store(config.database_url), make_queue(sqlite_path=config.queue_path), no_github)
    httpd = make_server("127.0.0.1", 0, create_app(runtime), threaded=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.port}{config.webhook_path}"
    payload = json.loads(PAYLOAD.read_text())
    session = requests.Session()
    timings, statuses = [], {}
    try:
        for index in range(deliveries + 20):  # the first 20 warm up connections and SQLite; not counted
            payload["comment"]["id"] = 10_000 + index
            payload["comment"]["body"] = f"/liger autopatch model{index}"
            body = json.dumps(payload).encode()
            headers = {
                "Content-Type": "application/json",
                "X-GitHub-Event": "issue_comment",
                "X-GitHub-Delivery": str(uuid.uuid4()),
                "X-Hub-Signature-256": signature(SECRET, body),
            }
            started = time.perf_counter()
            answer = session.post(url, data=body, headers=headers, timeout=10)
            elapsed = (time.perf_counter() - started) * 1000
            if index >= 20:
                timings.append(elapsed)
                statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
    finally:
        httpd.shutdown()
    return {
        "deliveries": deliveries,
        "payload_bytes": len(body),
        "statuses": statuses,
        "queued": runtime.queue.pending(),
        "p50_ms": round(statistics.median(timings), 2),
        "p99_ms": round(percentile(timings, 99), 2),
        "max_ms": round(max(timings), 2),
        "mean_ms": round(statistics.fmean(timings), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no access-log line per delivery
    with tempfile.TemporaryDirectory() as folder:
        result = measure(args.deliveries, Path(folder))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{result['deliveries']} signed deliveries ({result['payload_bytes']} bytes each), statuses {result['statuses']}, "
        f"{result['queued']} queued: p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms, max {result['max_ms']} ms"
    )


if __name__ == "__main__":
    main()
