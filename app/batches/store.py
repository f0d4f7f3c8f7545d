"""Batch SQL: batches, their items and the workers' heartbeats. Every function takes a connection; the caller
owns the transaction.

Item rows change only in columns no index covers, so their updates stay HOT: counts per state live in
`batch_progress` (each worker process counts in its own row), the outbox is `batches.published_upto`.
Lock order, to stay free of deadlocks: cancel locks the batch row, then its queued items; a claim or a final state
locks one item and this process's progress row; finished_at is set afterwards (by the group commit that makes the
last item final, which locks the batch row only then, on read, or by the reaper), so items of one batch never queue
on its row. Every write of an item's state, and a batch's end with its hooks, is `lifecycle.py`'s.
Dispatcher, heartbeat and reaper SQL is in `outbox.py`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import Connection
from psycopg.rows import tuple_row

from app.batches.outbox import OWNER_LOST
from app.usage.store import UNPRICED
from schemas.batch_ids import parse_batch_id
from schemas.batches import ITEM_STATES

Row = dict[str, Any]
Conn = Connection[Any]
# idx, then where its response is (segment, offset, length: a payloads.Wanted), state, error, custom_id
ResultRow = tuple[int, str | None, int | None, int | None, str, Any, str | None]
# a ResultRow, then the item's error_code and the status of its usage event (items that did not complete)
OutcomeRow = tuple[int, str | None, int | None, int | None, str, Any, str | None, str | None, int | None]

SUBMIT_CHANNEL = "relay_batch_submit"
CANCEL_CHANNEL = "relay_batch_cancel"
BATCH_COLUMNS = (
    "id, shape, status, metadata, total, owner, relay_key_hash, policy_id, project_id, team_id, principal_kind,"
    " principal_id, credential_kind, credential_id, created_at, cancelled_at, finished_at, api, completion_window,"
    " expires_at, max_cost_nanos, max_cost_mode, rerun_of, original_id, endpoint, input_file_id"
)  # api: the API that created the batch (relay, openai, anthropic), whose view reads it by default
ALL_COLUMNS = ", ".join("e." + name.strip() for name in BATCH_COLUMNS.split(","))  # of `batches e`


def insert_batch(conn: Conn, batch: Row) -> Row:
    """Insert a batch row (id, shape, metadata, total, owner and attribution); return it as stored."""
    names = list(batch)
    sql = (f"INSERT INTO batches ({', '.join(names)}) VALUES ({', '.join('%(' + n + ')s' for n in names)})"
           f" RETURNING {BATCH_COLUMNS}")
    row = conn.execute(sql, batch).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return row  # type: ignore[no-any-return]


def copy_items(conn: Conn, batch_id: UUID, models: Iterable[str], custom_ids: Sequence[str] | None = None,
               source_idxs: Sequence[int] | None = None) -> None:
    """COPY one queued item per model name, idx 0..n-1 (with its custom_id, for provider API batches, and its
    source_idx, for re-runs), in COPY's binary format: the server parses it at about four times the speed of the
    text format. MODELS may be produced as the rows go (the server works on each chunk sent meanwhile); an
    exception from it aborts the COPY."""
    columns = ("batch_id, idx, model" + (", custom_id" if custom_ids is not None else "")
               + (", source_idx" if source_idxs is not None else ""))
    fields = 3 + (custom_ids is not None) + (source_idxs is not None)
    head, pack = _ROW_HEAD.pack(fields, 16, batch_id.bytes, 4), _INT.pack
    names: dict[str, bytes] = {}  # model name → its field (a batch names few models)
    with conn.cursor().copy(f"COPY batch_items ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
        parts: list[bytes] = [_BINARY_HEADER]
        for idx, model in enumerate(models):
            if (name := names.get(model)) is None:
                name = names[model] = _binary_text(model)
            parts += (head, pack(idx), name)
            if custom_ids is not None:
                parts.append(_binary_text(custom_ids[idx]))
            if source_idxs is not None:
                parts += (_INT_LENGTH, pack(source_idxs[idx]))
            if len(parts) >= 3000:
                copy.write(b"".join(parts))
                parts.clear()
        parts.append(_BINARY_TRAILER)
        copy.write(b"".join(parts))


_BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)  # signature, flags, no header extension
_BINARY_TRAILER = struct.pack("!h", -1)
_ROW_HEAD = struct.Struct("!hi16si")  # field count; the uuid's length and bytes; the idx's length (its value next)
_INT = struct.Struct("!i")
_INT_LENGTH = _INT.pack(4)  # an int4 field's length


def _binary_text(value: str) -> bytes:
    """A text field of COPY's binary format: its length, then its UTF-8 bytes (the database's encoding)."""
    data = value.encode()
    return _INT.pack(len(data)) + data


def notify(conn: Conn, channel: str, payload: str = "") -> None:
    """NOTIFY CHANNEL (delivered when the transaction commits)."""
    conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))


def get_batch(conn: Conn, batch_id: UUID, owner: str | None = None) -> Row | None:
    """The batch row, only when OWNER owns it (if given)."""
    sql = f"SELECT {BATCH_COLUMNS} FROM batches WHERE id = %s"
    params: list[Any] = [batch_id]
    if owner is not None:
        sql += " AND owner = %s"
        params.append(owner)
    return conn.execute(sql, params).fetchone()  # type: ignore[no-any-return]


_SUM_USAGE = f"""
WITH fresh AS (
    INSERT INTO batch_usage (batch_id, input_tokens, output_tokens, cached_tokens, cost_nanos, unpriced)
    SELECT e.batch_id, coalesce(sum(e.input_tokens), 0), coalesce(sum(e.output_tokens), 0),
           coalesce(sum(e.cached_tokens), 0), sum(e.cost_nanos),
           count(*) FILTER (WHERE {UNPRICED})
    FROM usage_events e WHERE e.batch_id IS NOT NULL
      AND e.batch_id = ANY(ARRAY(SELECT id FROM unnest(%(ids)s::uuid[]) AS t(id)
                                 WHERE NOT EXISTS (SELECT 1 FROM batch_usage u WHERE u.batch_id = t.id)))
    GROUP BY e.batch_id
    ON CONFLICT (batch_id) DO UPDATE SET input_tokens = EXCLUDED.input_tokens  -- a concurrent read's: the same sums
    RETURNING *
)
SELECT * FROM batch_usage WHERE batch_id = ANY(%(ids)s) UNION ALL SELECT * FROM fresh
"""


def attribution_names(conn: Conn, row: Row) -> Row:
    """The names behind a batch row's attribution ids (policy, project, team, principal, and the credential: a
    relay key's name or prefix); None where a name is not known (or the row was removed since)."""
    from app.usage.store import PRINCIPAL_NAME  # the one rule for a principal's name

    found = conn.execute(
        "SELECT (SELECT name FROM policies WHERE id = e.policy_id) AS policy,"
        " (SELECT name FROM projects WHERE id = e.project_id) AS project,"
        " (SELECT name FROM teams WHERE id = e.team_id) AS team, " + PRINCIPAL_NAME + ","
        " CASE e.credential_kind WHEN 'relay_key' THEN (SELECT coalesce(name, prefix) FROM relay_keys"
        " WHERE id = e.credential_id) END AS credential"
        " FROM (SELECT %(policy_id)s::uuid AS policy_id, %(project_id)s::uuid AS project_id,"
        " %(team_id)s::uuid AS team_id, %(principal_kind)s::text AS principal_kind,"
        " %(principal_id)s::uuid AS principal_id, %(credential_kind)s::text AS credential_kind,"
        " %(credential_id)s::uuid AS credential_id) e", row).fetchone()
    assert found is not None
    return found  # type: ignore[no-any-return]


def finished_usage(conn: Conn, batch_ids: Sequence[UUID]) -> dict[UUID, Row]:
    """The usage of each of BATCH_IDS (batches that have finished: the caller checks), summed from their usage
    events once and kept in `batch_usage` (later reads are one index lookup each)."""
    if not batch_ids:
        return {}
    rows = conn.execute(_SUM_USAGE, {"ids": list(batch_ids)}).fetchall()
    return {row["batch_id"]: row for row in rows}


# An item's response segment by its name: its row keeps a code (migration 0030: response_segment_code on write).
SEGMENT = "response_segment_name(response_segment) AS response_segment"
_ITEM_COLUMNS = "idx, custom_id, state, model, error, error_code, started_at, finished_at, source_idx"


def list_items(conn: Conn, batch_id: UUID, *, state: str | None, after: int, limit: int,
               custom_id: str | None = None) -> list[Row]:
    """A page of items in idx order, optionally of one state, or whose custom_id starts with CUSTOM_ID (a search:
    the batch's items are read in idx order, custom_id has no index so that storing items stays cheap)."""
    sql = f"SELECT {_ITEM_COLUMNS} FROM batch_items WHERE batch_id = %s AND idx > %s"
    params: list[Any] = [batch_id, after]
    if state is not None:
        sql += " AND state = %s"
        params.append(state)
    if custom_id is not None:
        sql += " AND starts_with(custom_id, %s)"
        params.append(custom_id)
    sql += " ORDER BY idx LIMIT %s"
    params.append(limit)
    return conn.execute(sql, params).fetchall()


def list_batches(conn: Conn, owner: str, *, before: tuple[datetime, UUID] | None, limit: int,
                 status: str | None = None, finished: bool | None = None, search: str | None = None) -> list[Row]:
    """The owner's batches matching the filters (see state_clauses), newest first, strictly older than BEFORE
    (created_at, id)."""
    clauses, params = state_clauses(status=status, finished=finished, search=search)
    clauses.insert(0, "e.owner = %s")
    params.insert(0, owner)
    if before is not None:
        clauses.append("(e.created_at, e.id) < (%s, %s)")
        params.extend(before)
    sql = (f"SELECT {ALL_COLUMNS} FROM batches e WHERE {' AND '.join(clauses)}"
           " ORDER BY e.created_at DESC, e.id DESC LIMIT %s")
    return conn.execute(sql, [*params, limit]).fetchall()


def state_clauses(*, status: str | None, finished: bool | None, search: str | None) -> tuple[list[str], list[Any]]:
    """Conditions over batches `e`: STATUS (queued, cancelled), FINISHED (every item final or not), SEARCH (the
    batch's id in any spelling, or text found in its metadata, case-insensitively)."""
    clauses: list[str] = []
    params: list[Any] = []
    if status is not None:
        clauses.append("e.status = %s")
        params.append(status)
    if finished is not None:
        clauses.append("e.finished_at IS NOT NULL" if finished else "e.finished_at IS NULL")
    if search is not None:
        clauses.append("(e.id = %s OR strpos(lower(e.metadata::text), lower(%s)) > 0)")
        params += [parse_batch_id(search.strip()), search]
    return clauses, params


def get_item(conn: Conn, batch_id: UUID, idx: int) -> Row | None:
    """One item with where its response is stored."""
    return conn.execute(  # type: ignore[no-any-return]
        f"SELECT {_ITEM_COLUMNS}, {SEGMENT}, response_offset, response_length FROM batch_items"
        " WHERE batch_id = %s AND idx = %s", (batch_id, idx)).fetchone()


def result_rows(conn: Conn, batch_id: UUID, *, after: int, limit: int) -> list[ResultRow]:
    """(idx, response segment, offset, length, state, error, custom_id) of the next LIMIT items after AFTER, in idx
    order."""
    cur = conn.cursor(row_factory=tuple_row)
    cur.execute(f"SELECT idx, {SEGMENT}, response_offset, response_length, state, error, custom_id"
                " FROM batch_items WHERE batch_id = %s AND idx > %s ORDER BY idx LIMIT %s", (batch_id, after, limit))
    return cur.fetchall()


def outcome_rows(conn: Conn, batch_id: UUID, *, after: int, limit: int) -> list[OutcomeRow]:
    """result_rows with each item's error_code and, for an item that did not complete, the status of its usage
    event (the provider views' error lines), for the next LIMIT items after AFTER in idx order."""
    cur = conn.cursor(row_factory=tuple_row)
    cur.execute(f"SELECT i.idx, {SEGMENT}, i.response_offset, i.response_length, i.state, i.error,"
                " i.custom_id, i.error_code, e.status FROM batch_items i LEFT JOIN usage_events e"
                " ON i.state <> 'completed' AND e.batch_id IS NOT NULL AND e.batch_id = i.batch_id"
                " AND e.batch_idx = i.idx WHERE i.batch_id = %s AND i.idx > %s ORDER BY i.idx LIMIT %s",
                (batch_id, after, limit))
    return cur.fetchall()


def counts_by_batch(conn: Conn, batches: Sequence[Row]) -> dict[UUID, dict[str, int]]:
    """item_counts of several BATCHES (rows with id and total) in one read of their progress counters, each with
    `expired`: the items the batch's expiry stopped (cancelled, error_code batch_expired)."""
    rows = conn.execute(
        "SELECT batch_id, sum(running) AS running, sum(completed) AS completed, sum(discarded) AS discarded,"
        " sum(cancelled) AS cancelled, sum(expired) AS expired FROM batch_progress WHERE batch_id = ANY(%s)"
        " GROUP BY batch_id", ([b["id"] for b in batches],)).fetchall()
    found = {row["batch_id"]: row for row in rows}
    counts: dict[UUID, dict[str, int]] = {}
    for batch in batches:
        row = found.get(batch["id"])
        counted = {name: int(row[name]) if row else 0 for name in (*ITEM_STATES[1:], "expired")}
        counted["queued"] = batch["total"] - sum(counted[state] for state in ITEM_STATES[1:])
        counts[batch["id"]] = counted
    return counts


def list_batches_of_api(conn: Conn, owner: str, api: str, *, after: UUID | None, before: UUID | None,
                        limit: int) -> list[Row]:
    """OWNER's batches created through API, newest first: older than AFTER, or the page just newer than BEFORE."""
    cursor = after or before
    params: dict[str, Any] = {"owner": owner, "api": api, "cursor": cursor, "limit": limit}
    newer = before is not None
    sql = f"SELECT {ALL_COLUMNS} FROM batches e WHERE e.owner = %(owner)s AND e.api = %(api)s"
    if cursor is not None:
        sql += (f" AND (e.created_at, e.id) {'>' if newer else '<'} (SELECT created_at, id FROM batches"
                " WHERE id = %(cursor)s AND owner = %(owner)s)")
    order = "ASC" if newer else "DESC"
    sql += f" ORDER BY e.created_at {order}, e.id {order} LIMIT %(limit)s"
    rows = conn.execute(sql, params).fetchall()
    return rows[::-1] if newer else rows


def first_models(conn: Conn, batch_ids: Sequence[UUID]) -> dict[UUID, str | None]:
    """The model its first item names, for each batch (OpenAI's batch object carries one model)."""
    rows = conn.execute("SELECT batch_id, model FROM batch_items WHERE batch_id = ANY(%s) AND idx = 0",
                        (list(batch_ids),)).fetchall()
    return {row["batch_id"]: row["model"] for row in rows}


def item_counts(conn: Conn, batch_id: UUID, total: int) -> dict[str, int]:
    """Number of items in each state, from the batch's progress counters."""
    return progress(conn, batch_id, total)[0]


def progress(conn: Conn, batch_id: UUID, total: int) -> tuple[dict[str, int], int]:
    """Number of items in each state and the recorded cost of its items (nano-dollars), from the batch's progress
    counters."""
    row = conn.execute("SELECT coalesce(sum(running), 0) AS running, coalesce(sum(completed), 0) AS completed,"
                       " coalesce(sum(discarded), 0) AS discarded, coalesce(sum(cancelled), 0) AS cancelled,"
                       " coalesce(sum(cost_nanos), 0) AS cost_nanos"
                       " FROM batch_progress WHERE batch_id = %s", (batch_id,)).fetchone()
    counts = {state: int(row[state]) for state in ITEM_STATES[1:]} if row else dict.fromkeys(ITEM_STATES[1:], 0)
    counts["queued"] = total - sum(counts.values())
    return counts, int(row["cost_nanos"]) if row else 0


def mark_cancelled(conn: Conn, batch_id: UUID) -> None:
    """Mark the batch cancelled (once); its queued items are finalized by the caller."""
    conn.execute("UPDATE batches SET status = 'cancelled', cancelled_at = coalesce(cancelled_at, now())"
                 " WHERE id = %s", (batch_id,))


def queued_items(conn: Conn, batch_id: UUID, *, after: int, limit: int) -> list[tuple[int, str | None, str | None]]:
    """(idx, model, custom_id) of the batch's queued items after AFTER, in idx order."""
    cur = conn.cursor(row_factory=tuple_row)
    cur.execute("SELECT idx, model, custom_id FROM batch_items WHERE batch_id = %s AND idx > %s AND state = 'queued'"
                " ORDER BY idx LIMIT %s", (batch_id, after, limit))
    return cur.fetchall()  # type: ignore[no-any-return]


# A capped batch whose items' recorded cost reached its cap (on `batches b`): its items not started yet never start.
OVER_BUDGET = ("b.max_cost_nanos <= (SELECT coalesce(sum(p.cost_nanos), 0) FROM batch_progress p"
               " WHERE p.batch_id = b.id)")


def cap_room(conn: Conn, batch_id: UUID) -> Row | None:
    """A hard-capped batch's cap, recorded cost and reserved bounds (nano-dollars)."""
    return conn.execute(  # type: ignore[no-any-return]
        "SELECT b.max_cost_nanos AS cap, coalesce(sum(p.cost_nanos), 0) AS spent,"
        " coalesce(sum(p.reserved_nanos), 0) AS reserved FROM batches b LEFT JOIN batch_progress p"
        " ON p.batch_id = b.id WHERE b.id = %s GROUP BY b.id", (batch_id,)).fetchone()


def own_unseen_claim(conn: Conn, batch_id: UUID, idx: int, worker_id: str, within_s: float) -> Row | None:
    """The claim row (as claim_item returns it) of an item running under WORKER_ID that started within WITHIN_S:
    a claim of this worker committed while its answer was lost."""
    return conn.execute(  # type: ignore[no-any-return]
        "SELECT b.id, b.shape, b.policy_id, b.project_id, b.team_id, b.principal_kind, b.principal_id,"
        " b.credential_kind, b.credential_id, b.relay_key_hash, i.model, i.custom_id, i.started_at"
        " FROM batch_items i JOIN batches b ON b.id = i.batch_id WHERE i.batch_id = %s AND i.idx = %s"
        " AND i.state = 'running' AND i.worker_id = %s AND i.started_at >= now() - make_interval(secs => %s)",
        (batch_id, idx, worker_id, within_s)).fetchone()


def item_status(conn: Conn, batch_id: UUID, idx: int, lost_after_s: float) -> Row | None:
    """An item's state, owner, whether the owner is lost (outbox.OWNER_LOST: heartbeat and claim stale, session
    gone), and the batch (for the usage event)."""
    return conn.execute(  # type: ignore[no-any-return]
        "SELECT i.state, i.worker_id, i.model, i.custom_id, b.status AS batch_status, b.api,"
        " coalesce(b.expires_at <= now(), false) AS batch_expired, b.id, b.policy_id, b.project_id,"
        " b.team_id, b.principal_kind, b.principal_id, b.credential_kind, b.credential_id, b.relay_key_hash,"
        f" {OWNER_LOST} AS owner_lost, coalesce({OVER_BUDGET}, false) AS over_budget"
        " FROM batch_items i JOIN batches b ON b.id = i.batch_id LEFT JOIN workers w ON w.id = i.worker_id"
        " WHERE i.batch_id = %(batch_id)s AND i.idx = %(idx)s",
        {"lost": lost_after_s, "batch_id": batch_id, "idx": idx}).fetchone()


def batch_run_info(conn: Conn, batch_id: UUID) -> Row | None:
    """What a worker needs of a batch before claiming its items: its policy, deadline, shape, spend cap and the
    submit's trace context (they never change)."""
    return conn.execute("SELECT policy_id, expires_at, shape, max_cost_nanos, max_cost_mode, trace_context"
                        " FROM batches WHERE id = %s", (batch_id,)).fetchone()  # type: ignore[no-any-return]


def batches_due_to_expire(conn: Conn, limit: int = 100) -> list[Row]:
    """Unfinished, uncancelled batches past their expires_at (a completion window, or the provider APIs' expiry),
    locked as cancel locks the batch row before its items: the whole row, for the usage events of the items they
    expire."""
    return conn.execute(f"SELECT {BATCH_COLUMNS} FROM batches WHERE expires_at <= now() AND finished_at IS NULL"
                        " AND status = 'queued' ORDER BY expires_at LIMIT %s FOR UPDATE SKIP LOCKED",
                        (limit,)).fetchall()


def stop_publishing(conn: Conn, batch_id: UUID) -> None:
    """Nothing of the batch is left to publish (its queued items were all made final): the dispatcher skips it."""
    conn.execute("UPDATE batches SET published_upto = total, dispatched_at = coalesce(dispatched_at, now())"
                 " WHERE id = %s", (batch_id,))


def lock_batch(conn: Conn, batch_id: UUID) -> Row | None:
    """The batch row, locked for the transaction (as cancel locks it before its queued items)."""
    return conn.execute(f"SELECT {BATCH_COLUMNS} FROM batches WHERE id = %s FOR UPDATE",  # type: ignore[no-any-return]
                        (batch_id,)).fetchone()


def existing_batches(conn: Conn, batch_ids: Sequence[UUID]) -> set[UUID]:
    """Those of BATCH_IDS that have a batch row."""
    rows = conn.execute("SELECT id FROM batches WHERE id = ANY(%s)", (list(batch_ids),)).fetchall()
    return {r["id"] for r in rows}
