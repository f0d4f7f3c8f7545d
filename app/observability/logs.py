"""Structured logs: one JSON object per line, with the request id (live) or batch id and idx (batch), and
secrets (relay keys, tokens, bearer values, provider keys) redacted before anything is written.

Context comes from, in order: `extra={...}` on the call, `log_context(...)` around the work (batch items),
and the Flask request's `g.request_id` (live requests).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import IO, Any

from app.redaction import redact

_CONTEXT_KEYS = ("request_id", "batch_id", "idx")
# Libraries that narrate every connection at INFO (pika: ~15 lines per AMQP connection).
QUIET_LOGGERS = {"pika": logging.WARNING}
_STANDARD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
_context: ContextVar[dict[str, Any] | None] = ContextVar("relay_log_context", default=None)


@contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add FIELDS (e.g. batch_id=..., idx=...) to every log line written inside the block, in this thread."""
    current = _context.get() or {}
    token = _context.set({**current, **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


class RedactingFilter(logging.Filter):
    """Rewrites the record's message with secrets redacted (so every handler sees the clean text)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage())
        record.args = None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, context ids, extras, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace(
                "+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        entry.update(_ambient_context())
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        return json.dumps(_clean(entry), default=str, ensure_ascii=False)


def _ambient_context() -> dict[str, Any]:
    found = dict(_context.get() or {})
    if "request_id" not in found and "flask" in sys.modules:
        from flask import g, has_request_context

        if has_request_context() and getattr(g, "request_id", None):
            found["request_id"] = g.request_id
    ordered = [k for k in _CONTEXT_KEYS if k in found] + sorted(set(found) - set(_CONTEXT_KEYS))
    return {k: found[k] for k in ordered}


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return redact(str(value))


def install_json_logging(level: int | str = logging.INFO, stream: IO[str] | None = None, *,
                         force: bool = False) -> logging.Handler | None:
    """Give the root logger one JSON handler on STREAM (stderr); like logging.basicConfig, do nothing when
    the root logger already has handlers (e.g. under pytest, or a host that set up logging) unless FORCE."""
    root = logging.getLogger()
    if root.handlers and not force:
        return None
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactingFilter())
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name, quiet_level in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(quiet_level)
    return handler
