"""The S3 store's response spool in Postgres (table payload_spool, migration 0031). S3 has no append, and a group
commit must not commit a response whose bytes are not durable: a worker process's responses of a batch between two
group commits are one row here, written before the final states commit (one short transaction, where a PUT of a
small object cost the process and the S3 server ~3 ms of CPU each). The process packs its rows into the bucket a few
seconds later (app/payload_s3_packs.py) and deletes them; a reader finds a segment not packed yet here. Rows left by
a process that died before packing them are packed by another process once they are ORPHAN_AGE_S old, so that a
batch's responses end in the bucket either way.

A reference to a spooled response is the same (segment, offset, length) as to a small object: the segment's name,
a byte range in its row's bytes, and later in the pack that holds it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

import psycopg
from psycopg_pool import ConnectionPool

PoolOf = Callable[[], ConnectionPool[psycopg.Connection[Any]]]  # a process's pool (made after fork)
ORPHAN_AGE_S = 600.0  # a row this old is no longer held by a living process (its packing is due after seconds)
ADOPT_ROWS = 512  # rows an adoption packs at once, at most

_PUT = """
INSERT INTO payload_spool (batch_id, name, data)
SELECT * FROM unnest(%s::uuid[], %s::text[], %s::bytea[])
ON CONFLICT (batch_id, name) DO NOTHING
"""
_ORPHANS = """
SELECT batch_id, name, data FROM payload_spool
WHERE created_at < now() - make_interval(secs => %s)
ORDER BY batch_id, name LIMIT %s FOR UPDATE SKIP LOCKED
"""

# Rows of one batch an adoption packs: (name, bytes) each, the caller writing them as one pack. Pack (batch id,
# rows) → whether they are in the bucket (their rows are then deleted in the same transaction).
Pack = Callable[[UUID, list[tuple[str, bytes]]], bool]


class Spool:
    """The payload_spool rows of a database, through a process's pool (POOL_OF gives it: made after fork)."""

    def __init__(self, pool_of: PoolOf, *, orphan_age_s: float = ORPHAN_AGE_S) -> None:
        self._pool_of, self.orphan_age_s = pool_of, orphan_age_s

    def put(self, rows: Sequence[tuple[UUID, str, bytes]]) -> None:
        """Keep ROWS (batch id, segment name, bytes) durably, in one transaction; a row already there (the retry of
        a put that committed) is left as it is: its bytes are the same."""
        if not rows:
            return
        with self._pool_of().connection() as conn:
            conn.execute(_PUT, ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]))

    def read(self, batch_id: UUID, names: Sequence[str]) -> dict[str, bytes]:
        """The bytes of those of NAMES that are spooled for BATCH_ID."""
        if not names:
            return {}
        with self._pool_of().connection() as conn:
            rows = conn.execute("SELECT name, data FROM payload_spool WHERE batch_id = %s AND name = ANY(%s)",
                                (batch_id, list(names))).fetchall()
        return {row["name"]: bytes(row["data"]) for row in rows}

    def delete(self, batch_id: UUID, names: Sequence[str] | None = None) -> None:
        """Delete NAMES of BATCH_ID (packed), or every row of the batch (removed)."""
        with self._pool_of().connection() as conn:
            if names is None:
                conn.execute("DELETE FROM payload_spool WHERE batch_id = %s", (batch_id,))
            elif names:
                conn.execute("DELETE FROM payload_spool WHERE batch_id = %s AND name = ANY(%s)",
                             (batch_id, list(names)))

    def batches(self) -> dict[UUID, float]:
        """Every batch with rows here, with the time its newest row was written (epoch seconds)."""
        with self._pool_of().connection() as conn:
            rows = conn.execute("SELECT batch_id, extract(epoch FROM max(created_at))::float8 AS written"
                                " FROM payload_spool GROUP BY batch_id").fetchall()
        return {row["batch_id"]: float(row["written"]) for row in rows}

    def adopt(self, pack: Pack) -> int:
        """Pack the rows ORPHAN_AGE_S old (ADOPT_ROWS at most; locked, so that two processes never pack the same),
        a pack per batch through PACK, and delete those it wrote; how many rows were packed. Rows of a living
        process that could not pack them (the bucket down that long) may be packed twice: the packs hold the same
        bytes, and a reader takes either."""
        packed = 0
        with self._pool_of().connection() as conn, conn.transaction():
            rows = conn.execute(_ORPHANS, (self.orphan_age_s, ADOPT_ROWS)).fetchall()
            per_batch: dict[UUID, list[tuple[str, bytes]]] = {}
            for row in rows:
                per_batch.setdefault(row["batch_id"], []).append((row["name"], bytes(row["data"])))
            for batch_id, parts in per_batch.items():
                if pack(batch_id, parts):
                    conn.execute("DELETE FROM payload_spool WHERE batch_id = %s AND name = ANY(%s)",
                                 (batch_id, [name for name, _ in parts]))
                    packed += len(parts)
        return packed

