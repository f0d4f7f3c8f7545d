"""What every item of a batch shares in its usage event, stored once per batch (usage_batch_shared, migration 0030).

A batch item's event leaves NULL the parts equal to its batch's shared row and says which in its `shared` column;
readers see the whole event through the `usage_events_full` view. The shared row is written from the first event
of its batch that reaches the writer (one that got a route, when the group has one) and never changes, so a process
remembers the rows it has read back from the database (never the ones its own uncommitted transaction inserted).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from app.usage.events import COLUMNS, UsageEvent

ATTRIBUTION = ("credential_kind", "credential_id", "relay_key_hash", "principal_kind", "principal_id", "policy_id",
               "project_id", "team_id")
NAMES = ("route", "model_requested", "model_resolved", "host_id", "host_name", "binding_id", "adapter")
# What an event leaves to its batch's row, as its `shared` value says: the attribution (1), then the names too (3).
PARTS = ((1, ATTRIBUTION), (3, NAMES))
_SHARED = ATTRIBUTION + NAMES
_CACHE_MAX = 4096  # batches remembered per process (a row is ~250 bytes)

_UPSERT = f"""
WITH new AS (
    INSERT INTO usage_batch_shared (batch_id, {', '.join(_SHARED)})
    SELECT * FROM unnest(%s::uuid[], {', '.join(f'%s::{kind}[]' for kind in (
        'text', 'uuid', 'bytea', 'text', 'uuid', 'uuid', 'uuid', 'uuid',
        'text', 'text', 'text', 'uuid', 'text', 'uuid', 'text'))})
    ON CONFLICT (batch_id) DO NOTHING
    RETURNING *
)
SELECT false AS committed, * FROM new
UNION ALL SELECT true, * FROM usage_batch_shared WHERE batch_id = ANY(%s)
"""
Shared = dict[str, Any]
STORED_COLUMNS = [*COLUMNS, "shared"]  # what the writer inserts


class _Known:
    """Shared rows known committed, by batch id (bounded: forgotten all at once when full)."""

    def __init__(self) -> None:
        self._rows: dict[UUID, Shared] = {}
        self._lock = threading.Lock()

    def get(self, batch_id: UUID) -> Shared | None:
        with self._lock:
            return self._rows.get(batch_id)

    def add(self, batch_id: UUID, row: Shared) -> None:
        with self._lock:
            if len(self._rows) >= _CACHE_MAX:
                self._rows.clear()
            self._rows[batch_id] = row


_known = _Known()


def shared_rows(conn: psycopg.Connection[Any], events: Sequence[UsageEvent]) -> dict[UUID, Shared]:
    """The shared row of each batch among EVENTS, inserted (in the caller's transaction) where missing."""
    rows: dict[UUID, Shared] = {}
    first: dict[UUID, UsageEvent] = {}
    for event in events:
        if event.batch_id is None:
            continue
        known = _known.get(event.batch_id)
        if known is not None:
            rows[event.batch_id] = known
        elif event.batch_id not in first or (first[event.batch_id].binding_id is None and event.binding_id):
            first[event.batch_id] = event
    if first:
        rows.update(_upsert(conn, [first[batch_id] for batch_id in sorted(first)]))
    return rows


def _upsert(conn: psycopg.Connection[Any], events: Sequence[UsageEvent]) -> dict[UUID, Shared]:
    """Insert the shared rows EVENTS make (sorted by batch: concurrent writers lock in the same order), then each
    batch's row: the one just inserted, or the one already there."""
    ids = [e.batch_id for e in events]
    columns = [[getattr(e, name) for e in events] for name in _SHARED]
    found: dict[UUID, Shared] = {}
    with conn.cursor(row_factory=dict_row) as cur:
        for row in cur.execute(_UPSERT, [ids, *columns, ids]).fetchall():
            batch_id, committed = row.pop("batch_id"), row.pop("committed")
            if committed:
                _known.add(batch_id, row)
            found[batch_id] = row
    return found


def stored_values(event: UsageEvent, shared: Shared | None) -> list[object]:
    """EVENT's column values (COLUMNS order, then `shared`): the parts equal to SHARED (its batch's row) left NULL,
    in order (the names only with the attribution), and `shared` saying how far."""
    values = dict(zip(COLUMNS, event.values(), strict=True))
    level = None
    for part, names in PARTS:
        if shared is None or any(values[name] != shared[name] for name in names):
            break
        level = part
        values.update(dict.fromkeys(names))
    return [*values.values(), level]

