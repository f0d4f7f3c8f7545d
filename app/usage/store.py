"""Usage events SQL for reading: filtered pages, a streamed export, and grouped sums (exact, in integer nanos),
all through the usage_events_full view (never the table). Sums count the hourly rows that `relay usage purge`
folded old events into (app/usage/retention.py) with the events still kept.

Every fragment below is a constant; values always travel as parameters.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import UUID

from psycopg import Connection
from psycopg_pool import ConnectionPool

from app.cursors import EventCursor
from app.usage.queries import UsageFilter, Visibility, sum_counters

Where = tuple[str, list[Any]]
# Events as readers see them: a batch item's request id made, its batch's shared parts filled in (migration 0030).
EVENTS = "usage_events_full"
# Folded events as summaries read events (migration 0032): each row counts `n` events, `unpriced` of them unpriced.
ROLLUPS = "usage_rollup_rows"
# What a sum reads of an event or a rollup row (alias `e`), then its count and unpriced count.
_SUMMED = ("e.source, e.created_at, e.status, e.error_code, e.model_requested, e.host_id, e.host_name,"
           " e.credential_kind, e.credential_id, e.principal_kind, e.principal_id, e.policy_id, e.project_id,"
           " e.team_id, e.batch_id, e.input_tokens, e.output_tokens, e.cached_tokens, e.cost_nanos")
# An event answered without a price (over alias `e`): summaries, the usage fold and a batch's usage count these.
UNPRICED = "e.cost_nanos IS NULL AND e.status < 400 AND e.error_code IS NULL"

_STATUS_RANGES = {"2xx": (200, 300), "3xx": (300, 400), "4xx": (400, 500), "5xx": (500, 600)}
_NAMED_TABLES = {"policy": ("policy_id", "policies"), "project": ("project_id", "projects"),
                 "team": ("team_id", "teams")}
_PRINCIPAL_TABLES = {"user": "users", "service_account": "service_accounts"}

# group_by name → (SQL expression, output column) pairs; names are looked up after aggregating.
GROUPS: dict[str, tuple[tuple[str, str], ...]] = {
    "source": (("e.source", "source"),),
    "model": (("e.model_requested", "model"),),
    "host": (("e.host_name", "host"),),
    "policy": (("e.policy_id", "policy_id"),),
    "project": (("e.project_id", "project_id"),),
    "team": (("e.team_id", "team_id"),),
    "principal": (("e.principal_kind", "principal_kind"), ("e.principal_id", "principal_id")),
    "credential": (("e.credential_kind", "credential_kind"), ("e.credential_id", "credential_id")),
    "batch": (("e.batch_id", "batch_id"),),
}
_GROUP_NAMES = {
    "policy": "(SELECT name FROM policies WHERE id = g.policy_id) AS policy",
    "project": "(SELECT name FROM projects WHERE id = g.project_id) AS project",
    "team": "(SELECT name FROM teams WHERE id = g.team_id) AS team",
    "principal": "CASE g.principal_kind WHEN 'user' THEN (SELECT name FROM users WHERE id = g.principal_id)"
                 " WHEN 'service_account' THEN (SELECT name FROM service_accounts WHERE id = g.principal_id)"
                 " END AS principal",
    "credential": "CASE g.credential_kind WHEN 'relay_key' THEN (SELECT coalesce(name, prefix) FROM relay_keys"
                  " WHERE id = g.credential_id) END AS credential",
}
BUCKET_SQL = {"hour": "date_trunc('hour', e.created_at, 'UTC')", "day": "date_trunc('day', e.created_at, 'UTC')"}

# A cancelled or expired batch item (error code batch_cancelled / batch_expired) is counted as `cancelled`, not
# as an error: nothing failed. `cost_nanos` is NULL for a group with no priced event (summary_json decides whether
# that is 0 or unknown).
_STOPPED = "e.error_code IN ('batch_cancelled', 'batch_expired')"
_AGGREGATES = f"""coalesce(sum(e.n), 0) AS requests,
  coalesce(sum(e.n) FILTER (WHERE (e.status >= 400 OR e.error_code IS NOT NULL) AND NOT coalesce({_STOPPED}, false)),
    0) AS errors,
  coalesce(sum(e.n) FILTER (WHERE {_STOPPED}), 0) AS cancelled,
  coalesce(sum(e.input_tokens), 0) AS input_tokens,
  coalesce(sum(e.output_tokens), 0) AS output_tokens,
  coalesce(sum(e.cached_tokens), 0) AS cached_tokens,
  sum(e.cost_nanos) AS cost_nanos,
  coalesce(sum(e.unpriced), 0) AS unpriced"""

# The principal's name, over any alias-`e` table with principal_kind and principal_id (events, batches).
PRINCIPAL_NAME = ("CASE e.principal_kind WHEN 'user' THEN (SELECT name FROM users WHERE id = e.principal_id)"
                  " WHEN 'service_account' THEN (SELECT name FROM service_accounts WHERE id = e.principal_id)"
                  " END AS principal")

_EVENT_COLUMNS = """e.id, e.request_id, e.source, e.created_at, e.started_at, e.duration_ms, e.route,
  e.status, e.upstream_status, e.error_code, e.model_requested, e.model_resolved, e.host_id, e.host_name, e.binding_id,
  e.adapter, e.host_key_name, e.credential_kind, e.credential_id, e.relay_key_hash, e.principal_kind,
  e.principal_id, e.policy_id, e.project_id, e.team_id, e.input_tokens, e.output_tokens, e.cached_tokens,
  e.cost_nanos, e.attempts, e.streamed, e.batch_id, e.batch_idx, e.custom_id,
  """ + PRINCIPAL_NAME + """,
  (SELECT name FROM policies WHERE id = e.policy_id) AS policy,
  (SELECT name FROM projects WHERE id = e.project_id) AS project,
  (SELECT name FROM teams WHERE id = e.team_id) AS team"""


def list_events(conn: Connection[Any], flt: UsageFilter, vis: Visibility, *, limit: int,
                after: EventCursor | None = None) -> list[dict[str, Any]]:
    """Up to LIMIT events newest first, strictly after the cursor position when given."""
    where, params = event_where(flt, vis)
    if after is not None:
        where += " AND e.created_at <= %s AND (e.created_at, e.id) < (%s, %s)"  # the first for the index
        params += [after.created_at, after.created_at, after.id]
    query = f"SELECT {_EVENT_COLUMNS} FROM {EVENTS} e WHERE {where} ORDER BY e.created_at DESC, e.id DESC LIMIT %s"
    return list(conn.execute(query, [*params, limit]).fetchall())


def iter_events(pool: ConnectionPool, flt: UsageFilter, vis: Visibility, *,
                chunk_rows: int = 500) -> Iterator[dict[str, Any]]:
    """Every matching event newest first, one keyset page of CHUNK_ROWS at a time, each read on a connection
    taken from POOL and handed back before its rows are yielded: a reader that stops reading holds no database
    connection (nor a transaction) between pages. Events recorded after the export began are newer than its
    first page, so they are never part of it."""
    after: EventCursor | None = None
    while True:
        with pool.connection() as conn:
            rows = list_events(conn, flt, vis, limit=chunk_rows, after=after)
        yield from rows
        if len(rows) < chunk_rows:
            return
        after = EventCursor(rows[-1]["created_at"], rows[-1]["id"])


def summarize(conn: Connection[Any], flt: UsageFilter, vis: Visibility, *, group_by: list[str],
              bucket: str | None, max_rows: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(totals, up to MAX_ROWS + 1 group rows), counters summed in SQL; totals are exact integer sums."""
    rows_sql, params = _summed_rows(flt, vis)
    pairs = [pair for name in group_by for pair in GROUPS[name]]
    if bucket is not None:
        pairs.insert(0, (BUCKET_SQL[bucket], "bucket"))
    if not pairs:
        totals = _totals(conn, rows_sql, params)
        return totals, [totals]
    exprs = ", ".join(expr for expr, _ in pairs)
    outputs = ", ".join(f"{expr} AS {alias}" for expr, alias in pairs)
    names = "".join(", " + _GROUP_NAMES[name] for name in group_by if name in _GROUP_NAMES)
    order = ", ".join(f"g.{alias}" for _, alias in pairs)
    first = "g.bucket, " if bucket is not None else ""
    query = (f"SELECT g.*{names} FROM (SELECT {outputs}, {_AGGREGATES} FROM {rows_sql} e"
             f" GROUP BY {exprs}) g ORDER BY {first}g.requests DESC, {order} LIMIT %s")
    rows = conn.execute(query, [*params, max_rows + 1]).fetchall()
    if len(rows) > max_rows:  # some groups are left out: total them in SQL
        return _totals(conn, rows_sql, params), rows
    return sum_counters(rows), rows


def _summed_rows(flt: UsageFilter, vis: Visibility) -> Where:
    """The rows a sum reads for FLT as seen by VIS: the events kept, each counting one, and the hourly rows of the
    folded ones (a folded hour is in a time range when the hour's start is)."""
    where, params = event_where(flt, vis)
    folded_where, folded_params = event_where(flt, vis, folded=True)
    return (f"(SELECT {_SUMMED}, 1 AS n, ({UNPRICED})::int AS unpriced FROM {EVENTS} e WHERE {where}"
            f" UNION ALL SELECT {_SUMMED}, e.n, e.unpriced FROM {ROLLUPS} e WHERE {folded_where})",
            [*params, *folded_params])


def _totals(conn: Connection[Any], rows_sql: str, params: list[Any]) -> dict[str, Any]:
    row = conn.execute(f"SELECT {_AGGREGATES} FROM {rows_sql} e", params).fetchone()
    assert row is not None
    return row


def event_where(flt: UsageFilter, vis: Visibility, *, folded: bool = False) -> Where:
    """The WHERE clause (over alias `e`) and its parameters for FLT as seen by VIS; over the rollup rows when
    FOLDED (which carry their attribution themselves)."""
    clauses, params = _visibility(vis, folded)
    simple = (("e.source = %s", flt.source), ("e.created_at >= %s", flt.from_), ("e.created_at < %s", flt.to),
              ("e.model_requested = %s", flt.model),
              ("e.batch_id = %s", flt.batch_id), ("e.error_code = %s", flt.error_code))
    for clause, value in simple:
        if value is not None:
            clauses.append(clause)
            params.append(value)
    if flt.credential is not None:
        clause, values = _attributed("a.credential_id = %s", [flt.credential], folded)
        clauses.append(clause)
        params += values
    if flt.status is not None:
        low, high = _STATUS_RANGES[flt.status]
        clauses.append("e.status >= %s AND e.status < %s")
        params += [low, high]
    if flt.host is not None:
        host_id = as_uuid(flt.host)
        clauses.append("e.host_id = %s" if host_id else "e.host_name = %s")
        params.append(host_id or flt.host)
    for name, (column, table) in _NAMED_TABLES.items():
        value = getattr(flt, name)
        if value is not None:
            clause, values = name_or_id_clause(column, table, value)
            clauses.append(clause)
            params += values
    if flt.principal is not None:
        clause, values = principal_clause(flt.principal)
        clauses.append(clause)
        params += values
    return " AND ".join(clauses) or "true", params


def _visibility(vis: Visibility, folded: bool) -> tuple[list[str], list[Any]]:
    if vis.admin:
        return [], []
    if vis.relay_key_hash is not None:
        clause, params = _attributed("a.credential_kind = 'relay_key' AND a.credential_id = %s"
                                     " AND a.relay_key_hash = %s", [vis.credential_id, vis.relay_key_hash], folded)
        return [clause], params
    if vis.user_id is not None:
        clause, params = _attributed("a.credential_kind = 'inference_token' AND a.principal_kind = 'user'"
                                     " AND a.principal_id = %s", [vis.user_id], folded)
        return [clause], params
    return ["false"], []  # a reader with no identity sees nothing


def _attributed(clause: str, params: list[Any], folded: bool = False) -> Where:
    """CLAUSE (over alias `a`: attribution columns, named alike in usage_events and usage_batch_shared) holds for
    the event's own attribution or its batch's: the events that carry theirs are found through the table's own
    indexes (usage_events_credential, usage_events_principal), the others through their batches' shared rows (the
    view's CASE columns would hide both from the planner). A rollup row (FOLDED) carries its own."""
    if folded:
        return f"({clause.replace('a.', 'e.')})", params
    return (f"e.id IN (SELECT a.id FROM usage_events a WHERE a.shared IS NULL AND {clause} UNION ALL"
            f" SELECT u.id FROM usage_batch_shared a JOIN usage_events u ON u.batch_id = a.batch_id"
            f" WHERE u.shared IS NOT NULL AND {clause})", [*params, *params])


def name_or_id_clause(column: str, table: str, value: str) -> Where:
    """`e.COLUMN` is VALUE's id, or the id of the TABLE row named VALUE (alias `e`: events or batches)."""
    uid = as_uuid(value)
    if uid is not None:
        return f"e.{column} = %s", [uid]
    return f"e.{column} IN (SELECT id FROM {table} WHERE name = %s)", [value]


def principal_clause(value: str) -> Where:
    """`user:NAME`, `service_account:ID`, or a bare name or id (either kind)."""
    kind, sep, rest = value.partition(":")
    kinds = [kind] if sep and kind in _PRINCIPAL_TABLES else list(_PRINCIPAL_TABLES)
    ident = rest if sep and kind in _PRINCIPAL_TABLES else value
    uid = as_uuid(ident)
    parts: list[str] = []
    params: list[Any] = []
    for k in kinds:
        if uid is not None:
            parts.append("(e.principal_kind = %s AND e.principal_id = %s)")
            params += [k, uid]
        else:
            parts.append(f"(e.principal_kind = %s AND e.principal_id IN (SELECT id FROM {_PRINCIPAL_TABLES[k]}"
                         " WHERE name = %s))")
            params += [k, ident]
    return "(" + " OR ".join(parts) + ")", params


def as_uuid(value: str) -> UUID | None:
    """VALUE as a UUID when it is one (names and ids share one filter argument)."""
    try:
        return UUID(value)
    except ValueError:
        return None
