"""`issue_comment.created` (issues and PR conversations): `/liger` commands."""

from __future__ import annotations

from bot.handlers import on
from bot.handlers.commanding import handle_comment


@on("issue_comment", "created")
def comment_created(ctx) -> None:
    comment = ctx.payload["comment"]
    handle_comment(ctx, comment.get("body"), comment["id"])
