"""`pull_request_review.submitted`: `/liger` commands in a review's body (reviews take no reactions)."""

from __future__ import annotations

from bot.handlers import on
from bot.handlers.commanding import handle_comment


@on("pull_request_review", "submitted")
def review_submitted(ctx) -> None:
    handle_comment(ctx, ctx.payload["review"].get("body"), None)
