"""Usage retention for operators (`relay usage purge`): the events created before a cutoff are folded into hourly
sums (usage_rollups, migration 0032) and deleted, so that a database keeps a bounded window of events however long
it runs. Summaries count the sums with the events (app/usage/store.py): their totals do not change. The events
list and export show only the events still kept.

A batch's events are folded only once the batch is gone (deleted, or `relay batches purge`): a batch that exists
keeps its items' events, which its own usage and its items' statuses are read from.

Each hour is folded in one statement: the events it deletes are exactly the ones it sums (a data-modifying WITH
reads the snapshot its statement started with), so an event written meanwhile is neither lost nor counted twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg import Connection
from psycopg_pool import ConnectionPool

from app.db import vacuum_for_reuse
from app.usage.store import EVENTS, UNPRICED

Conn = Connection[Any]

FOLDED = "(e.batch_id IS NULL OR NOT EXISTS (SELECT 1 FROM batches b WHERE b.id = e.batch_id))"
KEY = ("source", "status", "error_code", "model_requested", "host_id", "host_name", "credential_kind",
       "credential_id", "relay_key_hash", "principal_kind", "principal_id", "policy_id", "project_id", "team_id",
       "batch_id")
_FOLD = f"""
WITH gone AS (
    DELETE FROM usage_events e WHERE e.created_at >= %(start)s AND e.created_at < %(end)s AND {FOLDED}
    RETURNING e.id
), summed AS (
    INSERT INTO usage_rollups (hour, {", ".join(KEY)}, requests, input_tokens, output_tokens, cached_tokens,
                               cost_nanos, unpriced)
    SELECT date_trunc('hour', e.created_at, 'UTC'), {", ".join("e." + k for k in KEY)}, count(*),
           sum(e.input_tokens), sum(e.output_tokens), sum(e.cached_tokens), sum(e.cost_nanos),
           count(*) FILTER (WHERE {UNPRICED})
    FROM {EVENTS} e WHERE e.id IN (SELECT id FROM gone)
    GROUP BY 1, {", ".join("e." + k for k in KEY)}
    RETURNING batch_id
)
SELECT (SELECT count(*) FROM gone) AS events, (SELECT count(*) FROM summed) AS rows,
       ARRAY(SELECT DISTINCT batch_id FROM summed WHERE batch_id IS NOT NULL) AS batch_ids
"""
# A purged batch's shared row (migration 0030) once none of its events is left.
_DROP_SHARED = ("DELETE FROM usage_batch_shared s WHERE s.batch_id = ANY(%s)"
                " AND NOT EXISTS (SELECT 1 FROM usage_events e WHERE e.batch_id = s.batch_id)")
_NEXT = "SELECT min(created_at) FROM usage_events WHERE created_at >= %s AND created_at < %s"
VACUUMED = ("usage_events", "usage_batch_shared", "usage_rollups")  # what a fold deletes from or adds to


@dataclass
class FoldReport:
    """What a purge folded (or, with dry_run, would fold)."""

    events: int = 0
    rows: int = 0  # hourly rows written


def purge_usage(pool: ConnectionPool[Conn], before: datetime, *, dry_run: bool = False,
                vacuum: bool = True) -> FoldReport:
    """Fold every event created before BEFORE (but those of batches that still exist) into hourly sums, an hour
    (of events) a transaction; then, when something was folded and VACUUM says so, vacuum the tables for the next
    events to reuse their space (app.db.vacuum_for_reuse)."""
    report = FoldReport()
    if dry_run:
        with pool.connection() as conn:
            row = conn.execute(f"SELECT count(*) AS n FROM usage_events e WHERE e.created_at < %s AND {FOLDED}",
                               (before,)).fetchone()
        report.events = int(row["n"]) if row else 0
        return report
    after = datetime.min.replace(tzinfo=before.tzinfo)
    while True:
        with pool.connection() as conn:  # its transaction, committed as the connection goes back: one hour's fold
            start = _next_event(conn, after, before)
            if start is None:
                break
            after = min(start.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1), before)
            folded = conn.execute(_FOLD, {"start": start, "end": after}).fetchone()
            assert folded is not None
            if folded["batch_ids"]:
                conn.execute(_DROP_SHARED, (folded["batch_ids"],))
        report.events += int(folded["events"])
        report.rows += int(folded["rows"])
    if vacuum and report.events:
        vacuum_for_reuse(pool, VACUUMED)
    return report


def _next_event(conn: Conn, after: datetime, before: datetime) -> datetime | None:
    """The time of the first event at or after AFTER and before BEFORE (None: no such event)."""
    row = conn.execute(_NEXT, (after, before)).fetchone()
    return row["min"] if row else None
