"""SQL of re-runs: the items of a finished batch to run again, its error codes, the batches of a re-run chain, and
their items keyed by the idx of the chain's original batch (for merged results). Every function takes a
connection; the caller owns the transaction. Access is the batches' own rule: rows of OWNER only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from psycopg import Connection
from psycopg.rows import tuple_row

from app.batches.store import SEGMENT

Conn = Connection[Any]
# The item's key in the original batch, then a store.ResultRow: idx, segment, offset, length, state, error.
AttemptRow = tuple[int, int, str | None, int | None, int | None, str, Any]

_SOURCE_COLUMNS = ("id, api, owner, shape, metadata, total, endpoint, completion_window, max_cost_nanos,"
                   " max_cost_mode, original_id, finished_at")


def source_batch(conn: Conn, batch_id: UUID, owner: str) -> dict[str, Any] | None:
    """The batch to re-run (with its creating API's fields), when OWNER owns it."""
    return conn.execute(f"SELECT {_SOURCE_COLUMNS} FROM batches WHERE id = %s AND owner = %s",  # type: ignore[no-any-return]
                        (batch_id, owner)).fetchone()


def items_to_rerun(conn: Conn, batch_id: UUID, codes: Sequence[str] | None) -> list[tuple[int, int, str | None]]:
    """(idx, idx in the chain's original batch, custom_id) of the items to run again, in idx order: every
    `discarded` item, or with CODES the `discarded` and `cancelled` items whose error code is one of them."""
    where = "state = 'discarded'" if codes is None else "state IN ('discarded', 'cancelled') AND error_code = ANY(%s)"
    cur = conn.cursor(row_factory=tuple_row)
    cur.execute(f"SELECT idx, coalesce(source_idx, idx), custom_id FROM batch_items WHERE batch_id = %s AND {where}"
                " ORDER BY idx", (batch_id, list(codes)) if codes is not None else (batch_id,))
    return cur.fetchall()  # type: ignore[no-any-return]


def error_codes(conn: Conn, batch_id: UUID) -> dict[str, int]:
    """How many discarded or cancelled items the batch has per error code."""
    rows = conn.execute("SELECT coalesce(error_code, '') AS code, count(*) AS n FROM batch_items WHERE batch_id = %s"
                        " AND state IN ('discarded', 'cancelled') GROUP BY 1 ORDER BY 1", (batch_id,)).fetchall()
    return {r["code"]: int(r["n"]) for r in rows}


def chain(conn: Conn, original_id: UUID, owner: str) -> list[UUID]:
    """The batches of a re-run chain that still exist, oldest first: the original and every re-run made from it or
    from one of its re-runs."""
    rows = conn.execute("SELECT id FROM batches WHERE (id = %s OR original_id = %s) AND owner = %s"
                        " ORDER BY created_at, id", (original_id, original_id, owner)).fetchall()
    return [r["id"] for r in rows]


def attempt_rows(conn: Conn, batch_id: UUID, *, rerun: bool, after: int, limit: int) -> list[AttemptRow]:
    """The next LIMIT items of a batch of a chain by their idx in the original (above AFTER), in that order: for the
    original its own idx, for a re-run its source_idx (the two orders agree: a re-run keeps its source's order)."""
    key = "source_idx" if rerun else "idx"
    cur = conn.cursor(row_factory=tuple_row)
    cur.execute(f"SELECT {key}, idx, {SEGMENT}, response_offset, response_length, state, error"
                f" FROM batch_items WHERE batch_id = %s AND {key} IS NOT NULL AND {key} > %s ORDER BY {key} LIMIT %s",
                (batch_id, after, limit))
    return cur.fetchall()  # type: ignore[no-any-return]


def lock_reruns(conn: Conn, batch_id: UUID) -> None:
    """Hold the re-runs of BATCH_ID until this transaction ends: concurrent re-runs of one batch go one at a time."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"relay-rerun:{batch_id}",))


def rerun_of_items(conn: Conn, source: dict[str, Any], original_idxs: Sequence[int]) -> dict[str, Any] | None:
    """The newest re-run of SOURCE (its owner's, in any state) of exactly the items ORIGINAL_IDXS (their idx in the
    chain's original batch), with its item count; None if there is none."""
    return conn.execute(  # type: ignore[no-any-return]
        "SELECT r.id, r.total AS items FROM batches r WHERE r.original_id = %s AND r.rerun_of = %s AND r.owner = %s"
        " AND r.total = %s AND NOT EXISTS (SELECT 1 FROM batch_items i WHERE i.batch_id = r.id"
        " AND i.source_idx <> ALL(%s)) ORDER BY r.created_at DESC LIMIT 1",
        (source["original_id"] or source["id"], source["id"], source["owner"], len(original_idxs),
         list(original_idxs))).fetchone()
