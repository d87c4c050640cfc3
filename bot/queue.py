"""The task queue: huey. Embedded on a SQLite file by default (no server to run), on Redis when REDIS_URL is set
so several web and worker processes on several hosts share the work.

The queue carries only ids (a delivery id, a job id); the database holds the state. A task lost with a killed
worker is therefore found again by the worker's sweep (`Worker.sweep`), never by trusting the queue.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from huey import Huey
from huey import RedisHuey
from huey import SqliteHuey
from huey.consumer import Consumer
from huey.storage import SqliteStorage

QUEUE_NAME = "liger-bot"


class _WalNormalStorage(SqliteStorage):
    """huey's SQLite storage with WAL's `synchronous=NORMAL` (what the database uses) instead of FULL: a commit is
    safe from a killed process without an fsync each. A task lost to a power cut is found again by the sweep."""

    def _create_connection(self):
        conn = super()._create_connection()
        conn.execute("pragma synchronous=1")
        return conn

    def enqueue_many(self, items: list[tuple[bytes, float]]) -> None:
        """Queue many serialized tasks (data, priority) with one statement in one transaction. One statement, not
        executemany: sqlite3 lets go of the GIL around every step, and each step taken back under a burst's
        request threads costs up to a switch interval."""
        values = [value for data, priority in items for value in (self.name, self.to_blob(data), priority or 0)]
        with self.db(commit=True) as cursor:
            cursor.execute(
                "insert into task (queue, data, priority) values " + ", ".join(["(?, ?, ?)"] * len(items)), values
            )


class Queue:
    """Two tasks: handle one stored delivery, advance one job. Both are idempotent on the database's state."""

    def __init__(self, huey: Huey):
        self.huey = huey
        self._on_delivery: Callable[[str], None] | None = None
        self._on_job: Callable[[int], None] | None = None
        self._delivery_task = huey.task(name="liger_bot.handle_delivery")(self._handle_delivery)
        self._job_task = huey.task(name="liger_bot.advance_job")(self._advance_job)

    @property
    def backend(self) -> str:
        return "redis" if isinstance(self.huey, RedisHuey) else "memory" if self.huey.immediate else "sqlite"

    def bind(self, on_delivery: Callable[[str], None], on_job: Callable[[int], None]) -> None:
        """Where tasks run (the worker binds these; a web process only enqueues)."""
        self._on_delivery, self._on_job = on_delivery, on_job

    def enqueue_delivery(self, delivery_id: str) -> None:
        self._delivery_task(delivery_id)

    def enqueue_deliveries(self, delivery_ids: list[str]) -> None:
        """Queue many stored deliveries at once: one transaction on the SQLite queue (a group commit's worth of
        deliveries would otherwise be one commit each, one after another); task by task on the other backends.
        huey's SIGNAL_ENQUEUED is not sent for a batch (nothing here listens to huey's signals)."""
        if not delivery_ids:
            return
        storage = self.huey.storage
        if self.huey.immediate or not isinstance(storage, _WalNormalStorage):
            for delivery_id in delivery_ids:
                self._delivery_task(delivery_id)
            return
        tasks = [self._delivery_task.s(delivery_id) for delivery_id in delivery_ids]
        storage.enqueue_many([(self.huey.serialize_task(task), task.priority) for task in tasks])

    def enqueue_job(self, job_id: int, delay: float = 0) -> None:
        if delay:
            self._job_task.schedule(args=(job_id,), delay=delay)
        else:
            self._job_task(job_id)

    def consumer(self, workers: int = 1) -> Consumer:
        return self.huey.create_consumer(
            workers=workers, worker_type="thread", periodic=False, initial_delay=0.05, max_delay=1.0
        )

    def pending(self) -> int:
        return self.huey.pending_count()

    def run_pending(self, limit: int = 50) -> int:
        """Run queued tasks in this thread, in order, without a consumer: how the test harnesses drain the queue."""
        ran = 0
        while ran < limit and (task := self.huey.dequeue()) is not None:
            self.huey.execute(task)
            ran += 1
        return ran

    def _handle_delivery(self, delivery_id: str) -> None:
        if self._on_delivery is None:
            raise RuntimeError("this process only enqueues (no worker bound)")
        self._on_delivery(delivery_id)

    def _advance_job(self, job_id: int) -> None:
        if self._on_job is None:
            raise RuntimeError("this process only enqueues (no worker bound)")
        self._on_job(job_id)


def make_queue(redis_url: str = "", sqlite_path: str = "liger-bot-queue.db", immediate: bool = False) -> Queue:
    if immediate:  # tasks run inline as they are queued: `liger-bot replay --inline` and unit tests
        return Queue(Huey(QUEUE_NAME, immediate=True, results=False))
    if redis_url:
        return Queue(RedisHuey(QUEUE_NAME, url=redis_url, results=False))
    queue = Queue(SqliteHuey(QUEUE_NAME, filename=sqlite_path, results=False, storage_class=_WalNormalStorage))
    os.chmod(sqlite_path, 0o600)  # created with its tables above; the App's alone: stage children run as another user
    return queue
