"""Inference tokens `rt_<base64url(json{tid,uid,exp})>.<base64url(hmac-sha256)>`: minted per user, revocable by id."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any
from uuid import UUID

from app.catalog import store as catalog_store
from app.catalog.secrets import TOKEN_PURPOSE, derive_key
from app.catalog.writes import catalog_write
from app.credentials import store
from app.credentials.errors import TokenNotFound
from app.credentials.model import TokenView
from app.errors import ValidationFailed
from app.runtime import Runtime

TOKEN_PREFIX = "rt_"  # noqa: S105  (a public marker, not a secret)
MAX_TTL_SECONDS = 366 * 86_400
MAX_TOKEN_LENGTH = 1024


@dataclass(frozen=True)
class TokenClaims:
    token_id: UUID
    user_id: UUID
    expires_at: int  # Unix seconds


@dataclass(frozen=True)
class IssuedToken:
    """A token record with the token itself: returned once, by mint."""

    view: TokenView
    token: str = field(repr=False)


@lru_cache(maxsize=4)
def signing_key(secret_key: str) -> bytes:
    """The HMAC key for tokens, derived from RELAY_SECRET_KEY (computed once per secret)."""
    return derive_key(secret_key, TOKEN_PURPOSE)


def encode_token(key: bytes, claims: TokenClaims) -> str:
    """The signed token text for CLAIMS."""
    body = json.dumps({"tid": str(claims.token_id), "uid": str(claims.user_id), "exp": claims.expires_at},
                      separators=(",", ":")).encode()
    payload = _b64(body)
    return f"{TOKEN_PREFIX}{payload}.{_signature(key, payload)}"


def decode_token(key: bytes, text: str) -> TokenClaims | None:
    """The claims of a well-formed token whose signature is right; None for anything else."""
    if not text.startswith(TOKEN_PREFIX) or len(text) > MAX_TOKEN_LENGTH:
        return None
    payload, sep, signature = text[len(TOKEN_PREFIX):].partition(".")
    if not sep or not hmac.compare_digest(_signature(key, payload).encode(), signature.encode("utf-8", "replace")):
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        exp = data["exp"]
        if not isinstance(exp, int) or isinstance(exp, bool):
            return None
        return TokenClaims(token_id=UUID(data["tid"]), user_id=UUID(data["uid"]), expires_at=exp)
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None


def mint_token(runtime: Runtime, user: str, ttl_seconds: int) -> IssuedToken:
    """Mint a token for USER valid for at least TTL_SECONDS (its expiry is whole seconds, rounded up)."""
    if isinstance(ttl_seconds, bool) or not 1 <= ttl_seconds <= MAX_TTL_SECONDS:
        raise ValidationFailed(details={"ttl_seconds": [f"must be between 1 and {MAX_TTL_SECONDS}"]})
    with catalog_write(runtime) as write:
        row = catalog_store.find_named(write.conn, "users", user)
        if row is None:
            raise ValidationFailed(details={"user": [f"no user named {user[:200]!r}"]})
        expires = math.ceil(time.time()) + ttl_seconds  # rounded down, a 1 s token could be born expired
        record = store.insert_token(write.conn, row["id"], datetime.fromtimestamp(expires, UTC))
        write.changed = True
    token = encode_token(signing_key(runtime.settings.secret_key),
                         TokenClaims(token_id=record.id, user_id=record.user_id, expires_at=expires))
    return IssuedToken(view=TokenView(token=record, user=row["name"]), token=token)


def list_tokens(runtime: Runtime, user: str | None = None) -> list[TokenView]:
    """Tokens, newest first; only USER's when given (never the tokens themselves)."""
    with runtime.pool.connection() as conn:
        if user is None:
            return store.list_token_views(conn)
        row = catalog_store.find_named(conn, "users", user)
        return store.list_token_views(conn, user_id=row["id"]) if row else []


def revoke_token(runtime: Runtime, token_id: UUID) -> TokenView:
    """Revoke one token (idempotent); TokenNotFound."""
    with catalog_write(runtime) as write:
        write.changed = store.revoke_token(write.conn, token_id)
        views = store.list_token_views(write.conn, token_id=token_id)
        if not views:
            raise TokenNotFound(message="no token with this id")
    return views[0]


def token_fields(view: TokenView, now: datetime | None = None) -> dict[str, Any]:
    """A token as the admin API and the CLI show it (without the token text)."""
    record = view.token
    return {"id": record.id, "user": view.user, "expires_at": record.expires_at, "revoked_at": record.revoked_at,
            "created_at": record.created_at, "state": record.effective_state(now or datetime.now(UTC))}


def _signature(key: bytes, payload: str) -> str:
    return _b64(hmac.new(key, payload.encode("utf-8", "replace"), hashlib.sha256).digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
