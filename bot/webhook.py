"""The webhook route: verify, de-dupe, store, queue, answer. Nothing here waits on git, a pipeline or GitHub.

Order matters: the size cap (413) is enforced by the server (bot/server.py) while the body streams in, and again by
Flask; the signature (401) is checked over the raw bytes before anything is parsed; a body that is not a JSON object
with a string `action` (where it has one) is a 400, never a 500; a delivery id seen before gets 200 and is not
queued again.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging

from flask import Request
from flask import jsonify

from bot import handlers

log = logging.getLogger(__name__)
SIGNATURE_HEADER = "X-Hub-Signature-256"


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def signature_ok(secret: str, body: bytes, header: str | None) -> bool:
    if not header or not secret:
        return False
    return hmac.compare_digest(signature(secret, body).encode(), header.strip().encode())


def _answer(status: int, **fields):
    response = jsonify(fields)
    response.status_code = status
    return response


def receive(request: Request, runtime, intake):
    body = request.get_data(cache=False)  # raises 413 first when Content-Length exceeds MAX_CONTENT_LENGTH
    if not signature_ok(runtime.config.webhook_secret, body, request.headers.get(SIGNATURE_HEADER)):
        return _answer(401, error=f"missing or wrong {SIGNATURE_HEADER}")
    event = request.headers.get("X-GitHub-Event", "")
    delivery_id = request.headers.get("X-GitHub-Delivery", "")
    if not event or not delivery_id or len(delivery_id) > 64:
        return _answer(400, error="X-GitHub-Event and X-GitHub-Delivery are required")
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, a 5,000-digit number, nesting deeper than Python recurses
        return _answer(400, error="the body is not JSON")
    if not isinstance(payload, dict) or not isinstance(payload.get("action", ""), str):
        return _answer(400, error="the body is not a webhook payload (a JSON object with a string `action`)")
    action = payload.get("action", "")
    if event == "ping":
        return _answer(200, ok=True, zen=str(payload.get("zen", ""))[:200])
    if not handlers.routes_for(event, action):
        return _answer(200, ignored=f"{event}.{action}" if action else event)
    if not intake.add(delivery_id, event, action, body.decode("utf-8", "replace")):  # committed and queued
        return _answer(200, duplicate=delivery_id)
    return _answer(202, queued=delivery_id)
