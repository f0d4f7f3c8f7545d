"""Retention SQL: deleting finished batches with their items (a user's one, or an operator's purge by date). Every
function takes a connection; the caller owns the transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from app.batches.store import Conn, Row

# Retention: a batch goes with its items (deleted by the same statement: they hold no foreign key, see migration
# 0014) and its progress and output file records (ON DELETE CASCADE); its usage events stay.
_NOTHING_RUNS = ("NOT EXISTS (SELECT 1 FROM batch_items i WHERE i.batch_id = b.id"
                 " AND i.state IN ('queued', 'running'))")


def delete_finished_batch(conn: Conn, batch_id: UUID) -> bool:
    """Delete the batch and its items unless an item is still queued or running; whether it was deleted."""
    return bool(_delete_batches(conn, f"id = %s AND {_NOTHING_RUNS}", (batch_id,)))


def delete_batches_finished_before(conn: Conn, before: datetime, *, limit: int) -> list[Row]:
    """Delete up to LIMIT batches finished before BEFORE (oldest first) with their items; (id, total) of each."""
    return _delete_batches(conn, "id IN (SELECT id FROM batches WHERE finished_at < %s ORDER BY finished_at"
                                 f" LIMIT %s FOR UPDATE SKIP LOCKED) AND {_NOTHING_RUNS}", (before, limit))


def _delete_batches(conn: Conn, where: str, params: Sequence[Any]) -> list[Row]:
    """Delete the batches matching WHERE (on `batches b`) and their items in one statement; (id, total) of each."""
    return conn.execute(
        f"WITH gone AS (DELETE FROM batches b WHERE {where} RETURNING id, total),"
        " items AS (DELETE FROM batch_items WHERE batch_id IN (SELECT id FROM gone))"
        " SELECT id, total FROM gone", params).fetchall()


def count_batches_finished_before(conn: Conn, before: datetime) -> Row:
    """How many batches (and items) finished before BEFORE."""
    row = conn.execute("SELECT count(*) AS batches, coalesce(sum(total), 0) AS items FROM batches"
                       " WHERE finished_at < %s", (before,)).fetchone()
    assert row is not None
    return row  # type: ignore[no-any-return]
