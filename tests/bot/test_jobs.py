"""Storing a group commit's deliveries (Store.add_deliveries on SQLite): new ids, duplicates, one transaction."""

from __future__ import annotations

import sqlite3
import time

import pytest

from bot.jobs import Store


def _row(delivery_id: str, payload: str = '{"action": "created"}') -> dict:
    return {"id": delivery_id, "event": "issue_comment", "action": "created", "payload": payload}


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'bot.db'}")


def test_add_deliveries_stores_new_ids_and_tells_duplicates_apart(store):
    assert store.add_deliveries([_row("a"), _row("b"), _row("a")]) == {"a", "b"}  # a twice in one batch: once
    assert store.add_deliveries([_row("b"), _row("c")]) == {"c"}  # b was stored before
    assert store.add_delivery("c", "issue_comment", "created", "{}") is False  # the one-by-one path agrees
    stored = store.delivery("a")
    assert (stored.event, stored.action, stored.payload, stored.handled, stored.error) == (
        "issue_comment",
        "created",
        '{"action": "created"}',
        False,
        "",
    )
    assert sorted(store.unhandled_deliveries(older_than=time.time() + 1)) == ["a", "b", "c"]


def test_add_deliveries_keeps_the_first_payload_of_an_id_seen_twice_in_one_batch(store):
    assert store.add_deliveries([_row("a", "first"), _row("a", "second")]) == {"a"}
    assert store.delivery("a").payload == "first"


def test_a_batch_that_fails_stores_none_of_its_deliveries_and_the_store_goes_on(store):
    with pytest.raises(sqlite3.IntegrityError):
        store.add_deliveries([_row("ok"), {**_row("bad"), "payload": None}])  # payload is NOT NULL
    assert store.delivery("ok") is None  # one transaction: all or nothing
    assert store.add_deliveries([_row("ok")]) == {"ok"}  # rolled back, not left open
    assert store.add_delivery("next", "issue_comment", "created", "{}") is True


def test_the_sqlite_insert_names_every_column_of_the_model():
    from bot import jobs

    assert set(jobs._DELIVERY_COLUMNS) == {column.name for column in jobs.Delivery.__table__.columns}
    assert jobs.Delivery.__tablename__ == "deliveries"


def test_checkpoint_in_background_keeps_commits_from_checkpointing_and_checkpoints_anyway(store, tmp_path):
    assert store.checkpoint_in_background(interval=0.05) is True
    with store.engine.connect() as connection:  # this process's commits no longer checkpoint
        assert connection.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
    store.add_deliveries([_row(f"d-{i}", "x" * 20_000) for i in range(300)])  # ~6 MB of WAL, past 1000 pages
    deadline = time.monotonic() + 10
    while (tmp_path / "bot.db").stat().st_size < 5_000_000:  # the thread copies the WAL into the database file
        assert time.monotonic() < deadline, "the WAL was never checkpointed"
        time.sleep(0.05)
    assert len(store.unhandled_deliveries(older_than=time.time() + 1)) == 300


def test_checkpoint_in_background_is_off_for_an_in_memory_database():
    assert Store("sqlite://").checkpoint_in_background() is False
