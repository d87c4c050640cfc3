"""Deliveries: a stored webhook delivery run through the handlers once; GitHub being unavailable leaves it
unhandled for the sweep to queue again."""

from __future__ import annotations

import json
import logging

from bot import handlers
from bot.forge.base import ForgeError
from bot.runtime import Context
from bot.worker.flow import transient

log = logging.getLogger(__name__)


class DeliveriesMixin:
    """The Worker's handling of one stored delivery."""

    def handle_delivery(self, delivery_id: str) -> None:
        delivery = self.store.delivery(delivery_id)
        if delivery is None or delivery.handled:
            return
        ctx = Context(delivery.event, delivery.action, json.loads(delivery.payload), delivery_id, self.runtime)
        try:
            handlers.dispatch(ctx)
        except ForgeError as exc:
            if transient(exc):  # GitHub was unavailable: keep it unhandled, the sweep queues it again
                log.warning("delivery %s: %s; will retry", delivery_id, exc)
                return
            log.error("delivery %s: %s", delivery_id, exc)
            self.store.mark_delivery(delivery_id, error=str(exc))
            return
        except Exception as exc:
            log.exception("delivery %s failed", delivery_id)
            self.store.mark_delivery(delivery_id, error=f"{exc.__class__.__name__}: {exc}")
            return
        self.store.mark_delivery(delivery_id)
