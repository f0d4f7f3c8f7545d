"""The engine's reads for the views built on it (the OpenAI- and Anthropic-compatible APIs): batch rows, their counts
and usage. The views call these, never the engine's SQL module. Every function takes a connection."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from psycopg import Connection

from app.auth_model import Caller
from app.batches import lifecycle, store
from app.batches.errors import BatchNotFound
from app.batches.service import owned_batch
from app.batches.store import finished_usage, first_models, list_batches_of_api

__all__ = ["batch_of_api", "counts_of", "finished_usage", "first_models", "list_batches_of_api"]

Row = dict[str, Any]
Conn = Connection[Any]


def batch_of_api(conn: Conn, caller: Caller, text_id: str, api: str) -> Row:
    """CALLER's batch created through API; BatchNotFound otherwise (malformed ids included)."""
    row = owned_batch(conn, caller, text_id)
    if row["api"] != api:
        raise BatchNotFound(message="batch not found")
    return row


def counts_of(conn: Conn, rows: Sequence[Row]) -> dict[UUID, dict[str, int]]:
    """The item counts of ROWS from the engine's progress counters (with `expired`); a batch whose items are all
    final gets its finished_at recorded on the row, as Relay's own read does."""
    counts = store.counts_by_batch(conn, rows)
    for row in rows:
        lifecycle.end_if_final(conn, row, counts[row["id"]])
    return counts
