"""Credential errors: each 401 code says which check failed, never whether another value exists."""

from __future__ import annotations

from app.errors import Conflict, NotFound, Unauthorized


class MissingCredential(Unauthorized):
    code = "missing_credential"


class InvalidCredential(Unauthorized):
    code = "invalid_credential"


class KeyDisabled(Unauthorized):
    code = "key_disabled"


class KeyRevoked(Unauthorized):
    code = "key_revoked"


class KeyExpired(Unauthorized):
    code = "key_expired"


class KeyRotatedOut(Unauthorized):
    code = "key_rotated_out"


class TokenExpired(Unauthorized):
    code = "token_expired"


class TokenRevoked(Unauthorized):
    code = "token_revoked"


class RelayKeyNotFound(NotFound):
    code = "relay_key_not_found"


class TokenNotFound(NotFound):
    code = "token_not_found"


class RelayKeyIsRevoked(Conflict):
    """Revocation is final: a revoked key cannot be enabled, disabled or rotated."""

    code = "relay_key_revoked"
