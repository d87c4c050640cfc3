"""Prose addressed to the bot -> one proposed `/liger` command, kept until a writer confirms it.

The model's answer is hostile text like the comment it read: it becomes a command only by passing the same grammar
a typed command passes (`bot.commands.parse_line`), as exactly one line naming a verb that starts a pipeline.
Nothing runs at this point: the proposal is a row, and `/liger confirm` by someone with the verb's permission starts
it (re-parsed from the row, as if that person had typed it).
"""

from __future__ import annotations

import re
import time

from sqlalchemy import Integer
from sqlalchemy import String
from sqlalchemy import Text
from sqlalchemy import update
from sqlalchemy.orm import Mapped
from sqlalchemy.orm import mapped_column

from bot import rendered
from bot.commands import PREFIX
from bot.commands import VERBS
from bot.commands import Command
from bot.commands import CommandError
from bot.commands import parse_line
from bot.jobs import Base
from bot.jobs import Store

_INLINE_CODE_RE = re.compile(r"(`+).*?\1")  # as bot.commands: inline code is quoted text, never a request
PROPOSAL_TTL_SECONDS = 24 * 3600
MAX_PROSE_CHARACTERS = 4000  # what of a comment is sent to the API
# Verbs a proposal may name: those that start a pipeline (its checkpoint still waits for `/liger approve`), never a
# control verb (approve, set, cancel, confirm) and never the bulk scan.
PROPOSABLE = frozenset(name for name, verb in VERBS.items() if verb.pipeline and name != "scan")


class Proposal(Base):
    __tablename__ = "proposals"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repo: Mapped[str] = mapped_column(String(200), index=True)
    thread: Mapped[int] = mapped_column(Integer)
    source_comment_id: Mapped[int | None] = mapped_column(Integer, nullable=True, unique=True)
    asked_by: Mapped[str] = mapped_column(String(100))
    command: Mapped[str] = mapped_column(Text)  # the parsed command, written back out (Command.text())
    state: Mapped[str] = mapped_column(String(16), default="open")  # open | confirmed | replaced
    confirmed_by: Mapped[str] = mapped_column(String(100), default="")
    created_at: Mapped[int] = mapped_column(Integer)


def addressed_to_bot(body: str, handle: str) -> bool:
    """`@liger-bot` in the comment's own rendered text (not in a quote or code): it is asking the bot something."""
    mention = re.compile(rf"(?<![\w/@-])@{re.escape(handle)}(?![\w-])", re.IGNORECASE)
    return any(mention.search(_INLINE_CODE_RE.sub("", line)) for line in rendered.plain_lines(body))


def read_answer(answer: str) -> Command:
    """The model's answer -> the one command it proposes; CommandError (the reply) for anything else."""
    lines = [line.strip() for line in answer.strip().splitlines() if line.strip()]
    if lines == ["NONE"]:
        raise CommandError("I could not tell which `/liger` command you mean")
    if len(lines) != 1 or not (lines[0] == PREFIX or lines[0].startswith(PREFIX + " ")):
        raise CommandError("the model's answer was not one `/liger` command, so nothing is proposed")
    command = parse_line(lines[0])
    if command.verb not in PROPOSABLE:
        raise CommandError(f"a proposal may only start {', '.join(f'`{v}`' for v in sorted(PROPOSABLE))}")
    if "`" in command.text():  # it is shown in a code block: nothing in it may close the block
        raise CommandError("the model's answer holds a backtick, so nothing is proposed")
    return command


def record(store: Store, repo: str, thread: int, source_comment_id: int | None, asked_by: str, command: Command):
    """Keep the proposal; an open one of the thread is replaced (only the latest can be confirmed)."""
    from bot.llm_usage import ensure_tables

    ensure_tables(store)
    with store.session() as session:
        session.execute(
            update(Proposal)
            .where(Proposal.repo == repo, Proposal.thread == thread, Proposal.state == "open")
            .values(state="replaced")
        )
        row = Proposal(
            repo=repo,
            thread=thread,
            source_comment_id=source_comment_id,
            asked_by=asked_by,
            command=command.text(),
            state="open",
            created_at=int(time.time()),
        )
        session.add(row)
    return row


def asked_already(store: Store, source_comment_id: int | None) -> bool:
    """A redelivered comment: its proposal was made (and answered) the first time."""
    from bot.llm_usage import ensure_tables

    if source_comment_id is None:
        return False
    ensure_tables(store)
    with store.session() as session:
        return session.query(Proposal.id).filter(Proposal.source_comment_id == source_comment_id).first() is not None


def take_open(store: Store, repo: str, thread: int, confirmer: str) -> Proposal | None:
    """The thread's open proposal, marked confirmed by `confirmer` (one confirmation wins; an old one expired)."""
    from bot.llm_usage import ensure_tables

    ensure_tables(store)
    fresh_since = int(time.time()) - PROPOSAL_TTL_SECONDS
    with store.session() as session:
        row = (
            session.query(Proposal)
            .filter(Proposal.repo == repo, Proposal.thread == thread, Proposal.state == "open")
            .order_by(Proposal.id.desc())
            .first()
        )
        if row is None or row.created_at < fresh_since:
            return None
        taken = session.execute(
            update(Proposal)
            .where(Proposal.id == row.id, Proposal.state == "open")
            .values(state="confirmed", confirmed_by=confirmer)
        )
        return row if taken.rowcount == 1 else None
