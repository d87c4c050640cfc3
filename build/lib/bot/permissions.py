"""Who may do what: the collaborator permission asked from the forge (never the payload's author_association,
which says nothing about write access), and bots ignored outright so two bots never talk to each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.forge.base import Forge
from bot.forge.base import Permission
from bot.forge.base import RepoRef


def is_bot(user: dict | None) -> bool:
    if not user:
        return True  # a payload without a sender is nobody to answer
    return user.get("type") == "Bot" or str(user.get("login", "")).endswith("[bot]")


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str = ""  # the polite reply when refused


def check(forge: Forge, repo: RepoRef, login: str, required: Permission) -> Verdict:
    if required <= Permission.NONE:
        return Verdict(True)
    actual = forge.permission(repo, login)
    if actual >= required:
        return Verdict(True)
    return Verdict(
        False,
        f"@{login}, thanks for the interest! Only people with {required.name.lower()} access to "
        f"{repo.full_name} can run this command (yours: {actual.name.lower()}). "
        "A maintainer can run it for you.",
    )
