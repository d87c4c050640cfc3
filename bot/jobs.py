"""Durable state: webhook deliveries and jobs (SQLAlchemy; a SQLite file by default, DATABASE_URL for Postgres).

A job moves queued -> understanding -> awaiting_approval -> acting -> verifying -> pr_opened, or ends failed /
cancelled (a scan, which opens no PR, ends `done`). Every move is one committed row update, so a worker that
dies loses at most the stage it was in; `recoverable()` finds those by their expired lease.

One active job per (repo, thread, verb) is enforced by the database: `active_key` is unique and set only while
the job is active (NULLs never collide, in SQLite and Postgres alike).
"""

from __future__ import annotations

import enum
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import JSON
from sqlalchemy import Boolean
from sqlalchemy import Float
from sqlalchemy import Integer
from sqlalchemy import String
from sqlalchemy import Text
from sqlalchemy import case
from sqlalchemy import create_engine
from sqlalchemy import event
from sqlalchemy import func
from sqlalchemy import insert
from sqlalchemy import select
from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.orm import Mapped
from sqlalchemy.orm import mapped_column
from sqlalchemy.orm import sessionmaker

log = logging.getLogger(__name__)


class JobState(str, enum.Enum):
    QUEUED = "queued"
    UNDERSTANDING = "understanding"
    AWAITING_APPROVAL = "awaiting_approval"
    ACTING = "acting"
    VERIFYING = "verifying"
    PR_OPENED = "pr_opened"
    DONE = "done"  # a job that opens no PR finished (scan; a fuse with nothing left to fuse)
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def running(self) -> bool:
        """A worker is (or was, if it died) inside this stage."""
        return self in (JobState.UNDERSTANDING, JobState.ACTING, JobState.VERIFYING)


TERMINAL = frozenset({JobState.PR_OPENED, JobState.DONE, JobState.FAILED, JobState.CANCELLED})

# pr_opened -> acting is the revise loop: `/liger set` on the bot's PR re-runs act and verify.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.UNDERSTANDING, JobState.ACTING}),
    JobState.UNDERSTANDING: frozenset({JobState.AWAITING_APPROVAL, JobState.ACTING, JobState.DONE}),
    JobState.AWAITING_APPROVAL: frozenset({JobState.AWAITING_APPROVAL, JobState.ACTING}),
    JobState.ACTING: frozenset({JobState.VERIFYING, JobState.DONE}),
    JobState.VERIFYING: frozenset({JobState.PR_OPENED}),
    JobState.PR_OPENED: frozenset({JobState.ACTING}),
    JobState.DONE: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


class IllegalTransition(RuntimeError):
    pass


class Base(DeclarativeBase):
    pass


class Delivery(Base):
    __tablename__ = "deliveries"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # X-GitHub-Delivery
    event: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(64), default="")
    payload: Mapped[str] = mapped_column(Text)
    received_at: Mapped[float] = mapped_column(Float)
    handled: Mapped[bool] = mapped_column(Boolean, default=False)
    error: Mapped[str] = mapped_column(Text, default="")


class Job(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repo: Mapped[str] = mapped_column(String(200), index=True)  # owner/name
    installation_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    thread: Mapped[int] = mapped_column(Integer)  # the issue or PR number the command came from
    verb: Mapped[str] = mapped_column(String(32))
    target: Mapped[str] = mapped_column(String(100), default="")
    overrides: Mapped[list] = mapped_column(JSON, default=list)  # ["field=value", ...] in the order given
    options: Mapped[dict] = mapped_column(JSON, default=dict)  # the verb's named options, e.g. {"name": "relu_sq"}
    state: Mapped[str] = mapped_column(String(32), default=JobState.QUEUED.value)
    active_key: Mapped[str | None] = mapped_column(String(300), unique=True, nullable=True)
    scope: Mapped[str] = mapped_column(String(100), default="")  # dashboard jobs: one active per model
    checkpoint: Mapped[bool] = mapped_column(Boolean, default=True)  # stop after understand for approval
    requested_by: Mapped[str] = mapped_column(String(100), default="")
    trigger_comment_id: Mapped[int | None] = mapped_column(Integer, nullable=True, unique=True)
    status_comment_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    profile: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    result: Mapped[dict | None] = mapped_column(JSON, nullable=True)  # gates, files, branch, scan rows
    branch: Mapped[str] = mapped_column(String(200), default="")
    pushed_sha: Mapped[str] = mapped_column(String(64), default="")
    pr_number: Mapped[int | None] = mapped_column(Integer, nullable=True)
    pr_url: Mapped[str] = mapped_column(String(300), default="")
    pr_opened_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")  # why it failed, or a note shown in the status
    next_command: Mapped[str] = mapped_column(Text, default="")  # the exact command a person runs next
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # resumes after a worker died mid-stage
    worker: Mapped[str] = mapped_column(String(100), default="")
    lease_until: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)

    @property
    def job_state(self) -> JobState:
        return JobState(self.state)


def active_key(repo: str, thread: int, verb: str, scope: str = "") -> str:
    return f"{repo}#{thread}#{verb}" + (f"#{scope}" if scope else "")


@dataclass(frozen=True)
class Created:
    job: Job
    created: bool  # False: an active job for (repo, thread, verb) or this trigger comment already existed


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    # WAL lets the web process write deliveries while a worker writes jobs; busy_timeout waits, never fails.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def _no_autocheckpoint(dbapi_connection, _record) -> None:
    dbapi_connection.execute("PRAGMA wal_autocheckpoint=0")


_DELIVERY_COLUMNS = ("id", "event", "action", "payload", "received_at", "handled", "error")
_DELIVERY_INSERT = f"INSERT INTO deliveries ({', '.join(_DELIVERY_COLUMNS)}) VALUES "
_DELIVERY_ROW = "(" + ", ".join("?" * len(_DELIVERY_COLUMNS)) + ")"


class Store:
    def __init__(self, database_url: str):
        self.engine = create_engine(database_url, future=True)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        Base.metadata.create_all(self.engine)
        if self.engine.dialect.name == "sqlite" and self.engine.url.database not in (None, "", ":memory:"):
            os.chmod(self.engine.url.database, 0o600)  # the App's alone: stage children run as another user
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    def checkpoint_in_background(self, interval: float = 0.5) -> bool:
        """Take SQLite's WAL checkpoints off this process's commits: a thread checkpoints every `interval` seconds
        instead. For the web process, whose commits every ack waits on: a commit that crosses SQLite's
        autocheckpoint (1000 pages, 4 MB: ~250 deliveries of 16 KB) copies the WAL into the database and syncs
        both, 35-65 ms here against ~2 ms for the commit itself. A PASSIVE checkpoint waits on no writer and no
        writer waits on it; durability is the commit's (the WAL), not the checkpoint's. Other processes (the
        worker) keep autocheckpointing. False (and nothing started) unless the database is a SQLite file."""
        if self.engine.dialect.name != "sqlite" or self.engine.url.database in (None, "", ":memory:"):
            return False
        event.listen(self.engine, "connect", _no_autocheckpoint)
        self.engine.dispose()  # pooled connections opened before now reconnect without autocheckpoint

        def checkpoint_forever() -> None:
            while True:
                time.sleep(interval)
                try:
                    with self.engine.connect() as connection:
                        connection.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
                except Exception:  # the next round tries again; the WAL only grows meanwhile
                    log.warning("WAL checkpoint failed; retrying in %.1fs", interval, exc_info=True)

        threading.Thread(target=checkpoint_forever, name="wal-checkpoint", daemon=True).start()
        return True

    @contextmanager
    def session(self) -> Iterator:
        with self.sessions() as session, session.begin():
            yield session

    # --- deliveries --------------------------------------------------------------------------------------

    def add_delivery(self, delivery_id: str, event_name: str, action: str, payload: str) -> bool:
        """Store a delivery once. False if this X-GitHub-Delivery was seen before (a redelivery or a replay)."""
        try:
            with self.session() as session:
                session.add(
                    Delivery(id=delivery_id, event=event_name, action=action, payload=payload, received_at=time.time())
                )
        except IntegrityError:
            return False
        return True

    def add_deliveries(self, rows: list[dict]) -> set[str]:
        """Store many deliveries (dicts of id, event, action, payload) in one transaction; the ids that were new."""
        now = time.time()
        if self.engine.dialect.name == "sqlite":
            return self._add_deliveries_sqlite(rows, now)
        try:
            with self.engine.begin() as connection:
                ids = {row["id"] for row in rows}
                seen = set(connection.scalars(select(Delivery.id).where(Delivery.id.in_(ids))))
                fresh: dict[str, dict] = {}
                for row in rows:
                    if row["id"] not in seen and row["id"] not in fresh:
                        fresh[row["id"]] = {**row, "received_at": now}
                if fresh:
                    connection.execute(insert(Delivery), list(fresh.values()))
            return set(fresh)
        except IntegrityError:  # another process stored one of them meanwhile: one by one, each its own answer
            return {
                row["id"] for row in rows if self.add_delivery(row["id"], row["event"], row["action"], row["payload"])
            }

    def _add_deliveries_sqlite(self, rows: list[dict], now: float) -> set[str]:
        """add_deliveries on SQLite, on the driver's connection: one SELECT, one multi-row INSERT, one COMMIT. Every
        webhook ack waits on this (bot/intake.py), in a process whose request threads hold the GIL: SQLAlchemy's
        executemany took ~2.7x the time (4.9 vs 1.8 ms for 32 deliveries of 16 KB), and sqlite3 lets go of the GIL
        around each row's step, each one a wait to take it back. BEGIN IMMEDIATE takes the write lock first, so no
        other process can store one of these ids between the SELECT and the INSERT. The columns are the model's
        (tests/bot/test_jobs.py checks), `handled` and `error` at the model's defaults."""
        fresh: dict[str, tuple] = {}
        for row in rows:
            fresh.setdefault(row["id"], (row["id"], row["event"], row["action"], row["payload"], now, False, ""))
        ids = list(fresh)
        with self.engine.connect() as connection:
            dbapi = connection.connection.dbapi_connection
            cursor = dbapi.cursor()
            try:
                cursor.execute("BEGIN IMMEDIATE")
                marks = ", ".join("?" * len(ids))
                seen = {row[0] for row in cursor.execute(f"SELECT id FROM deliveries WHERE id IN ({marks})", ids)}
                new = [fresh[delivery_id] for delivery_id in ids if delivery_id not in seen]
                if new:
                    cursor.execute(
                        _DELIVERY_INSERT + ", ".join([_DELIVERY_ROW] * len(new)), [v for r in new for v in r]
                    )
                dbapi.commit()
            except BaseException:
                dbapi.rollback()  # a no-op when BEGIN itself failed
                raise
            finally:
                cursor.close()
        return {row[0] for row in new}

    def delivery(self, delivery_id: str) -> Delivery | None:
        with self.session() as session:
            return session.get(Delivery, delivery_id)

    def mark_delivery(self, delivery_id: str, error: str = "") -> None:
        with self.session() as session:
            session.execute(update(Delivery).where(Delivery.id == delivery_id).values(handled=True, error=error[:2000]))

    def unhandled_deliveries(self, older_than: float) -> list[str]:
        with self.session() as session:
            query = select(Delivery.id).where(Delivery.handled.is_(False), Delivery.received_at < older_than)
            return list(session.scalars(query))

    # --- jobs --------------------------------------------------------------------------------------------

    def create_job(self, **fields) -> Created:
        """A new queued job, unless one is active for (repo, thread, verb) or came from the same comment."""
        now = time.time()
        key = active_key(fields["repo"], fields["thread"], fields["verb"], fields.get("scope", ""))
        job = Job(state=JobState.QUEUED.value, active_key=key, created_at=now, updated_at=now, **fields)
        try:
            with self.session() as session:
                session.add(job)
        except IntegrityError:
            existing = self.active_job(fields["repo"], fields["thread"], fields["verb"], fields.get("scope", ""))
            if existing is None and fields.get("trigger_comment_id") is not None:
                existing = self.job_for_comment(fields["trigger_comment_id"])
            if existing is None:
                raise
            return Created(existing, False)
        return Created(job, True)

    def get(self, job_id: int) -> Job | None:
        with self.session() as session:
            return session.get(Job, job_id)

    def job_for_comment(self, comment_id: int) -> Job | None:
        with self.session() as session:
            return session.scalars(select(Job).where(Job.trigger_comment_id == comment_id)).first()

    def active_job(self, repo: str, thread: int, verb: str, scope: str = "") -> Job | None:
        with self.session() as session:
            return session.scalars(select(Job).where(Job.active_key == active_key(repo, thread, verb, scope))).first()

    def latest_job(self, repo: str, thread: int, verbs: tuple[str, ...] | None = None) -> Job | None:
        """The thread's most recent job (any state); on a PR, the job whose PR this is also counts."""
        with self.session() as session:
            where = (Job.repo == repo) & ((Job.thread == thread) | (Job.pr_number == thread))
            if verbs:
                where = where & Job.verb.in_(verbs)
            return session.scalars(select(Job).where(where).order_by(Job.id.desc())).first()

    def job_for_branch(self, repo: str, branch: str) -> Job | None:
        with self.session() as session:
            query = select(Job).where(Job.repo == repo, Job.branch == branch).order_by(Job.id.desc())
            return session.scalars(query).first()

    def prs_opened_since(self, repo: str, since: float) -> int:
        with self.session() as session:
            query = select(func.count()).select_from(Job).where(Job.repo == repo, Job.pr_opened_at >= since)
            return int(session.scalar(query) or 0)

    def jobs(self, repo: str | None = None) -> list[Job]:
        with self.session() as session:
            query = select(Job).order_by(Job.id)
            if repo:
                query = query.where(Job.repo == repo)
            return list(session.scalars(query))

    def update(self, job_id: int, **fields) -> Job:
        with self.session() as session:
            job = session.get(Job, job_id)
            for name, value in fields.items():
                setattr(job, name, value)
            job.updated_at = time.time()
        return job

    def transition(self, job_id: int, to: JobState, **fields) -> Job:
        """Move a job along the state machine (checked); terminal states free its (repo, thread, verb) slot."""
        with self.session() as session:
            job = session.get(Job, job_id)
            current = JobState(job.state)
            if to not in (JobState.FAILED, JobState.CANCELLED) and to not in TRANSITIONS[current]:
                raise IllegalTransition(f"job {job_id}: {current.value} -> {to.value}")
            if current.terminal and to in (JobState.FAILED, JobState.CANCELLED):
                raise IllegalTransition(f"job {job_id} already ended ({current.value})")
            job.state = to.value
            if to.terminal:
                job.active_key = None
                job.lease_until = 0.0
            elif current.terminal:  # the revise loop re-activates a job whose PR is open
                job.active_key = active_key(job.repo, job.thread, job.verb, job.scope)
            for name, value in fields.items():
                setattr(job, name, value)
            job.updated_at = time.time()
        return job

    def claim(self, job_id: int, worker: str, lease_seconds: float) -> bool:
        """Take the job for `worker` unless another live worker holds its lease (several workers, one job)."""
        now = time.time()
        with self.session() as session:
            claimed = session.execute(
                update(Job)
                .where(Job.id == job_id, (Job.lease_until < now) | (Job.worker == worker))
                .values(worker=worker, lease_until=now + lease_seconds)
            )
            return claimed.rowcount == 1

    def heartbeat(self, job_id: int, worker: str, lease_seconds: float) -> None:
        with self.session() as session:
            session.execute(
                update(Job)
                .where(Job.id == job_id, Job.worker == worker)
                .values(lease_until=time.time() + lease_seconds)
            )

    def release(self, job_id: int, worker: str) -> None:
        with self.session() as session:
            session.execute(update(Job).where(Job.id == job_id, Job.worker == worker).values(lease_until=0.0))

    def recoverable(self, queued_grace: float) -> list[Job]:
        """Jobs a dead worker left: in a running stage with no live lease, or queued for longer than the grace."""
        now = time.time()
        running = [JobState.UNDERSTANDING.value, JobState.ACTING.value, JobState.VERIFYING.value]
        stale_queued = (Job.state == JobState.QUEUED.value) & (Job.updated_at < now - queued_grace)
        with self.session() as session:
            query = select(Job).where(Job.state.in_(running) | stale_queued, Job.lease_until < now).order_by(Job.id)
            return list(session.scalars(query))

    def take_for_recovery(self, job_id: int, attempts: int) -> bool:
        """One sweeper (of several workers) wins a dead worker's job; a resume counts as an attempt."""
        now = time.time()
        with self.session() as session:
            taken = session.execute(
                update(Job)
                .where(Job.id == job_id, Job.attempts == attempts, Job.lease_until < now)
                .values(
                    attempts=case((Job.worker != "", Job.attempts + 1), else_=Job.attempts),
                    worker="",
                    lease_until=0.0,
                    updated_at=now,
                )
            )
            return taken.rowcount == 1
