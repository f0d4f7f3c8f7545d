"""Errors raised by the adapters: plain exceptions with an HTTP status and a stable code (the app translates them)."""

from __future__ import annotations


class AdapterError(Exception):
    """Base: `status` and `code` are stable, `message` is for humans."""

    status = 400
    code = "adapter_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CrossShapeDispatch(AdapterError):
    """A batch item routed to a binding of another shape (batch items are never translated)."""

    status = 400
    code = "cross_shape_dispatch"


class CrossShapeUnsupported(AdapterError):
    """A live request routed to a binding whose shape Relay does not translate it to."""

    status = 400
    code = "cross_shape_unsupported"


class UnknownShape(AdapterError):
    """A shape or binding adapter name Relay does not know."""

    status = 400
    code = "unknown_shape"
