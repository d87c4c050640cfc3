"""Storing webhook deliveries with a group commit: the requests that arrive together share one transaction.

The webhook answers 202 only once its delivery is committed (and queued), so a server killed mid-burst loses no
acknowledged delivery. One transaction per request would make a burst wait on hundreds of commits one after
another; here one writer thread takes every delivery waiting, stores them in one transaction (duplicates of an
X-GitHub-Delivery seen before are told apart as before), queues the new ones (in one queue transaction too), then
wakes their requests. A batch holds at most as many deliveries as the server has request threads (ServerLimits).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from dataclasses import field

log = logging.getLogger(__name__)
MAX_BATCH = 256


@dataclass
class _Waiting:
    delivery_id: str
    event: str
    action: str
    payload: str
    done: threading.Event = field(default_factory=threading.Event)
    new: bool = False
    error: BaseException | None = None


class DeliveryIntake:
    def __init__(self, store, queue, timeout: float = 30.0):
        self.store, self.queue, self.timeout = store, queue, timeout
        self._waiting: list[_Waiting] = []
        self._wake = threading.Condition()
        threading.Thread(target=self._write_forever, name="delivery-intake", daemon=True).start()

    def add(self, delivery_id: str, event: str, action: str, payload: str) -> bool:
        """Store and queue one delivery; False when this delivery id was stored before. Raises when storing failed."""
        item = _Waiting(delivery_id, event, action, payload)
        with self._wake:
            self._waiting.append(item)
            self._wake.notify()
        if not item.done.wait(self.timeout):
            raise TimeoutError(f"delivery {delivery_id} was not stored within {self.timeout:.0f}s")
        if item.error is not None:
            raise item.error
        return item.new

    def _write_forever(self) -> None:
        while True:
            with self._wake:
                while not self._waiting:
                    self._wake.wait()
                batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
            self._write(batch)

    def _write(self, batch: list[_Waiting]) -> None:
        rows = [
            {"id": item.delivery_id, "event": item.event, "action": item.action, "payload": item.payload}
            for item in batch
        ]
        try:
            stored = self.store.add_deliveries(rows)
        except BaseException as error:  # the database is down: every request of the batch answers 500
            for item in batch:
                item.error = error
                item.done.set()
            return
        claimed: set[str] = set()
        for item in batch:  # the same delivery id twice in one batch: the first is new, the second a duplicate
            item.new = item.delivery_id in stored and item.delivery_id not in claimed
            claimed.add(item.delivery_id)
        queued = [item.delivery_id for item in batch if item.new]  # in arrival order, each new id once
        try:
            self.queue.enqueue_deliveries(queued)  # one transaction for the whole batch
        except Exception:  # stored: the worker's sweep queues them once the queue is back
            log.exception("could not queue %d deliveries; the worker's sweep will pick them up", len(queued))
        for item in batch:
            item.done.set()
