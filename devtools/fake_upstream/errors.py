"""Errors the fake upstream answers with, rendered in the OpenAI or the Anthropic error shape."""

from __future__ import annotations

import json
import uuid
from typing import Any

from aiohttp import web

OPENAI = "openai"
ANTHROPIC = "anthropic"

_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                    500: "api_error", 529: "overloaded_error"}


class UpstreamError(Exception):
    """An error answer: HTTP status, message, and the OpenAI `param` / `code` fields."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}


class InvalidRequest(UpstreamError):
    """A 400 for a body the real API would refuse."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(400, message, param=param, code=code)


def request_id() -> str:
    """A request id like the providers' (`req_...`)."""
    return "req_" + uuid.uuid4().hex


def openai_error_type(status: int) -> str:
    """OpenAI's `error.type` for an HTTP status."""
    if status == 429:
        return "requests"
    return "server_error" if status >= 500 else "invalid_request_error"


def anthropic_error_type(status: int) -> str:
    """Anthropic's `error.type` for an HTTP status."""
    if status in _ANTHROPIC_TYPES:
        return _ANTHROPIC_TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def error_body(family: str, error: UpstreamError, req_id: str) -> dict[str, Any]:
    """The JSON body of `error` in the shape of the API family."""
    if family == ANTHROPIC:
        return {"type": "error", "error": {"type": anthropic_error_type(error.status), "message": error.message},
                "request_id": req_id}
    return {"error": {"message": error.message, "type": openai_error_type(error.status),
                      "param": error.param, "code": error.code}}


def error_response(family: str, error: UpstreamError) -> web.Response:
    """The HTTP answer for `error` in the shape of the API family, with the provider's request-id header."""
    req_id = request_id()
    headers = {"x-request-id": req_id, **error.headers}
    if family == ANTHROPIC:
        headers["request-id"] = req_id
    return web.Response(status=error.status, text=json.dumps(error_body(family, error, req_id)),
                        content_type="application/json", headers=headers)
