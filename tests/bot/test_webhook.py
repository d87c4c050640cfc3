"""The webhook over real HTTP: signature, de-dupe, unknown events, the size cap, and no work on the request path."""

from __future__ import annotations

import json
import time

from tests.bot.app_fixtures import comment_payload
from tests.bot.app_fixtures import fixture_payload


def test_missing_and_wrong_signature_get_401_and_store_nothing(server, app):
    payload = comment_payload("/liger autopatch nemotron")
    assert server.deliver("issue_comment", payload, secret=None).status_code == 401
    assert server.deliver("issue_comment", payload, secret="not-the-secret").status_code == 401
    tampered = server.deliver(
        "issue_comment", json.dumps(payload).encode(), headers={"X-Hub-Signature-256": "sha256=" + "0" * 64}
    )
    assert tampered.status_code == 401
    assert app.runtime.queue.pending() == 0
    assert app.store.unhandled_deliveries(older_than=time.time() + 1) == []


def test_signed_delivery_is_queued_not_handled_on_the_request_path(server, app):
    answer = server.deliver("issue_comment", comment_payload("/liger autopatch nemotron"), delivery_id="d-1")
    assert answer.status_code == 202
    assert app.runtime.queue.pending() == 1
    assert app.forge.calls == [("(test) set_permission", {"login": "Codertocat"})]  # no GitHub call yet
    assert app.jobs() == []
    app.drain()
    assert [job.target for job in app.jobs()] == ["nemotron"]


def test_replayed_delivery_makes_one_job(server, app):
    payload = comment_payload("/liger autopatch nemotron")
    assert server.deliver("issue_comment", payload, delivery_id="same").status_code == 202
    again = server.deliver("issue_comment", payload, delivery_id="same")
    assert again.status_code == 200 and again.json() == {"duplicate": "same"}
    # GitHub can also send the same comment under a new delivery id: still one job
    assert server.deliver("issue_comment", payload, delivery_id="other").status_code == 202
    app.drain()
    assert len(app.jobs()) == 1
    assert len([c for c in app.forge.comments() if "liger-bot:status" in c["body"]]) == 1


def test_unknown_event_is_acknowledged_and_ignored(server, app):
    answer = server.deliver("check_run", fixture_payload("check_run.created"))
    assert answer.status_code == 200 and answer.json() == {"ignored": "check_run.created"}
    unhandled_action = server.deliver("issue_comment", {**comment_payload("/liger help"), "action": "deleted"})
    assert unhandled_action.status_code == 200
    assert app.runtime.queue.pending() == 0


def test_ping_and_healthz(server):
    assert server.deliver("ping", {"zen": "Keep it logically awesome."}).json()["zen"] == "Keep it logically awesome."
    import requests

    health = requests.get(server.url + "/healthz", timeout=5).json()
    assert health == {"ok": True, "database": "sqlite", "queue": "sqlite"}


def test_30_mb_payload_is_refused_fast_with_413(server, app):
    body = b'{"action": "created", "pad": "' + b"x" * (30 * 1024 * 1024) + b'"}'
    started = time.perf_counter()
    answer = server.deliver("issue_comment", body)
    elapsed = time.perf_counter() - started
    assert answer.status_code == 413
    assert elapsed < 3.0, f"413 took {elapsed:.2f}s"
    assert app.runtime.queue.pending() == 0


def test_missing_delivery_id_or_bad_json_is_400(server):
    body = b"not json"
    assert server.deliver("issue_comment", body).status_code == 400
    answer = server.deliver("issue_comment", comment_payload("/liger help"), headers={"X-GitHub-Delivery": ""})
    assert answer.status_code == 400


def test_concurrent_deliveries_share_commits_and_each_id_is_queued_once(server, app):
    from concurrent.futures import ThreadPoolExecutor

    payload = comment_payload("/liger help")
    ids = [f"burst-{i % 20}" for i in range(60)]  # every id three times, at once
    with ThreadPoolExecutor(30) as pool:
        answers = list(pool.map(lambda d: server.deliver("issue_comment", payload, delivery_id=d), ids))
    codes = {}
    for delivery_id, answer in zip(ids, answers, strict=True):
        codes.setdefault(delivery_id, []).append(answer.status_code)
    assert all(sorted(c) == [200, 200, 202] for c in codes.values()), codes
    assert app.runtime.queue.pending() == 20  # acknowledged means stored and queued
    assert {app.store.delivery(d).id for d in codes} == set(codes)
