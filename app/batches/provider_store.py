"""SQL of the provider views (OpenAI and Anthropic batch APIs): a batch with its creating API's fields, pages of
one API's batches, counts for several batches at once, and item outcomes with their custom_id and status.

Access is the batches' own rule: a row is returned only for its `owner`.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from psycopg import Connection
from psycopg.rows import tuple_row

Row = dict[str, Any]
Conn = Connection[Any]

_COLUMNS = ("b.id, b.api, b.shape, b.status, b.metadata, b.total, b.endpoint, b.input_file_id, b.completion_window,"
            " b.created_at, b.cancelled_at, b.finished_at, b.expires_at")


def get_api_batch(conn: Conn, batch_id: UUID, owner: str) -> Row | None:
    """The batch with its creating API's fields, when OWNER owns it."""
    return conn.execute(  # type: ignore[no-any-return]
        f"SELECT {_COLUMNS} FROM batches b WHERE b.id = %s AND b.owner = %s", (batch_id, owner)).fetchone()


def list_api_batches(conn: Conn, owner: str, api: str, *, after: UUID | None, before: UUID | None,
                     limit: int) -> list[Row]:
    """OWNER's batches created through API, newest first: older than AFTER, or the page just newer than BEFORE."""
    cursor = after or before
    params: dict[str, Any] = {"owner": owner, "api": api, "cursor": cursor, "limit": limit}
    newer = before is not None
    sql = f"SELECT {_COLUMNS} FROM batches b WHERE b.owner = %(owner)s AND b.api = %(api)s"
    if cursor is not None:
        sql += (f" AND (b.created_at, b.id) {'>' if newer else '<'} (SELECT created_at, id FROM batches"
                " WHERE id = %(cursor)s AND owner = %(owner)s)")
    order = "ASC" if newer else "DESC"
    sql += f" ORDER BY b.created_at {order}, b.id {order} LIMIT %(limit)s"
    rows = conn.execute(sql, params).fetchall()
    return rows[::-1] if newer else rows


def counts_by_batch(conn: Conn, batch_ids: list[UUID]) -> dict[UUID, dict[str, int]]:
    """Items per state of each batch, plus `expired`: cancelled items the batch's expiry stopped."""
    rows = conn.execute(
        "SELECT batch_id, state, count(*) AS n, count(*) FILTER (WHERE error_code = 'batch_expired') AS expired"
        " FROM batch_items WHERE batch_id = ANY(%s) GROUP BY batch_id, state", (batch_ids,)).fetchall()
    found: dict[UUID, dict[str, int]] = {batch_id: {} for batch_id in batch_ids}
    for row in rows:
        counts = found[row["batch_id"]]
        counts[row["state"]] = int(row["n"])
        counts["expired"] = counts.get("expired", 0) + int(row["expired"])
    return found


def first_models(conn: Conn, batch_ids: list[UUID]) -> dict[UUID, str | None]:
    """The model its first request names, for each batch (OpenAI's batch object carries one model)."""
    rows = conn.execute("SELECT batch_id, model FROM batch_items WHERE batch_id = ANY(%s) AND idx = 0",
                        (batch_ids,)).fetchall()
    return {row["batch_id"]: row["model"] for row in rows}


def item_outcomes(conn: Conn, batch_id: UUID, *, after: int,
                  limit: int) -> list[tuple[int, str | None, str, str | None, str | None, int | None]]:
    """(idx, custom_id, state, error, error_code, status of its usage event) of the next LIMIT items after AFTER."""
    cur = conn.cursor(row_factory=tuple_row)
    cur.execute(
        "SELECT i.idx, i.custom_id, i.state, i.error, i.error_code, e.status FROM batch_items i"
        " LEFT JOIN usage_events e ON e.batch_id IS NOT NULL AND e.batch_id = i.batch_id AND e.batch_idx = i.idx"
        " WHERE i.batch_id = %s AND i.idx > %s ORDER BY i.idx LIMIT %s", (batch_id, after, limit))
    return cur.fetchall()  # type: ignore[no-any-return]
