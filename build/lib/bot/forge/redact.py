"""Secrets never reach a log line or an exception message: one place that knows what a secret looks like."""

from __future__ import annotations

import logging
import re
import threading

REDACTED = "***"

_PATTERNS = (
    re.compile(r"\bgh[opsuar]_[A-Za-z0-9_]{16,}"),  # GitHub tokens: ghs_ (installation), ghp_, gho_ ...
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+"),  # a JWT
    re.compile(r"(?<=://)[^/@\s:]+:[^/@\s]+(?=@)"),  # user:password@ in a URL
    re.compile(r'(?<="token": ")[^"]+'),
    re.compile(r"(?i)(?<=authorization: )(token|bearer|basic) \S+"),
)

_known: set[str] = set()
_known_lock = threading.Lock()


def remember(secret: str) -> None:
    """Redact `secret` wherever it appears from now on, whatever its shape (the stand-in's tokens, a password)."""
    if secret:
        with _known_lock:
            _known.add(secret)


def redact(text: str) -> str:
    with _known_lock:
        known = sorted(_known, key=len, reverse=True)
    for secret in known:
        text = text.replace(secret, REDACTED)
    for pattern in _PATTERNS:
        text = pattern.sub(REDACTED, text)
    return text


class RedactingFilter(logging.Filter):
    """Rewrites a record's message with secrets removed (PyGithub logs response bodies, tokens included, at DEBUG)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def install_log_filter(*logger_names: str) -> None:
    for name in logger_names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) for f in logger.filters):
            logger.addFilter(RedactingFilter())
