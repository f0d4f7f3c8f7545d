"""Errors on inference routes, in the caller's wire shape so official SDKs raise their own exceptions."""

from __future__ import annotations

from flask.typing import ResponseReturnValue

from adapters import get_adapter
from app.errors import RelayError


def shaped_error(shape: str, exc: RelayError) -> ResponseReturnValue:
    """EXC as an Anthropic error object on /messages, an OpenAI error object elsewhere; both carry `code`."""
    adapter = get_adapter("anthropic" if shape == "anthropic" else "openai")
    body = adapter.error_body(exc.status, exc.code, exc.message)
    if exc.details is not None:
        body["error"]["details"] = exc.details
    return body, exc.status, exc.headers
