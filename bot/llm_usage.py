"""What the anthropic provider spent, in the App's database: one row per call, so the per-job and the per-repo
per-UTC-day caps hold across workers and restarts (a job resumed by another worker sees what the first spent).
"""

from __future__ import annotations

import time

from sqlalchemy import Float
from sqlalchemy import Integer
from sqlalchemy import String
from sqlalchemy import func
from sqlalchemy import select
from sqlalchemy.orm import Mapped
from sqlalchemy.orm import mapped_column

from bot.jobs import Base
from bot.jobs import Store
from pipelines.llm.budget import Spend
from pipelines.llm.settings import Caps


class LlmCall(Base):
    __tablename__ = "llm_calls"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repo: Mapped[str] = mapped_column(String(200), index=True)
    day: Mapped[str] = mapped_column(String(10), index=True)  # UTC, YYYY-MM-DD
    job_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)  # None: a proposal
    purpose: Mapped[str] = mapped_column(String(32))  # propose | draft | explain
    input_tokens: Mapped[int] = mapped_column(Integer)
    output_tokens: Mapped[int] = mapped_column(Integer)
    usd: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)


def ensure_tables(store: Store) -> None:
    """The provider's tables beside the jobs (a database made before they existed gets them on first use)."""
    if getattr(store, "_llm_tables", False):
        return
    from bot.proposals import Proposal  # noqa: F401  (registers its table on Base)

    Base.metadata.create_all(store.engine, tables=[LlmCall.__table__, Proposal.__table__])
    store._llm_tables = True


def utc_day(now: float | None = None) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(time.time() if now is None else now))


class StoreLedger:
    """The ledger of one job (or of one proposal, `job_id=None`) of `repo`, on the App's database."""

    def __init__(self, store: Store, repo: str, caps: Caps, job_id: int | None = None, purpose: str = "draft"):
        ensure_tables(store)
        self.store, self.repo, self.caps, self.job_id, self.purpose = store, repo, caps, job_id, purpose
        self._proposal_spend = Spend()  # a proposal has no job row: its "job" is this ledger's own calls

    def _sum(self, where) -> Spend:
        query = select(
            func.count(LlmCall.id),
            func.coalesce(func.sum(LlmCall.input_tokens), 0),
            func.coalesce(func.sum(LlmCall.output_tokens), 0),
            func.coalesce(func.sum(LlmCall.usd), 0.0),
        ).where(where)
        with self.store.session() as session:
            calls, inputs, outputs, usd = session.execute(query).one()
        return Spend(int(calls), int(inputs), int(outputs), float(usd))

    def job_spend(self) -> Spend:
        if self.job_id is None:
            return self._proposal_spend
        return self._sum(LlmCall.job_id == self.job_id)

    def day_spend(self) -> Spend:
        return self._sum((LlmCall.repo == self.repo) & (LlmCall.day == utc_day()))

    def record(self, spend: Spend) -> None:
        row = LlmCall(
            repo=self.repo,
            day=utc_day(),
            job_id=self.job_id,
            purpose=self.purpose,
            input_tokens=spend.input_tokens,
            output_tokens=spend.output_tokens,
            usd=spend.usd,
            created_at=time.time(),
        )
        with self.store.session() as session:
            session.add(row)
        if self.job_id is None:
            self._proposal_spend = self._proposal_spend + spend
