"""Relay's error classes: each carries an HTTP status and a stable code, turned into JSON in one place."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from werkzeug.exceptions import HTTPException

# The codes of werkzeug's HTTP errors (a 404 route, a 405 method, ...), for Relay's answers and the compatible APIs'.
HTTP_CODES = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 406: "not_acceptable", 409: "conflict", 413: "payload_too_large",
    415: "unsupported_media_type", 422: "invalid_request", 429: "rate_limited",
}


class RelayError(Exception):
    """Base for every error Relay answers with; `code` is stable, `message` is for humans."""

    status = 400
    code = "bad_request"

    def __init__(self, message: str | None = None, *, details: Any = None, headers: dict[str, str] | None = None,
                 status: int | None = None, code: str | None = None) -> None:
        """A condition is a class (its status and code); CODE and STATUS are only for an error translated from one
        whose code comes from elsewhere (another API's answer, an adapter's error, a werkzeug HTTP error)."""
        self.code = code or type(self).code
        self.message = message or self.code.replace("_", " ")
        self.details = details
        self.headers = headers or {}
        if status is not None:
            self.status = status
        super().__init__(self.message)

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            body["details"] = self.details
        return {"error": body}


class InternalError(RelayError):
    """Anything Relay did not expect: logged, never shown."""

    status = 500
    code = "internal_error"


class RequestTimeout(RelayError):
    """The request body stopped arriving (the server's per-connection I/O deadline passed)."""

    status = 408
    code = "request_timeout"


class BadRequest(RelayError):
    status = 400
    code = "bad_request"


class ValidationFailed(RelayError):
    status = 400
    code = "invalid_request"


class InvalidJson(BadRequest):
    """The body is not valid UTF-8 JSON."""

    code = "invalid_json"


class BodyNotObject(BadRequest):
    """The body is JSON, but not the object the route takes."""

    code = "invalid_body"


class Unauthorized(RelayError):
    status = 401
    code = "unauthorized"


class Forbidden(RelayError):
    status = 403
    code = "forbidden"


class NotFound(RelayError):
    status = 404
    code = "not_found"


class Conflict(RelayError):
    status = 409
    code = "conflict"


class PayloadTooLarge(RelayError):
    status = 413
    code = "payload_too_large"


class UnsupportedMediaType(RelayError):
    status = 415
    code = "unsupported_media_type"


class RateLimited(RelayError):
    status = 429
    code = "rate_limited"


class UpstreamFailed(RelayError):
    status = 502
    code = "upstream_failed"


class ServiceUnavailable(RelayError):
    status = 503
    code = "service_unavailable"


class DatabaseUnavailable(ServiceUnavailable):
    code = "database_unavailable"


class BrokerUnavailable(ServiceUnavailable):
    code = "broker_unavailable"


class InsufficientStorage(RelayError):
    status = 507
    code = "insufficient_storage"


def from_http_exception(exc: HTTPException) -> RelayError:
    """A werkzeug or webargs HTTP error as a RelayError: argument validation is 400 invalid_request with the fields'
    messages; any other keeps its status, with its code from HTTP_CODES."""
    data = getattr(exc, "data", None)  # flask-smorest / webargs validation messages
    if isinstance(data, dict) and "messages" in data:
        return ValidationFailed(message="request failed validation", details=data["messages"])
    status = exc.code or 500
    code = HTTP_CODES.get(status, "http_error")
    return RelayError(exc.description or code, code=code, status=status)
