"""Secrets never reach a log line or an exception message: one place that knows what a secret looks like."""

from __future__ import annotations

import logging
import re
import threading

REDACTED = "***"

_PATTERNS = (
    # a PEM block (the App's private key), whole or cut off after its header
    re.compile(r"-----BEGIN [A-Z0-9 ]*(?:PRIVATE KEY|CERTIFICATE)-----(?:.*?-----END [A-Z0-9 ]*-----|.*)", re.DOTALL),
    re.compile(r"\bgh[opsuar]_[A-Za-z0-9_]{16,}"),  # GitHub tokens: ghs_ (installation), ghp_, gho_ ...
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+"),  # a JWT
    re.compile(r"(?<=://)[^/@\s:]+:[^/@\s]+(?=@)"),  # user:password@ in a URL
    re.compile(r'(?<="token": ")[^"]+'),
    re.compile(r"(?i)(?<=authorization: )(token|bearer|basic) \S+"),
)

_known: set[str] = set()
_known_lock = threading.Lock()


MIN_REMEMBERED = 6  # shorter "secrets" would redact ordinary words


def remember(secret: str) -> None:
    """Redact `secret` wherever it appears from now on, whatever its shape (the webhook secret, a token); a
    multi-line secret (a key) is remembered line by line too, so a fragment of it is caught."""
    if not secret:
        return
    pieces = {secret} | {line.strip() for line in secret.splitlines() if len(line.strip()) >= 16}
    with _known_lock:
        _known.update(p for p in pieces if len(p) >= MIN_REMEMBERED)


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


class RedactingHandlerFilter(RedactingFilter):
    """On a handler: every record it writes, from any logger, its traceback included."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info:  # formatted here, once, so the handler prints the redacted text
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return super().filter(record)


def install_log_filter(*logger_names: str) -> None:
    for name in logger_names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) for f in logger.filters):
            logger.addFilter(RedactingFilter())


def install_handler_filters(logger: logging.Logger | None = None) -> None:
    """Redact what every handler of `logger` (default: the root logger) writes: the App's logs leave the host."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingHandlerFilter) for f in handler.filters):
            handler.addFilter(RedactingHandlerFilter())
