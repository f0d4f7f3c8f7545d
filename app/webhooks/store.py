"""Webhook SQL: destinations of an ended batch, events and their deliveries, the outbox, claims and attempts, and
the operator's reads. Every function takes a connection; the caller owns the transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import Connection

from schemas.batches import FINAL_STATES

Row = dict[str, Any]
Conn = Connection[Any]
CHANNEL = "relay_webhooks"  # NOTIFYed when deliveries become due: the workers' outbox publishes them
INTERRUPTED = "interrupted: the attempt's worker stopped before it recorded an outcome"


def endpoints_for(conn: Conn, project_id: UUID | None, team_id: UUID | None) -> list[Row]:
    """The catalog endpoints of a project and of a team: id, url, events and destination (project:<name>, ...)."""
    return conn.execute(
        "SELECT e.id, e.url, e.events, 'project:' || p.name AS destination FROM webhook_endpoints e"
        " JOIN projects p ON p.id = e.project_id WHERE e.project_id = %(project)s"
        " UNION ALL SELECT e.id, e.url, e.events, 'team:' || t.name FROM webhook_endpoints e"
        " JOIN teams t ON t.id = e.team_id WHERE e.team_id = %(team)s ORDER BY destination, url",
        {"project": project_id, "team": team_id}).fetchall()


def final_counts(conn: Conn, batch_id: UUID) -> dict[str, int]:
    """The batch's final items by state, from its progress counters."""
    row = conn.execute("SELECT coalesce(sum(completed), 0) AS completed, coalesce(sum(discarded), 0) AS discarded,"
                       " coalesce(sum(cancelled), 0) AS cancelled FROM batch_progress WHERE batch_id = %s",
                       (batch_id,)).fetchone()
    return {state: int(row[state]) for state in FINAL_STATES} if row else {}


def any_expired(conn: Conn, batch_id: UUID) -> bool:
    """Whether the batch's expiry stopped any of its items (scans its items: asked only after an expiry)."""
    row = conn.execute("SELECT EXISTS (SELECT 1 FROM batch_items WHERE batch_id = %s AND error_code = 'batch_expired')"
                       " AS found", (batch_id,)).fetchone()
    return bool(row and row["found"])


def insert_event(conn: Conn, event_id: UUID, batch_id: UUID, kind: str, body: str) -> bool:
    """The batch's one event; False when it already has one."""
    return conn.execute("INSERT INTO webhook_events (id, batch_id, type, body) VALUES (%s, %s, %s, %s)"
                        " ON CONFLICT (batch_id) DO NOTHING", (event_id, batch_id, kind, body)).rowcount == 1


def insert_deliveries(conn: Conn, event_id: UUID, rows: Sequence[tuple[UUID | None, str, str, bytes | None]]) -> None:
    """One pending delivery per (endpoint id, destination, url, own secret), due now."""
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO webhook_deliveries (event_id, endpoint_id, destination, url, secret_enc)"
                        " VALUES (%s, %s, %s, %s, %s)", [(event_id, *row) for row in rows])


def notify(conn: Conn) -> None:
    """Wake the workers' outbox when this transaction commits."""
    conn.execute("SELECT pg_notify(%s, '')", (CHANNEL,))


# -- The outbox: deliveries due for a message ------------------------------------------------------------------

_DUE = """
WITH due AS (
    SELECT id FROM webhook_deliveries
    WHERE state = 'pending' AND next_attempt_at <= now() AND (lease_until IS NULL OR lease_until < now())
      AND (sent_at IS NULL OR next_attempt_at < now() - make_interval(secs => %(lost)s))
    ORDER BY next_attempt_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED
)
UPDATE webhook_deliveries d SET token = gen_random_uuid(), sent_at = now(), next_attempt_at = now()
FROM due WHERE d.id = due.id RETURNING d.id, d.token
"""


def take_due(conn: Conn, *, lost_after_s: float, limit: int) -> list[tuple[UUID, UUID]]:
    """(id, new token) of deliveries to publish a message for: due and never sent, or sent LOST_AFTER_S ago
    without an attempt (the message was lost). The new token makes any older message of theirs stale."""
    rows = conn.execute(_DUE, {"lost": lost_after_s, "limit": limit}).fetchall()
    return [(r["id"], r["token"]) for r in rows]


def unsend(conn: Conn, sent: Sequence[tuple[UUID, UUID]]) -> None:
    """The messages of SENT could not be published: due again at the next pass."""
    conn.execute("UPDATE webhook_deliveries d SET sent_at = NULL, token = NULL FROM unnest(%s::uuid[], %s::uuid[])"
                 " AS s(id, token) WHERE d.id = s.id AND d.token = s.token",
                 ([i for i, _ in sent], [t for _, t in sent]))


# -- One attempt: claim, then its outcome ------------------------------------------------------------------------

_CLAIM = """
WITH claimed AS (
    UPDATE webhook_deliveries SET lease_until = now() + make_interval(secs => %(lease)s), attempts = attempts + 1
    WHERE id = %(id)s AND state = 'pending' AND token = %(token)s AND (lease_until IS NULL OR lease_until < now())
    RETURNING id, event_id, endpoint_id, destination, url, secret_enc, attempts, since
), interrupted AS (
    UPDATE webhook_attempts a SET error = %(interrupted)s FROM claimed c
    WHERE a.delivery_id = c.id AND a.n < c.attempts AND a.status IS NULL AND a.error IS NULL
), started AS (
    INSERT INTO webhook_attempts (delivery_id, n, started_at) SELECT id, attempts, now() FROM claimed
)
SELECT c.*, ev.body, ev.type, e.url AS endpoint_url, e.secret_enc AS endpoint_secret,
       e.previous_secret_enc AS endpoint_previous_secret, now() AS started_at
FROM claimed c JOIN webhook_events ev ON ev.id = c.event_id LEFT JOIN webhook_endpoints e ON e.id = c.endpoint_id
"""


def target_url(conn: Conn, delivery_id: UUID) -> str | None:
    """Where a delivery goes now (its endpoint's current URL, or its own), read before a claim to pick its slot."""
    row = conn.execute("SELECT coalesce(e.url, d.url) AS url FROM webhook_deliveries d"
                       " LEFT JOIN webhook_endpoints e ON e.id = d.endpoint_id WHERE d.id = %s",
                       (delivery_id,)).fetchone()
    return None if row is None else str(row["url"])


def claim(conn: Conn, delivery_id: UUID, token: UUID, lease_s: float) -> Row | None:
    """Start an attempt of the delivery if TOKEN's message may make it (pending, current token, no live lease):
    the delivery with its event body and its endpoint's current URL and secrets; None otherwise."""
    return conn.execute(_CLAIM, {"id": delivery_id, "token": token, "lease": lease_s,  # type: ignore[no-any-return]
                                 "interrupted": INTERRUPTED}).fetchone()


def lease_left(conn: Conn, delivery_id: UUID, token: UUID) -> float | None:
    """Seconds until another attempt's lease ends, when TOKEN's message should try again then; None when the
    message has nothing left to do (delivered, given up, or stale)."""
    row = conn.execute("SELECT extract(epoch FROM lease_until - now())::float8 AS left_s FROM webhook_deliveries"
                       " WHERE id = %s AND state = 'pending' AND token = %s AND lease_until >= now()",
                       (delivery_id, token)).fetchone()
    return max(0.0, float(row["left_s"])) if row else None


def record_attempt(conn: Conn, delivery_id: UUID, n: int, *, status: int | None, latency_ms: float,
                   error: str | None) -> None:
    conn.execute("UPDATE webhook_attempts SET status = %s, latency_ms = %s, error = %s WHERE delivery_id = %s"
                 " AND n = %s", (status, latency_ms, error, delivery_id, n))


def conclude(conn: Conn, delivery_id: UUID, token: UUID, *, state: str, url: str, status: int | None,
             error: str | None, retry_at: datetime | None = None, keep_token: bool = False) -> bool:
    """After an attempt: delivered or failed (RETRY_AT None), or pending again until RETRY_AT, carried by the same
    message (KEEP_TOKEN: a broker retry) or by a new one the outbox publishes; False if the delivery moved on."""
    moved = conn.execute(
        "UPDATE webhook_deliveries SET state = %(state)s, url = %(url)s, last_status = %(status)s,"
        " last_error = %(error)s, lease_until = NULL,"
        " next_attempt_at = coalesce(%(retry_at)s, next_attempt_at),"
        " finished_at = CASE WHEN %(state)s = 'pending' THEN NULL ELSE now() END,"
        " token = CASE WHEN %(keep)s THEN token END, sent_at = CASE WHEN %(keep)s THEN now() END"
        " WHERE id = %(id)s AND token = %(token)s",
        {"state": state, "url": url, "status": status, "error": error, "retry_at": retry_at, "keep": keep_token,
         "id": delivery_id, "token": token}).rowcount
    return moved == 1


# -- The operator's reads and "send again" ---------------------------------------------------------------------

DELIVERY_COLUMNS = ("d.id, d.event_id, ev.type AS event_type, ev.batch_id, d.destination, d.url, d.state, d.attempts,"
                    " CASE WHEN d.state = 'pending' THEN d.next_attempt_at END AS next_attempt_at, d.last_status,"
                    " d.last_error, d.created_at, d.finished_at")


def list_deliveries(conn: Conn, *, state: str | None, batch_id: UUID | None, before: tuple[datetime, UUID] | None,
                    limit: int) -> list[Row]:
    """Deliveries newest first, optionally of one STATE or one batch, strictly older than BEFORE (created_at, id)."""
    clauses, params = ["true"], list[Any]()
    for clause, value in (("d.state = %s", state), ("ev.batch_id = %s", batch_id)):
        if value is not None:
            clauses.append(clause)
            params.append(value)
    if before is not None:
        clauses.append("(d.created_at, d.id) < (%s, %s)")
        params.extend(before)
    return conn.execute(f"SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries d JOIN webhook_events ev"
                        f" ON ev.id = d.event_id WHERE {' AND '.join(clauses)}"
                        " ORDER BY d.created_at DESC, d.id DESC LIMIT %s", [*params, limit]).fetchall()


def get_delivery(conn: Conn, delivery_id: UUID) -> Row | None:
    """One delivery with its event's body."""
    return conn.execute(f"SELECT {DELIVERY_COLUMNS}, ev.body FROM webhook_deliveries d JOIN webhook_events ev"  # type: ignore[no-any-return]
                        " ON ev.id = d.event_id WHERE d.id = %s", (delivery_id,)).fetchone()


def attempts_of(conn: Conn, delivery_id: UUID) -> list[Row]:
    return conn.execute("SELECT n, started_at, status, latency_ms, error FROM webhook_attempts WHERE delivery_id = %s"
                        " ORDER BY n", (delivery_id,)).fetchall()


def resend(conn: Conn, delivery_id: UUID) -> bool:
    """Send the delivery again now (same event, same webhook-id), with a new give-up window; False if unknown."""
    return conn.execute("UPDATE webhook_deliveries SET state = 'pending', next_attempt_at = now(), since = now(),"
                        " token = NULL, sent_at = NULL, finished_at = NULL WHERE id = %s",
                        (delivery_id,)).rowcount == 1


def batch_trace_context(conn: Conn, delivery_id: UUID) -> str | None:
    """The traceparent of the submit of the batch whose event DELIVERY_ID delivers (None: untraced, or deleted)."""
    row = conn.execute("SELECT b.trace_context FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id"
                       " JOIN batches b ON b.id = e.batch_id WHERE d.id = %s", (delivery_id,)).fetchone()
    return row["trace_context"] if row else None
