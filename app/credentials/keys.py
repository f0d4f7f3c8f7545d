"""Relay keys: create, list, disable / enable / revoke, rotate (with an optional grace period)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from psycopg import Connection

from app.catalog import store as catalog_store
from app.catalog.writes import catalog_write
from app.credentials import store
from app.credentials.errors import RelayKeyIsRevoked, RelayKeyNotFound
from app.credentials.model import RelayKeyView
from app.errors import ValidationFailed
from app.runtime import Runtime

SECRET_PREFIX = "rk_"  # noqa: S105  (a public marker, not a secret)
DISPLAY_PREFIX_LENGTH = 10
MAX_GRACE_SECONDS = 30 * 86_400
PRINCIPAL_TABLES = {"user": "users", "service_account": "service_accounts"}
_TARGET_STATES = {"disable": "disabled", "enable": "active", "revoke": "revoked"}


@dataclass(frozen=True)
class IssuedKey:
    """A relay key together with its secret: returned once, by create and rotate."""

    view: RelayKeyView
    secret: str = field(repr=False)


def generate_secret() -> str:
    """A new relay key secret: `rk_` + 43 URL-safe characters (256 random bits)."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> bytes:
    """The SHA-256 of a relay key secret: the only form in which it is stored."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def create_key(runtime: Runtime, *, principal_kind: str, principal: str, policy: str, project: str | None = None,
               team: str | None = None, name: str | None = None, expires_at: datetime | None = None) -> IssuedKey:
    """Create a relay key for a principal; project and team default to the principal's."""
    if principal_kind not in PRINCIPAL_TABLES:
        raise ValidationFailed(details={"principal_kind": ["must be one of user, service_account"]})
    if expires_at is not None and (expires_at.tzinfo is None or expires_at <= datetime.now(UTC)):
        raise ValidationFailed(details={"expires_at": ["must be a time in the future, with a timezone"]})
    with catalog_write(runtime) as write:
        conn = write.conn
        who = _named(conn, PRINCIPAL_TABLES[principal_kind], principal, "principal")
        found = catalog_store.find_live_policy(conn, policy)
        if found is None:
            raise ValidationFailed(details={"policy": [f"no policy named {policy!r}"]})
        secret = generate_secret()
        prefix = secret[:DISPLAY_PREFIX_LENGTH]
        key_id = store.insert_relay_key(conn, {
            "name": name, "prefix": prefix, "principal_kind": principal_kind, "principal_id": who["id"],
            "policy_id": found["id"], "expires_at": expires_at,
            "project_id": _named(conn, "projects", project, "project")["id"] if project else who["project_id"],
            "team_id": _named(conn, "teams", team, "team")["id"] if team else who["team_id"]})
        store.insert_key_value(conn, hash_secret(secret), key_id, prefix)
        write.changed = True
        view = store.list_relay_key_views(conn, key_id)[0]
    return IssuedKey(view=view, secret=secret)


def list_keys(runtime: Runtime) -> list[RelayKeyView]:
    """Every relay key, newest first (never a secret)."""
    with runtime.pool.connection() as conn:
        return store.list_relay_key_views(conn)


def get_key(runtime: Runtime, key_id: UUID) -> RelayKeyView:
    """One relay key; RelayKeyNotFound."""
    with runtime.pool.connection() as conn:
        return _view(conn, key_id)


def change_key_state(runtime: Runtime, key_id: UUID, action: str) -> RelayKeyView:
    """Apply ACTION (`disable`, `enable`, `revoke`); revocation is final."""
    target = _TARGET_STATES[action]
    with catalog_write(runtime) as write:
        key = store.get_relay_key(write.conn, key_id, lock=True)
        if key is None:
            raise RelayKeyNotFound(message="no relay key with this id")
        if key.state == "revoked" and target != "revoked":
            raise RelayKeyIsRevoked(message="the relay key is revoked; revocation is final")
        if key.state != target:
            store.update_relay_key(write.conn, key_id, state=target)
            write.changed = True
        view = _view(write.conn, key_id)
    return view


def rotate_key(runtime: Runtime, key_id: UUID, grace_seconds: int = 0) -> IssuedKey:
    """Give a key a new secret; the old one works for GRACE_SECONDS more, then it is rotated out."""
    if isinstance(grace_seconds, bool) or not 0 <= grace_seconds <= MAX_GRACE_SECONDS:
        raise ValidationFailed(details={"grace_seconds": [f"must be between 0 and {MAX_GRACE_SECONDS}"]})
    with catalog_write(runtime) as write:
        key = store.get_relay_key(write.conn, key_id, lock=True)
        if key is None:
            raise RelayKeyNotFound(message="no relay key with this id")
        if key.state == "revoked":
            raise RelayKeyIsRevoked(message="the relay key is revoked; revocation is final")
        secret = generate_secret()
        prefix = secret[:DISPLAY_PREFIX_LENGTH]
        store.retire_current_value(write.conn, key_id, grace_seconds)
        store.insert_key_value(write.conn, hash_secret(secret), key_id, prefix)
        store.update_relay_key(write.conn, key_id, prefix=prefix)
        write.changed = True
        view = _view(write.conn, key_id)
    return IssuedKey(view=view, secret=secret)


def key_fields(view: RelayKeyView, now: datetime | None = None) -> dict[str, Any]:
    """A key as the admin API and the CLI show it (without any secret)."""
    key = view.key
    return {"id": key.id, "name": key.name, "prefix": key.prefix, "policy": view.policy, "project": view.project,
            "team": view.team, "principal_kind": key.principal_kind, "principal": view.principal,
            "expires_at": key.expires_at, "state": view.state(now or datetime.now(UTC)),
            "created_at": key.created_at, "updated_at": key.updated_at}


def _view(conn: Connection[Any], key_id: UUID) -> RelayKeyView:
    views = store.list_relay_key_views(conn, key_id)
    if not views:
        raise RelayKeyNotFound(message="no relay key with this id")
    return views[0]


def _named(conn: Connection[Any], table: str, name: str, field_name: str) -> dict[str, Any]:
    row = catalog_store.find_named(conn, table, name)
    if row is None:
        what = {"users": "user", "service_accounts": "service account"}.get(table, table[:-1])
        raise ValidationFailed(details={field_name: [f"no {what} named {name[:200]!r}"]})
    return row
