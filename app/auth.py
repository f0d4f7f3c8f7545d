"""Credential -> Caller: relay keys and inference tokens checked against the cached snapshot (no query per request)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Protocol

import psycopg

from app.access.cache import CatalogCache, get_catalog, get_policy
from app.access.snapshot import CatalogSnapshot
from app.auth_model import Caller
from app.credentials import store as credential_store
from app.credentials.errors import (
    InvalidCredential,
    KeyDisabled,
    KeyExpired,
    KeyRevoked,
    KeyRotatedOut,
    MissingCredential,
    TokenExpired,
    TokenRevoked,
)
from app.credentials.keys import hash_secret
from app.credentials.model import KeyValueRecord, RelayKeyRecord, TokenRecord
from app.credentials.tokens import TOKEN_PREFIX, decode_token, signing_key
from app.errors import DatabaseUnavailable
from app.runtime import Runtime

__all__ = ["authenticate", "credential_from_headers", "get_policy", "recheck_caller"]
MAX_SECRET_LENGTH = 1024


class HeaderSource(Protocol):
    """Request headers: a werkzeug Headers or a plain mapping."""

    def get(self, key: str, /) -> str | None: ...

    def items(self) -> Iterable[tuple[str, str]]: ...


def credential_from_headers(headers: HeaderSource) -> str | None:
    """The bearer secret from `Authorization: Bearer ...`, else from `x-api-key`; None when neither is given."""
    scheme, _, value = _header(headers, "authorization").strip().partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return _header(headers, "x-api-key").strip() or None


def authenticate(runtime: Runtime, secret: str | None) -> Caller:
    """The Caller for a relay key or token; a 401 RelayError whose code names the failed check."""
    if not secret:
        raise MissingCredential(message="send a relay key or token as `Authorization: Bearer ...` or `x-api-key`")
    if len(secret) > MAX_SECRET_LENGTH:
        raise InvalidCredential(message="invalid credential")
    cache = get_catalog(runtime)
    if secret.startswith(TOKEN_PREFIX):
        return _token_caller(runtime, cache, secret)
    key_hash = hash_secret(secret)
    snapshot, value = _find_value(cache, key_hash)
    key = _check_key(snapshot, value)
    return Caller(credential_kind="relay_key", credential_id=key.id, relay_key_hash=key_hash,
                  principal_kind=key.principal_kind, principal_id=key.principal_id, policy_id=key.policy_id,
                  project_id=key.project_id, team_id=key.team_id)


def recheck_caller(runtime: Runtime, caller: Caller) -> None:
    """Raise the same 401 errors as authenticate when the caller's key value or token is no longer valid."""
    cache = get_catalog(runtime)
    if caller.credential_kind == "relay_key":
        if caller.relay_key_hash is None:
            raise InvalidCredential(message="invalid credential")
        snapshot, value = _find_value(cache, caller.relay_key_hash)
        _check_key(snapshot, value)
        return
    snapshot = cache.snapshot()
    record = snapshot.tokens.get(caller.credential_id)
    if record is None:
        snapshot = cache.check_for_changes()
        record = snapshot.tokens.get(caller.credential_id) or _token_from_database(runtime, caller)
    if record is None or record.user_id != caller.principal_id:
        raise InvalidCredential(message="invalid credential")
    if record.expires_at <= datetime.now(UTC):
        raise TokenExpired(message="the token has expired")
    if record.revoked_at is not None:
        raise TokenRevoked(message="the token was revoked")
    if snapshot.principal("user", record.user_id) is None:
        raise InvalidCredential(message="invalid credential")


def _find_value(cache: CatalogCache, key_hash: bytes) -> tuple[CatalogSnapshot, KeyValueRecord]:
    """The key value with KEY_HASH; on a miss, one version check in case the key was created on another replica."""
    snapshot = cache.snapshot()
    value = snapshot.key_values.get(key_hash)
    if value is None:
        snapshot = cache.check_for_changes()
        value = snapshot.key_values.get(key_hash)
    if value is None:
        raise InvalidCredential(message="invalid credential")
    return snapshot, value


def _check_key(snapshot: CatalogSnapshot, value: KeyValueRecord) -> RelayKeyRecord:
    """The key VALUE belongs to, when it may be used now; otherwise the error naming why not."""
    key = snapshot.relay_keys.get(value.relay_key_id)
    if key is None or snapshot.principal(key.principal_kind, key.principal_id) is None:
        raise InvalidCredential(message="invalid credential")
    now = datetime.now(UTC)
    if key.state == "revoked":
        raise KeyRevoked(message="the relay key was revoked")
    if key.state == "disabled":
        raise KeyDisabled(message="the relay key is disabled")
    if key.expires_at is not None and key.expires_at <= now:
        raise KeyExpired(message="the relay key has expired")
    if value.rotated_out(now):
        raise KeyRotatedOut(message="this relay key value was rotated out; use the key's new value")
    return key


def _token_caller(runtime: Runtime, cache: CatalogCache, secret: str) -> Caller:
    claims = decode_token(signing_key(runtime.settings.secret_key), secret)
    if claims is None:
        raise InvalidCredential(message="invalid credential")
    if claims.expires_at <= time.time():
        raise TokenExpired(message="the token has expired")
    snapshot = cache.snapshot()
    record = snapshot.tokens.get(claims.token_id)
    if record is None:
        snapshot = cache.check_for_changes()
        record = snapshot.tokens.get(claims.token_id)
    if record is None or record.user_id != claims.user_id:
        raise InvalidCredential(message="invalid credential")
    if record.revoked_at is not None:
        raise TokenRevoked(message="the token was revoked")
    user = snapshot.principal("user", claims.user_id)
    if user is None or user.policy_id is None:
        raise InvalidCredential(message="invalid credential")
    return Caller(credential_kind="inference_token", credential_id=record.id, relay_key_hash=None,
                  principal_kind="user", principal_id=user.id, policy_id=user.policy_id,
                  project_id=user.project_id, team_id=user.team_id)


def _token_from_database(runtime: Runtime, caller: Caller) -> TokenRecord | None:
    """A token too long expired to be cached (rare: a batch item run long after submission)."""
    try:
        with runtime.pool.connection() as conn:
            return credential_store.get_token(conn, caller.credential_id)
    except psycopg.Error as exc:
        raise DatabaseUnavailable(message="cannot check the token now") from exc


def _header(headers: HeaderSource, name: str) -> str:
    value = headers.get(name)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value or ""
