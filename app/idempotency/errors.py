"""The errors of idempotency keys."""

from __future__ import annotations

from app.errors import BadRequest, Conflict


class IdempotencyKeyReused(Conflict):
    """The key was used in the last 24 h by this caller for another request (another route or body)."""

    code = "idempotency_key_reused"


class InvalidIdempotencyKey(BadRequest):
    """The `Idempotency-Key` header is empty, too long or not printable ASCII."""

    code = "invalid_idempotency_key"
