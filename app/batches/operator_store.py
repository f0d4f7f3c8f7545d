"""Operator reads (admin routes): every owner's batches, the workers' heartbeats and what waits in Postgres. Every
function takes a connection; the caller owns the transaction."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from app.batches.store import ALL_COLUMNS, Conn, Row, state_clauses


def list_all_batches(conn: Conn, *, before: tuple[datetime, UUID] | None, limit: int, principal: str | None = None,
                     credential: UUID | None = None, policy: str | None = None, created_from: datetime | None = None,
                     created_to: datetime | None = None, status: str | None = None,
                     finished: bool | None = None, search: str | None = None) -> list[Row]:
    """Batches of every owner matching the filters (all combined with AND), newest first, strictly older than
    BEFORE; each with its policy and principal names. PRINCIPAL and POLICY take a name or an id."""
    from app.usage.store import PRINCIPAL_NAME, name_or_id_clause, principal_clause  # the usage filters' rules

    clauses, params = state_clauses(status=status, finished=finished, search=search)
    clauses.insert(0, "true")
    for clause, value in (("e.credential_id = %s", credential), ("e.created_at >= %s", created_from),
                          ("e.created_at < %s", created_to)):
        if value is not None:
            clauses.append(clause)
            params.append(value)
    named = [principal_clause(principal) if principal is not None else None,
             name_or_id_clause("policy_id", "policies", policy) if policy is not None else None]
    for clause, values in filter(None, named):
        clauses.append(clause)
        params += values
    if before is not None:
        clauses.append("(e.created_at, e.id) < (%s, %s)")
        params.extend(before)
    sql = (f"SELECT {ALL_COLUMNS}, (SELECT name FROM policies WHERE id = e.policy_id) AS policy, {PRINCIPAL_NAME}"
           f" FROM batches e WHERE {' AND '.join(clauses)} ORDER BY e.created_at DESC, e.id DESC LIMIT %s")
    return conn.execute(sql, [*params, limit]).fetchall()


def list_workers(conn: Conn, lost_after_s: float) -> list[Row]:
    """Every worker process with a heartbeat row, newest first: whether it is alive (heard from within
    LOST_AFTER_S), seconds since its last heartbeat (by the database's clock) and how many items it runs."""
    return conn.execute(
        "SELECT w.id, w.hostname, w.pid, w.started_at, w.last_seen,"
        " w.last_seen >= now() - make_interval(secs => %s) AS alive,"
        " extract(epoch FROM now() - w.last_seen)::float8 AS seen_ago_s,"
        " (SELECT count(*) FROM batches b JOIN batch_items i ON i.batch_id = b.id WHERE b.finished_at IS NULL"
        " AND i.state = 'running' AND i.worker_id = w.id) AS running"
        " FROM workers w ORDER BY w.started_at DESC, w.id", (lost_after_s,)).fetchall()

def waiting_items(conn: Conn) -> Row:
    """Items of unfinished batches still queued, and how many of them the dispatcher has not published yet (they
    wait in Postgres, not in RabbitMQ, whose queue holds only the dispatch window's messages)."""
    row = conn.execute(
        "SELECT coalesce(sum(b.total - coalesce(p.started, 0)), 0)::bigint AS queued,"
        " coalesce(sum(greatest(0, b.total - b.published_upto)) FILTER (WHERE b.status = 'queued'), 0)::bigint"
        " AS unpublished FROM batches b LEFT JOIN LATERAL (SELECT sum(g.running + g.completed + g.discarded"
        " + g.cancelled) AS started FROM batch_progress g WHERE g.batch_id = b.id) p ON true"
        " WHERE b.finished_at IS NULL").fetchone()
    assert row is not None
    return row  # type: ignore[no-any-return]
