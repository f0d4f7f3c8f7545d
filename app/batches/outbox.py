"""SQL of the worker side's background jobs: the dispatcher's outbox (what to publish next), the workers'
heartbeats, and the reaper's look for lost or stuck items. Every function takes a connection; the caller owns the
transaction.

The outbox is a cursor per batch: items [0, published_upto) have been published, in idx order, so publishing
writes one batch row per pass instead of one row per item. What is published but not final (the dispatch window)
is published_upto minus the final items counted in batch_progress.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from psycopg import Connection
from psycopg.rows import tuple_row

Row = dict[str, Any]
Conn = Connection[Any]


LEADER_IDLE_TIMEOUT = "3s"  # a leader whose process stops mid-transaction loses its lock after this
WORKER_SESSION_LOCK = 0x5E1A7B03  # with hashtext(worker id): the lock a live worker's session holds (migration 0024)
# The heartbeat session's TCP keepalives: a worker whose host is gone (not merely paused) loses its session, and so
# its items, after about idle + interval x count seconds.
SESSION_KEEPALIVES = {"tcp_keepalives_idle": "20", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "4"}
# A worker's item is lost when its heartbeat is stale and no session holds its lock (relay_worker_session). The
# item's claim is a sign of life too. The one definition, for the reaper and for a worker settling a message whose
# item another worker runs (store.item_status); %(lost)s is the lost-after time in seconds.
OWNER_LOST = ("((w.last_seen IS NULL OR greatest(w.last_seen, i.started_at) < now() - make_interval(secs => %(lost)s))"
               " AND NOT relay_worker_session(i.worker_id))")


def try_leader_lock(conn: Conn, lock_id: int) -> bool:
    """A transaction-scoped advisory lock: only one replica does this job at a time. The transaction is ended by
    the server if it sits idle for LEADER_IDLE_TIMEOUT (its process frozen: SIGSTOP, a paused VM, a publish blocked
    by a broker alarm), so one stuck process cannot stop every other replica from doing the job."""
    row = conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, true),"
                       " pg_try_advisory_xact_lock(%s) AS ok", (LEADER_IDLE_TIMEOUT, lock_id)).fetchone()
    return bool(row and row["ok"])


def outbox_batches(conn: Conn, limit: int = 200) -> list[Row]:
    """Batches (not cancelled) with items left to publish, oldest first: id, owner, policy (its name and batch
    weight), cursor, total and the submit's trace context."""
    return conn.execute(
        "SELECT b.id, b.owner, b.policy_id, p.name AS policy, p.batch_weight AS weight, b.published_upto, b.total,"
        " b.trace_context"
        " FROM batches b JOIN policies p ON p.id = b.policy_id"
        " WHERE b.dispatched_at IS NULL AND b.status = 'queued' AND b.published_upto < b.total"
        " ORDER BY b.created_at, b.id LIMIT %s", (limit,)).fetchall()


def in_flight(conn: Conn) -> dict[str, int]:
    """Published items not yet final, per owner, over every unfinished batch (their sum is the dispatch window)."""
    rows = conn.execute(
        "SELECT b.owner, sum(greatest(0, b.published_upto - coalesce((SELECT sum(p.completed + p.discarded"
        " + p.cancelled) FROM batch_progress p WHERE p.batch_id = b.id), 0))) AS n"
        " FROM batches b WHERE b.finished_at IS NULL GROUP BY b.owner").fetchall()
    return {r["owner"]: int(r["n"]) for r in rows}


def paced_unstarted(conn: Conn, policy_ids: Sequence[UUID]) -> dict[UUID, int]:
    """Items of unfinished batches of these (paced) policies that were published but have not started: what is
    already on its way to use the policies' batch budget."""
    rows = conn.execute(
        "SELECT b.policy_id, sum(greatest(0, b.published_upto - coalesce((SELECT sum(p.completed + p.discarded"
        " + p.cancelled + p.running) FROM batch_progress p WHERE p.batch_id = b.id), 0))) AS n"
        " FROM batches b WHERE b.finished_at IS NULL AND b.status = 'queued' AND b.policy_id = ANY(%s)"
        " GROUP BY b.policy_id", (list(policy_ids),)).fetchall()
    return {r["policy_id"]: int(r["n"]) for r in rows}


def paced_waiting(conn: Conn, policy_id: UUID, owner: str, before: Any = None) -> tuple[int, int]:
    """(other owners with items waiting to start on POLICY_ID, OWNER's items not started in its batches created
    before BEFORE, or in all of them when None): whom a paced batch of OWNER shares the policy's budget with, and
    what of its own goes first (scheduler.PacedShares: owners fairly, an owner's batches oldest first)."""
    row = conn.execute(
        "SELECT count(DISTINCT b.owner) FILTER (WHERE b.owner <> %(owner)s) AS others,"
        " coalesce(sum(b.total - coalesce((SELECT sum(p.completed + p.discarded + p.cancelled + p.running)"
        " FROM batch_progress p WHERE p.batch_id = b.id), 0)) FILTER (WHERE b.owner = %(owner)s"
        " AND (%(before)s::timestamptz IS NULL OR b.created_at < %(before)s)), 0) AS ahead"
        " FROM batches b WHERE b.policy_id = %(policy)s AND b.finished_at IS NULL AND b.status = 'queued'"
        " AND b.published_upto < b.total", {"owner": owner, "before": before, "policy": policy_id}).fetchone()
    return (int(row["others"]), int(row["ahead"])) if row else (0, 0)


def live_workers(conn: Conn, seen_within_s: float) -> tuple[int, int]:
    """(threads, processes) of the live worker processes: the items they run at once, and how many they are."""
    row = conn.execute("SELECT coalesce(sum(threads), 0) AS n, count(*) AS p FROM workers"
                       " WHERE last_seen > now() - make_interval(secs => %s)", (seen_within_s,)).fetchone()
    return (int(row["n"]), int(row["p"])) if row else (0, 0)


def silent_workers(conn: Conn, after_s: float, forget_s: float) -> int:
    """Worker processes whose heartbeat stopped more than AFTER_S (and less than FORGET_S) ago: stopped or paused,
    or dead and not yet removed."""
    row = conn.execute("SELECT count(*) AS n FROM workers WHERE last_seen < now() - make_interval(secs => %s)"
                       " AND last_seen > now() - make_interval(secs => %s)", (after_s, forget_s)).fetchone()
    return int(row["n"]) if row else 0


def advance(conn: Conn, cursors: Sequence[tuple[UUID, int]]) -> None:
    """Move each batch's publish cursor to its new position; a batch with nothing left gets dispatched_at."""
    conn.execute(
        "UPDATE batches b SET published_upto = greatest(b.published_upto, c.upto), last_published_at = now(),"
        " dispatched_at = CASE WHEN greatest(b.published_upto, c.upto) >= b.total THEN now() END"
        " FROM unnest(%s::uuid[], %s::int[]) AS c(id, upto) WHERE b.id = c.id",
        ([c[0] for c in cursors], [c[1] for c in cursors]))


def stranded_items(conn: Conn, older_than_s: float, limit: int = 2000) -> list[tuple[UUID, int]]:
    """Queued items below their batch's publish cursor whose batch was last published long ago: their message was
    lost (the caller checked that the queue is empty). Publishing them again is harmless: the claim dedupes."""
    cur = conn.cursor(row_factory=tuple_row)
    cur.execute(
        "SELECT i.batch_id, i.idx FROM batches b JOIN batch_items i ON i.batch_id = b.id AND i.idx < b.published_upto"
        " WHERE b.finished_at IS NULL AND b.status = 'queued' AND i.state = 'queued'"
        " AND b.last_published_at < now() - make_interval(secs => %s) ORDER BY i.batch_id, i.idx LIMIT %s",
        (older_than_s, limit))
    return [(r[0], r[1]) for r in cur.fetchall()]


def touch_published(conn: Conn, batch_ids: Sequence[UUID]) -> None:
    """Record that these batches had items published now (republished stranded items)."""
    conn.execute("UPDATE batches SET last_published_at = now() WHERE id = ANY(%s)", (list(batch_ids),))


def hold_worker_session(conn: Conn, worker_id: str) -> bool:
    """Take WORKER_ID's session lock on CONN (its heartbeat connection, kept for the process's life), with keepalives
    that end the session of a host that is gone; whether it was free (it is only ever this process's)."""
    for name, value in SESSION_KEEPALIVES.items():
        conn.execute("SELECT set_config(%s, %s, false)", (name, value))
    row = conn.cursor(row_factory=tuple_row).execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))",
                                                     (WORKER_SESSION_LOCK, worker_id)).fetchone()
    return bool(row and row[0])


def heartbeat(conn: Conn, worker_id: str, hostname: str, pid: int, threads: int = 0) -> None:
    """Record that WORKER_ID (running THREADS items at once) is alive now."""
    conn.execute("INSERT INTO workers (id, hostname, pid, threads) VALUES (%s, %s, %s, %s)"
                 " ON CONFLICT (id) DO UPDATE SET last_seen = now(), threads = excluded.threads",
                 (worker_id, hostname, pid, threads))


def remove_worker(conn: Conn, worker_id: str) -> None:
    conn.execute("DELETE FROM workers WHERE id = %s", (worker_id,))


def cancelled_batches(conn: Conn, batch_ids: Sequence[UUID]) -> list[UUID]:
    """Which of BATCH_IDS are cancelled."""
    rows = conn.execute("SELECT id FROM batches WHERE id = ANY(%s) AND status = 'cancelled'",
                        (list(batch_ids),)).fetchall()
    return [r["id"] for r in rows]


def lost_items(conn: Conn, *, lost_after_s: float, time_limit_s: float, judge_owners: bool = True,
               limit: int = 500) -> list[Row]:
    """Running items of unfinished batches whose worker is lost (only when JUDGE_OWNERS: its heartbeat stale and
    its session gone; a paused worker keeps its items), or that ran past TIME_LIMIT_S; locked for update. The claim
    is a sign of life too: a worker back from a partition claims again before its next heartbeat lands, and those
    fresh claims are not lost."""
    return conn.execute(
        f"SELECT i.batch_id, i.idx, i.model, i.worker_id, {OWNER_LOST} AS owner_lost"
        " FROM batches b JOIN batch_items i ON i.batch_id = b.id LEFT JOIN workers w ON w.id = i.worker_id"
        " WHERE b.finished_at IS NULL AND EXISTS (SELECT 1 FROM batch_progress p WHERE p.batch_id = b.id"
        "  GROUP BY p.batch_id HAVING sum(p.running) > 0)"
        f" AND i.state = 'running' AND ((%(owners)s AND {OWNER_LOST})"
        " OR i.started_at < now() - make_interval(secs => %(limit_s)s))"
        " ORDER BY i.started_at LIMIT %(limit)s FOR UPDATE OF i SKIP LOCKED",
        {"lost": lost_after_s, "owners": judge_owners, "limit_s": time_limit_s, "limit": limit}).fetchall()


def forget_stale_workers(conn: Conn, older_than_s: float) -> None:
    """Drop heartbeat rows of workers gone for long and owning no running item."""
    conn.execute("DELETE FROM workers w WHERE last_seen < now() - make_interval(secs => %s) AND NOT EXISTS"
                 " (SELECT 1 FROM batches b JOIN batch_items i ON i.batch_id = b.id WHERE b.finished_at IS NULL"
                 " AND i.state = 'running' AND i.worker_id = w.id)", (older_than_s,))
