"""SQL of idempotency keys: the answer kept for (owner, key), and the lock that makes a retry wait for the first
request. Every function takes a connection; the caller owns the transaction (the lock lasts until it ends)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import Connection

Conn = Connection[Any]
KEPT_HOURS = 24  # how long an answer is kept: a retry later than that creates again
_LOCK_SPACE = "relay-idempotency:"


@dataclass(frozen=True)
class KeptAnswer:
    """The first answer given to a key: the request's fingerprint, and the status, media type and body to replay."""

    fingerprint: bytes
    status: int
    content_type: str
    body: bytes


def lock_key(conn: Conn, owner: str, key: str) -> None:
    """Wait until no other transaction holds (OWNER, KEY), then hold it until this transaction ends: concurrent
    requests with one key run one at a time, each finding the answer of the one before."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"{_LOCK_SPACE}{owner}:{key}",))


def kept_answer(conn: Conn, owner: str, key: str) -> KeptAnswer | None:
    """The answer kept for (OWNER, KEY) within the last KEPT_HOURS, if any."""
    row = conn.execute("SELECT fingerprint, status, content_type, body FROM idempotency_keys WHERE owner = %s"
                       " AND key = %s AND created_at > now() - make_interval(hours => %s)",
                       (owner, key, KEPT_HOURS)).fetchone()
    if row is None:
        return None
    return KeptAnswer(bytes(row["fingerprint"]), int(row["status"]), row["content_type"], bytes(row["body"]))


def keep_answer(conn: Conn, owner: str, key: str, answer: KeptAnswer) -> None:
    """Keep ANSWER for (OWNER, KEY), replacing one older than KEPT_HOURS; a few expired rows go on the way."""
    conn.execute("DELETE FROM idempotency_keys WHERE ctid IN (SELECT ctid FROM idempotency_keys"
                 " WHERE created_at < now() - make_interval(hours => %s) LIMIT 100)", (KEPT_HOURS,))
    conn.execute("INSERT INTO idempotency_keys (owner, key, fingerprint, status, content_type, body)"
                 " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (owner, key) DO UPDATE SET"
                 " fingerprint = excluded.fingerprint, status = excluded.status,"
                 " content_type = excluded.content_type, body = excluded.body, created_at = now()",
                 (owner, key, answer.fingerprint, answer.status, answer.content_type, answer.body))
