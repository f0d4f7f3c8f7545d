"""Credential SQL: relay keys, the values they have had, and inference tokens."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import Connection, sql

from app.credentials.model import KeyValueRecord, RelayKeyRecord, RelayKeyView, TokenRecord, TokenView

_KEY_COLUMNS = ("k.id, k.name, k.prefix, k.principal_kind, k.principal_id, k.policy_id, k.project_id, k.team_id,"
                " k.state, k.expires_at, k.created_at, k.updated_at")
_KEY_VIEW = ("SELECT " + _KEY_COLUMNS + ", p.name AS policy_name, pr.name AS project_name, t.name AS team_name,"
             " CASE WHEN p.deleted_at IS NOT NULL THEN 'deleted' WHEN NOT p.enabled THEN 'disabled'"
             " ELSE 'active' END AS policy_state,"
             " COALESCE(u.name, s.name) AS principal_name"
             " FROM relay_keys k JOIN policies p ON p.id = k.policy_id"
             " LEFT JOIN projects pr ON pr.id = k.project_id LEFT JOIN teams t ON t.id = k.team_id"
             " LEFT JOIN users u ON k.principal_kind = 'user' AND u.id = k.principal_id"
             " LEFT JOIN service_accounts s ON k.principal_kind = 'service_account' AND s.id = k.principal_id")
_TOKEN_COLUMNS = "t.id, t.user_id, t.expires_at, t.revoked_at, t.created_at"  # noqa: S105
# Tokens that expired longer ago than this are left out of the cache; a late recheck reads the row.
TOKEN_CACHE_HORIZON = "7 days"  # noqa: S105


def load_relay_keys(conn: Connection[Any]) -> list[RelayKeyRecord]:
    """Every relay key (the cache keeps all of them; revoked ones answer key_revoked)."""
    rows = conn.execute("SELECT " + _KEY_COLUMNS + " FROM relay_keys k").fetchall()
    return [_key(r) for r in rows]


def load_key_values(conn: Connection[Any]) -> list[KeyValueRecord]:
    """Every value every relay key has had."""
    rows = conn.execute("SELECT key_hash, relay_key_id, prefix, created_at, retired_at, valid_until"
                        " FROM relay_key_values").fetchall()
    return [KeyValueRecord(key_hash=bytes(r["key_hash"]), relay_key_id=r["relay_key_id"], prefix=r["prefix"],
                           created_at=r["created_at"], retired_at=r["retired_at"], valid_until=r["valid_until"])
            for r in rows]


def load_recent_tokens(conn: Connection[Any]) -> list[TokenRecord]:
    """Tokens not expired, or expired recently enough to still answer token_expired from the cache."""
    rows = conn.execute("SELECT " + _TOKEN_COLUMNS + " FROM inference_tokens t"
                        " WHERE t.expires_at > now() - interval '" + TOKEN_CACHE_HORIZON + "'").fetchall()
    return [_token(r) for r in rows]


def insert_relay_key(conn: Connection[Any], values: dict[str, Any]) -> UUID:
    """Insert a relay key row (name, prefix, principal_kind, principal_id, policy_id, project_id, team_id,
    expires_at); return its id."""
    cols = list(values)
    query = sql.SQL("INSERT INTO relay_keys ({}) VALUES ({}) RETURNING id").format(
        sql.SQL(", ").join(map(sql.Identifier, cols)), sql.SQL(", ").join(sql.Placeholder() * len(cols)))
    row = conn.execute(query, [values[c] for c in cols]).fetchone()
    assert row is not None
    return UUID(str(row["id"]))


def insert_key_value(conn: Connection[Any], key_hash: bytes, relay_key_id: UUID, prefix: str) -> None:
    """Record a new current value for a relay key."""
    conn.execute("INSERT INTO relay_key_values (key_hash, relay_key_id, prefix) VALUES (%s, %s, %s)",
                 (key_hash, relay_key_id, prefix))


def retire_current_value(conn: Connection[Any], relay_key_id: UUID, grace_seconds: int) -> None:
    """Retire a key's current value: it keeps working for GRACE_SECONDS, then it is rotated out."""
    conn.execute("UPDATE relay_key_values SET retired_at = now(),"
                 " valid_until = now() + make_interval(secs => %s)"
                 " WHERE relay_key_id = %s AND retired_at IS NULL", (grace_seconds, relay_key_id))


def get_relay_key(conn: Connection[Any], key_id: UUID, *, lock: bool = False) -> RelayKeyRecord | None:
    """One relay key by id (FOR UPDATE with LOCK)."""
    query = "SELECT " + _KEY_COLUMNS + " FROM relay_keys k WHERE k.id = %s" + (" FOR UPDATE" if lock else "")
    row = conn.execute(query, (key_id,)).fetchone()  # type: ignore[arg-type]
    return _key(row) if row else None


def update_relay_key(conn: Connection[Any], key_id: UUID, *, state: str | None = None,
                     prefix: str | None = None) -> None:
    """Change a key's state and/or displayed prefix; touch updated_at."""
    conn.execute("UPDATE relay_keys SET state = COALESCE(%s, state), prefix = COALESCE(%s, prefix),"
                 " updated_at = now() WHERE id = %s", (state, prefix, key_id))


def list_relay_key_views(conn: Connection[Any], key_id: UUID | None = None) -> list[RelayKeyView]:
    """Relay keys with their names resolved, newest first (one key with KEY_ID)."""
    where = " WHERE k.id = %s" if key_id else ""
    rows = conn.execute(_KEY_VIEW + where + " ORDER BY k.created_at DESC, k.id",  # type: ignore[arg-type]
                        (key_id,) if key_id else ()).fetchall()
    return [RelayKeyView(key=_key(r), principal=r["principal_name"], policy=r["policy_name"],
                         project=r["project_name"], team=r["team_name"], policy_state=r["policy_state"])
            for r in rows]


def insert_token(conn: Connection[Any], user_id: UUID, expires_at: datetime) -> TokenRecord:
    """Record a minted token; its id goes into the signed token."""
    row = conn.execute("INSERT INTO inference_tokens (user_id, expires_at) VALUES (%s, %s)"
                       " RETURNING id, user_id, expires_at, revoked_at, created_at", (user_id, expires_at)).fetchone()
    assert row is not None
    return _token(row)


def get_token(conn: Connection[Any], token_id: UUID) -> TokenRecord | None:
    """One token by id."""
    row = conn.execute("SELECT " + _TOKEN_COLUMNS + " FROM inference_tokens t WHERE t.id = %s",
                       (token_id,)).fetchone()
    return _token(row) if row else None


def revoke_token(conn: Connection[Any], token_id: UUID) -> bool:
    """Revoke a token; True when it was not revoked before."""
    cur = conn.execute("UPDATE inference_tokens SET revoked_at = now() WHERE id = %s AND revoked_at IS NULL",
                       (token_id,))
    return cur.rowcount > 0


def list_token_views(conn: Connection[Any], user_id: UUID | None = None,
                     token_id: UUID | None = None) -> list[TokenView]:
    """Tokens with their user's name, newest first; optionally one user's or one token."""
    rows = conn.execute("SELECT " + _TOKEN_COLUMNS + ", u.name AS user_name FROM inference_tokens t"
                        " JOIN users u ON u.id = t.user_id"
                        " WHERE (%(user)s::uuid IS NULL OR t.user_id = %(user)s)"
                        " AND (%(token)s::uuid IS NULL OR t.id = %(token)s)"
                        " ORDER BY t.created_at DESC, t.id", {"user": user_id, "token": token_id}).fetchall()
    return [TokenView(token=_token(r), user=r["user_name"]) for r in rows]


def _key(r: dict[str, Any]) -> RelayKeyRecord:
    return RelayKeyRecord(id=r["id"], name=r["name"], prefix=r["prefix"], principal_kind=r["principal_kind"],
                          principal_id=r["principal_id"], policy_id=r["policy_id"], project_id=r["project_id"],
                          team_id=r["team_id"], state=r["state"], expires_at=r["expires_at"],
                          created_at=r["created_at"], updated_at=r["updated_at"])


def _token(r: dict[str, Any]) -> TokenRecord:
    return TokenRecord(id=r["id"], user_id=r["user_id"], expires_at=r["expires_at"], revoked_at=r["revoked_at"],
                       created_at=r["created_at"])
