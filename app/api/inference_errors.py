"""Errors on inference routes, in the caller's wire shape so official SDKs raise their own exceptions."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from flask.typing import ResponseReturnValue

from adapters.registry import wire_adapter
from app.errors import RelayError

_LOCATIONS = ("json", "query", "form", "files", "headers")  # webargs' outer keys of a validation error's messages


def shaped_error(shape: str, exc: RelayError) -> ResponseReturnValue:
    """EXC as the error object of SHAPE's wire format (Anthropic's on /messages, OpenAI's elsewhere); every one
    carries `code`, and names the parameter at fault where the format does (OpenAI's `param`)."""
    adapter = wire_adapter(shape)
    body = adapter.error_body(exc.status, exc.code, exc.message, error_param(exc))
    if exc.details is not None:
        body["error"]["details"] = exc.details
    return body, exc.status, adapter.caller_headers(exc.headers, datetime.now(UTC))


def shaped_headers(shape: str, headers: dict[str, str]) -> dict[str, str]:
    """HEADERS as SHAPE's SDK reads them: Anthropic's rate-limit header names on Anthropic's routes."""
    return wire_adapter(shape).caller_headers(headers, datetime.now(UTC))


def error_param(exc: RelayError) -> str | None:
    """The request parameter EXC is about: its class's `param`, or the first field its validation messages name."""
    named: str | None = getattr(exc, "param", None)
    if named is not None:
        return named
    details: Any = exc.details
    while isinstance(details, dict) and details:
        first = next(iter(details))
        if first in _LOCATIONS and isinstance(details[first], dict):
            details = details[first]
            continue
        return str(first) if first else None
    return None
