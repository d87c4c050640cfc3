"""`pull_request_review_comment.created`: `/liger` commands on a line of a PR (`/liger set` revises the bot's PR)."""

from __future__ import annotations

from bot.handlers import on
from bot.handlers.commanding import handle_comment


@on("pull_request_review_comment", "created")
def review_comment_created(ctx) -> None:
    comment = ctx.payload["comment"]
    handle_comment(ctx, comment.get("body"), comment["id"], review_comment=True)
