"""The queue's batch enqueue: a group commit's deliveries go onto the SQLite queue in one transaction, in order."""

from __future__ import annotations

from bot.queue import make_queue


def _bound(queue) -> list[str]:
    ran: list[str] = []
    queue.bind(on_delivery=ran.append, on_job=lambda _job_id: None)
    return ran


def test_enqueue_deliveries_queues_each_id_once_in_order_on_sqlite(tmp_path):
    queue = make_queue(sqlite_path=str(tmp_path / "queue.db"))
    ran = _bound(queue)
    queue.enqueue_deliveries(["a", "b", "c"])
    queue.enqueue_delivery("d")  # the one-by-one path and the batch path share one table
    assert queue.pending() == 4
    assert queue.run_pending() == 4
    assert ran == ["a", "b", "c", "d"]


def test_enqueue_deliveries_of_nothing_queues_nothing(tmp_path):
    queue = make_queue(sqlite_path=str(tmp_path / "queue.db"))
    queue.enqueue_deliveries([])
    assert queue.pending() == 0


def test_enqueue_deliveries_runs_inline_on_the_immediate_queue():
    queue = make_queue(immediate=True)
    ran = _bound(queue)
    queue.enqueue_deliveries(["a", "b"])
    assert ran == ["a", "b"]
