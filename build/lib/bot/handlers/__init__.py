"""Event handlers, one small module per event, each registering into ROUTES by (event, action) (probot-style).

`dispatch` runs every handler routed for a context; the webhook asks `routes_for` to tell handled events from
ones it acknowledges and drops.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

Handler = Callable[["object"], None]  # (bot.runtime.Context) -> None
ROUTES: dict[tuple[str, str], list[Handler]] = {}
HANDLER_MODULES = (
    "issue_comment",
    "pull_request_review_comment",
    "pull_request_review",
    "issues",
    "workflow_run",
    "installation",
)


def on(event: str, *actions: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for action in actions:
            ROUTES.setdefault((event, action), []).append(handler)
        return handler

    return register


def routes_for(event: str, action: str) -> list[Handler]:
    return ROUTES.get((event, action), [])


def dispatch(ctx) -> int:
    """Run the handlers routed for `ctx`; returns how many ran."""
    handlers = routes_for(ctx.event, ctx.action)
    for handler in handlers:
        handler(ctx)
    return len(handlers)


for _name in HANDLER_MODULES:
    importlib.import_module(f"{__name__}.{_name}")
