"""Batch SQL: batches, their items and the workers' heartbeats. Every function takes a connection; the caller
owns the transaction.

Lock order, to stay free of deadlocks: cancel locks the batch row, then its queued items; finalizing locks
one running item only (finished_at is set afterwards by finish_batch, on read or by the reaper, so items of one
batch never queue on its row); the dispatcher locks queued items only.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import Connection
from psycopg.rows import tuple_row

Row = dict[str, Any]
Conn = Connection[Any]

SUBMIT_CHANNEL = "relay_batch_submit"
CANCEL_CHANNEL = "relay_batch_cancel"
FINAL_STATES = ("completed", "discarded", "cancelled")
_BATCH_COLUMNS = (
    "id, shape, status, metadata, total, owner, relay_key_hash, policy_id, project_id, team_id, principal_kind,"
    " principal_id, credential_kind, credential_id, created_at, cancelled_at, finished_at"
)


def insert_batch(conn: Conn, batch: Row) -> Row:
    """Insert a batch row (id, shape, metadata, total, owner and attribution); return it as stored."""
    names = list(batch)
    sql = (f"INSERT INTO batches ({', '.join(names)}) VALUES ({', '.join('%(' + n + ')s' for n in names)})"
           f" RETURNING {_BATCH_COLUMNS}")
    row = conn.execute(sql, batch).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return row  # type: ignore[no-any-return]


def copy_items(conn: Conn, batch_id: UUID, models: Sequence[str], custom_ids: Sequence[str] | None = None) -> None:
    """COPY one queued item per model name, idx 0..n-1 (with its custom_id, for provider API batches)."""
    prefix = f"{batch_id}\t"
    columns = "batch_id, idx, model" + (", custom_id" if custom_ids is not None else "")
    with conn.cursor().copy(f"COPY batch_items ({columns}) FROM STDIN") as copy:
        buf: list[str] = []
        for idx, model in enumerate(models):
            extra = f"\t{_copy_text(custom_ids[idx])}" if custom_ids is not None else ""
            buf.append(f"{prefix}{idx}\t{_copy_text(model)}{extra}\n")
            if len(buf) >= 5000:
                copy.write("".join(buf))
                buf.clear()
        copy.write("".join(buf))


def notify(conn: Conn, channel: str, payload: str = "") -> None:
    """NOTIFY CHANNEL (delivered when the transaction commits)."""
    conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))


def get_batch(conn: Conn, batch_id: UUID, owner: str | None = None) -> Row | None:
    """The batch row, only when OWNER owns it (if given)."""
    sql = f"SELECT {_BATCH_COLUMNS} FROM batches WHERE id = %s"
    params: list[Any] = [batch_id]
    if owner is not None:
        sql += " AND owner = %s"
        params.append(owner)
    return conn.execute(sql, params).fetchone()  # type: ignore[no-any-return]


def item_counts(conn: Conn, batch_id: UUID) -> dict[str, int]:
    """Number of items in each state."""
    rows = conn.execute("SELECT state, count(*) AS n FROM batch_items WHERE batch_id = %s GROUP BY state",
                        (batch_id,)).fetchall()
    return {r["state"]: int(r["n"]) for r in rows}


def list_items(conn: Conn, batch_id: UUID, *, state: str | None, after: int, limit: int) -> list[Row]:
    """A page of items in idx order, optionally of one state."""
    sql = ("SELECT idx, state, model, error, error_code, started_at, finished_at FROM batch_items"
           " WHERE batch_id = %s AND idx > %s")
    params: list[Any] = [batch_id, after]
    if state is not None:
        sql += " AND state = %s"
        params.append(state)
    sql += " ORDER BY idx LIMIT %s"
    params.append(limit)
    return conn.execute(sql, params).fetchall()


def list_batches(conn: Conn, owner: str, *, before: tuple[datetime, UUID] | None, limit: int) -> list[Row]:
    """The owner's batches, newest first, strictly older than BEFORE (created_at, id)."""
    sql = f"SELECT {_BATCH_COLUMNS} FROM batches WHERE owner = %s"
    params: list[Any] = [owner]
    if before is not None:
        sql += " AND (created_at, id) < (%s, %s)"
        params.extend(before)
    sql += " ORDER BY created_at DESC, id DESC LIMIT %s"
    params.append(limit)
    return conn.execute(sql, params).fetchall()


def result_rows(conn: Conn, batch_id: UUID, *, after: int, limit: int) -> list[tuple[int, str, str | None]]:
    """(idx, state, error) of the next LIMIT items after AFTER, in idx order."""
    cur = conn.cursor(row_factory=tuple_row)
    cur.execute("SELECT idx, state, error FROM batch_items WHERE batch_id = %s AND idx > %s ORDER BY idx LIMIT %s",
                (batch_id, after, limit))
    return cur.fetchall()  # type: ignore[no-any-return]


def cancel_batch(conn: Conn, batch_id: UUID) -> int:
    """Mark the batch cancelled (once) and its queued items cancelled with one usage event each; count them."""
    conn.execute("UPDATE batches SET status = 'cancelled', cancelled_at = coalesce(cancelled_at, now())"
                 " WHERE id = %s", (batch_id,))
    return cancel_queued_items(conn, batch_id)


def cancel_queued_items(conn: Conn, batch_id: UUID, *, error: str = "cancelled",
                        error_code: str = "batch_cancelled") -> int:
    """The batch's queued items → cancelled (ERROR, ERROR_CODE) with one usage event each; count them."""
    cur = conn.execute(_CANCEL_QUEUED, {"batch_id": batch_id, "error": error, "code": error_code})
    return cur.rowcount


_CANCEL_QUEUED = """
WITH cancelled AS (
    UPDATE batch_items SET state = 'cancelled', error = %(error)s, error_code = %(code)s, finished_at = now()
    WHERE batch_id = %(batch_id)s AND state = 'queued'
    RETURNING batch_id, idx, model, custom_id
)
INSERT INTO usage_events (request_id, source, started_at, status, error_code, credential_kind, credential_id,
    relay_key_hash, principal_kind, principal_id, policy_id, project_id, team_id, model_requested,
    batch_id, batch_idx, custom_id)
SELECT c.batch_id::text || ':' || c.idx, 'batch', now(), 499, %(code)s, b.credential_kind,
       b.credential_id, b.relay_key_hash, b.principal_kind, b.principal_id, b.policy_id, b.project_id, b.team_id,
       c.model, c.batch_id, c.idx, c.custom_id
FROM cancelled c JOIN batches b ON b.id = c.batch_id
ON CONFLICT (batch_id, batch_idx) WHERE batch_id IS NOT NULL DO NOTHING
"""


def finish_batch(conn: Conn, batch_id: UUID) -> datetime | None:
    """Record finished_at (the last item's finish time) once no item is queued or running; None if not yet."""
    row = conn.execute(
        "UPDATE batches b SET finished_at = coalesce((SELECT max(finished_at) FROM batch_items WHERE batch_id = b.id),"
        " now()) WHERE id = %s AND finished_at IS NULL AND NOT EXISTS (SELECT 1 FROM batch_items i"
        " WHERE i.batch_id = b.id AND i.state IN ('queued', 'running')) RETURNING finished_at", (batch_id,)).fetchone()
    return row["finished_at"] if row else None


def delete_ended_batch(conn: Conn, batch_id: UUID) -> bool:
    """Delete the batch (its items and output file records follow) if none of its items is queued or running."""
    cur = conn.execute("DELETE FROM batches b WHERE id = %s AND NOT EXISTS (SELECT 1 FROM batch_items i"
                       " WHERE i.batch_id = b.id AND i.state IN ('queued', 'running'))", (batch_id,))
    return cur.rowcount == 1


def finish_batches(conn: Conn) -> int:
    """finish_batch for every unfinished batch (run by the reaper, so lists catch up without a read)."""
    cur = conn.execute(
        "UPDATE batches b SET finished_at = coalesce((SELECT max(finished_at) FROM batch_items WHERE batch_id = b.id),"
        " now()) WHERE finished_at IS NULL AND NOT EXISTS (SELECT 1 FROM batch_items i"
        " WHERE i.batch_id = b.id AND i.state IN ('queued', 'running'))")
    return cur.rowcount


def claim_item(conn: Conn, batch_id: UUID, idx: int, worker_id: str) -> Row | None:
    """queued → running for WORKER_ID unless the batch is cancelled; the batch row (+ item model) or None."""
    return conn.execute(  # type: ignore[no-any-return]
        "UPDATE batch_items i SET state = 'running', worker_id = %s, started_at = now() FROM batches b"
        " WHERE i.batch_id = %s AND i.idx = %s AND i.state = 'queued' AND b.id = i.batch_id AND b.status = 'queued'"
        " RETURNING b.id, b.shape, b.policy_id, b.project_id, b.team_id, b.principal_kind, b.principal_id,"
        " b.credential_kind, b.credential_id, b.relay_key_hash, i.model, i.custom_id, i.started_at",
        (worker_id, batch_id, idx)).fetchone()


def item_status(conn: Conn, batch_id: UUID, idx: int, lost_after_s: float) -> Row | None:
    """An item's state, owner, whether the owner's heartbeat is stale, and the batch (for the usage event)."""
    return conn.execute(  # type: ignore[no-any-return]
        "SELECT i.state, i.worker_id, i.model, i.custom_id, b.status AS batch_status, b.id, b.policy_id, b.project_id,"
        " b.team_id, b.principal_kind, b.principal_id, b.credential_kind, b.credential_id, b.relay_key_hash,"
        " (w.last_seen IS NULL OR w.last_seen < now() - make_interval(secs => %s)) AS owner_lost"
        " FROM batch_items i JOIN batches b ON b.id = i.batch_id LEFT JOIN workers w ON w.id = i.worker_id"
        " WHERE i.batch_id = %s AND i.idx = %s",
        (lost_after_s, batch_id, idx)).fetchone()


def finalize_item(conn: Conn, batch_id: UUID, idx: int, *, state: str, error: str | None, error_code: str | None,
                  from_state: str = "running", worker_id: str | None = None) -> bool:
    """FROM_STATE (owned by WORKER_ID when given) → a final STATE; False when the item was not in that state."""
    statement = finalize_statement(batch_id, idx, state=state, error=error, error_code=error_code,
                                   from_state=from_state, worker_id=worker_id)
    return conn.execute(*statement).rowcount == 1


def finalize_statement(batch_id: UUID, idx: int, *, state: str, error: str | None, error_code: str | None,
                       from_state: str = "running", worker_id: str | None = None) -> tuple[str, list[Any]]:
    """The update finalize_item makes."""
    sql = ("UPDATE batch_items SET state = %s, error = %s, error_code = %s, finished_at = now()"
           " WHERE batch_id = %s AND idx = %s AND state = %s")
    params: list[Any] = [state, error, error_code, batch_id, idx, from_state]
    if worker_id is not None:
        sql += " AND worker_id = %s"
        params.append(worker_id)
    return sql, params


def heartbeat(conn: Conn, worker_id: str, hostname: str, pid: int) -> None:
    """Record that WORKER_ID is alive now."""
    conn.execute("INSERT INTO workers (id, hostname, pid) VALUES (%s, %s, %s)"
                 " ON CONFLICT (id) DO UPDATE SET last_seen = now()", (worker_id, hostname, pid))


def remove_worker(conn: Conn, worker_id: str) -> None:
    conn.execute("DELETE FROM workers WHERE id = %s", (worker_id,))


def cancelled_running(conn: Conn, worker_id: str) -> list[tuple[UUID, int]]:
    """(batch_id, idx) of items running on WORKER_ID whose batch is cancelled."""
    rows = conn.execute("SELECT i.batch_id, i.idx FROM batch_items i JOIN batches b ON b.id = i.batch_id"
                        " WHERE i.state = 'running' AND i.worker_id = %s AND b.status = 'cancelled'",
                        (worker_id,)).fetchall()
    return [(r["batch_id"], r["idx"]) for r in rows]


def try_leader_lock(conn: Conn, lock_id: int) -> bool:
    """A transaction-scoped advisory lock: only one replica does this job at a time."""
    row = conn.execute("SELECT pg_try_advisory_xact_lock(%s) AS ok", (lock_id,)).fetchone()
    return bool(row and row["ok"])


def lost_items(conn: Conn, *, lost_after_s: float, time_limit_s: float, judge_owners: bool = True,
               limit: int = 500) -> list[Row]:
    """Running items whose worker stopped heartbeating (only when JUDGE_OWNERS), or that ran past TIME_LIMIT_S;
    locked for update."""
    return conn.execute(
        "SELECT i.batch_id, i.idx, i.model, i.worker_id,"
        " (w.last_seen IS NULL OR w.last_seen < now() - make_interval(secs => %(lost)s)) AS owner_lost"
        " FROM batch_items i LEFT JOIN workers w ON w.id = i.worker_id"
        " WHERE i.state = 'running' AND ((%(owners)s AND (w.last_seen IS NULL"
        " OR w.last_seen < now() - make_interval(secs => %(lost)s)))"
        " OR i.started_at < now() - make_interval(secs => %(limit_s)s))"
        " ORDER BY i.started_at LIMIT %(limit)s FOR UPDATE OF i SKIP LOCKED",
        {"lost": lost_after_s, "owners": judge_owners, "limit_s": time_limit_s, "limit": limit}).fetchall()


def batch_attribution(conn: Conn, batch_id: UUID) -> Row | None:
    """The batch columns a usage event is attributed with."""
    return conn.execute(
        "SELECT id, policy_id, project_id, team_id, principal_kind, principal_id, credential_kind, credential_id,"
        " relay_key_hash FROM batches WHERE id = %s", (batch_id,)).fetchone()


def forget_stale_workers(conn: Conn, older_than_s: float) -> None:
    """Drop heartbeat rows of workers gone for long and owning no running item."""
    conn.execute("DELETE FROM workers w WHERE last_seen < now() - make_interval(secs => %s) AND NOT EXISTS"
                 " (SELECT 1 FROM batch_items i WHERE i.state = 'running' AND i.worker_id = w.id)", (older_than_s,))


def in_flight(conn: Conn) -> int:
    """Published items not yet final, across all batches (the dispatch window)."""
    row = conn.execute("SELECT count(*) AS n FROM batch_items"
                       " WHERE published_at IS NOT NULL AND state IN ('queued', 'running')").fetchone()
    return int(row["n"]) if row else 0


def undispatched_batches(conn: Conn) -> int:
    """Batches (not cancelled) that still have unpublished items."""
    row = conn.execute("SELECT count(*) AS n FROM batches WHERE dispatched_at IS NULL AND status = 'queued'").fetchone()
    return int(row["n"]) if row else 0


def pick_unpublished(conn: Conn, *, limit: int, per_batch: int) -> list[tuple[UUID, int]]:
    """Lock up to LIMIT unpublished queued items, at most PER_BATCH from each batch, oldest batches first."""
    cur = conn.cursor(row_factory=tuple_row)
    cur.execute(
        "SELECT i.batch_id, i.idx FROM (SELECT id, created_at FROM batches WHERE dispatched_at IS NULL"
        "  AND status = 'queued' ORDER BY created_at, id LIMIT 100) b"
        " CROSS JOIN LATERAL (SELECT batch_id, idx FROM batch_items WHERE batch_id = b.id"
        "  AND published_at IS NULL AND state = 'queued' ORDER BY idx LIMIT %s FOR UPDATE SKIP LOCKED) i"
        " ORDER BY b.created_at, b.id, i.idx LIMIT %s", (per_batch, limit))
    return [(r[0], r[1]) for r in cur.fetchall()]


def mark_published(conn: Conn, keys: Sequence[tuple[UUID, int]]) -> None:
    """Set published_at on the given items."""
    batch_ids = [k[0] for k in keys]
    idxs = [k[1] for k in keys]
    conn.execute("UPDATE batch_items i SET published_at = now() FROM unnest(%s::uuid[], %s::int[]) AS k(b, x)"
                 " WHERE i.batch_id = k.b AND i.idx = k.x", (batch_ids, idxs))


def mark_dispatched(conn: Conn) -> None:
    """Batches with nothing left to publish get dispatched_at (the dispatcher stops looking at them)."""
    conn.execute("UPDATE batches b SET dispatched_at = now() WHERE dispatched_at IS NULL AND status = 'queued'"
                 " AND NOT EXISTS (SELECT 1 FROM batch_items i WHERE i.batch_id = b.id AND i.published_at IS NULL"
                 " AND i.state = 'queued')")


def unpublish_stale(conn: Conn, older_than_s: float) -> int:
    """Queued items published long ago (their message was lost): publish them again (the claim dedupes)."""
    cur = conn.execute(
        "WITH stale AS (UPDATE batch_items i SET published_at = NULL FROM batches b"
        " WHERE b.id = i.batch_id AND b.status = 'queued' AND i.state = 'queued'"
        " AND i.published_at < now() - make_interval(secs => %s) RETURNING i.batch_id)"
        " UPDATE batches SET dispatched_at = NULL WHERE id IN (SELECT batch_id FROM stale)", (older_than_s,))
    return cur.rowcount


def _copy_text(value: str) -> str:
    """Escape a value for COPY's text format."""
    return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
