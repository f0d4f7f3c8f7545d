"""One owner for a batch item's life: its states, and every write of `batch_items.state`.

An item is `queued` when its batch is stored (the COPY of `store.copy_items`), `running` once a worker claims it
(`claim_item`, `claim_reserved`, `claim_items`), and final (`completed`, `discarded`, `cancelled`) when
`commit_finals` moves it, with its one usage event written through a call down into `app.usage.writer`. A batch
ends (finished_at set) when its last item is final: `finish_*` set it, whoever notices first (the group commit of
the last items, a cancel, the reaper, a read), and hand the batches that just ended to the end-of-batch hooks
registered at boot (`on_batch_end`: the webhook event), in the same transaction. Nothing else writes
`batch_items.state` (tests/test_lifecycle_rules.py checks it), and nothing here knows which API created a batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import Connection
from psycopg.rows import tuple_row

from app.batches.store import OVER_BUDGET, own_unseen_claim
from app.usage.writer import FinalsPort, ItemKey, UsageRecord, commit_records, correct_late_usage
from schemas.batches import ACTIVE_STATES, FINAL_STATES, ITEM_STATES, ItemState

__all__ = ["ACTIVE_STATES", "FINAL_STATES", "ITEM_STATES", "ItemState"]

Row = dict[str, Any]
Conn = Connection[Any]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ItemFinal:
    """A batch item moving FROM_STATE (owned by WORKER_ID when given) to its final STATE, with its usage record and
    where its response is stored (segment, offset, length) when it has one."""

    batch_id: UUID
    idx: int
    state: str
    error: str | None
    error_code: str | None
    record: UsageRecord
    from_state: str = ItemState.RUNNING
    worker_id: str | None = None
    response: tuple[str, int, int] | None = None
    then: tuple[int, Future[Any]] | None = None  # the next item to claim in the same transaction, and its result

    @property
    def key(self) -> ItemKey:
        return self.batch_id, self.idx


# -- The claim: queued → running. ---------------------------------------------------------------------------------

# What a hard-capped batch has spent or holds: the recorded cost of its final items plus the bounds its running items
# reserved (a final swaps its item's bound for its cost, never more: the sum only shrinks between claims).
_COMMITTED = ("(SELECT coalesce(sum(p.cost_nanos + p.reserved_nanos), 0) FROM batch_progress p"
              " WHERE p.batch_id = b.id)")
HARD = "b.max_cost_mode = 'hard'"
# A worker's group commit (its items' final states, then its messages' next items claimed) and a hard-capped claim
# hold items' rows until they end. If the worker process stops inside one (SIGSTOP, a paused VM or container), the
# server ends it after this, and the claims of other workers that wait on those rows go on; the paused process's
# commit then fails, and its group writer commits again when it resumes. (Not set on the API's cancels: a cancel
# of a large batch runs many statements, and a busy process may leave gaps between them.)
PAUSED_HOLDER_TIMEOUT = "5s"


def end_if_paused(conn: Conn) -> None:
    """Have the server end CONN's transaction (this one only) if its process stops inside it for
    PAUSED_HOLDER_TIMEOUT."""
    conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, true)", (PAUSED_HOLDER_TIMEOUT,))


_CLAIM = f"""
WITH claimed AS (
    UPDATE batch_items i SET state = 'running', worker_id = %(worker)s, started_at = now(),
           reserved_nanos = %(bound)s::bigint FROM batches b
    WHERE i.batch_id = %(batch_id)s AND i.idx = %(idx)s AND i.state = 'queued' AND b.id = i.batch_id
      AND b.status = 'queued' AND (b.expires_at IS NULL OR b.expires_at > now())
      AND (b.max_cost_nanos IS NULL
           OR (b.max_cost_mode IS DISTINCT FROM 'hard' AND NOT ({OVER_BUDGET}))
           OR ({HARD} AND %(bound)s::bigint IS NOT NULL AND %(bound)s::bigint + {_COMMITTED} <= b.max_cost_nanos))
    RETURNING b.id, b.shape, b.policy_id, b.project_id, b.team_id, b.principal_kind, b.principal_id,
              b.credential_kind, b.credential_id, b.relay_key_hash, i.model, i.custom_id, i.started_at
), counted AS (
    INSERT INTO batch_progress AS p (batch_id, counter, running, reserved_nanos)
    SELECT id, %(counter)s, 1, coalesce(%(bound)s::bigint, 0) FROM claimed
    ON CONFLICT (batch_id, counter) DO UPDATE SET running = p.running + 1,
        reserved_nanos = p.reserved_nanos + excluded.reserved_nanos
)
SELECT * FROM claimed
"""


def claim_item(conn: Conn, batch_id: UUID, idx: int, worker_id: str, counter: str | None = None,
               bound: int | None = None) -> Row | None:
    """queued → running for WORKER_ID unless the batch is cancelled, past its deadline or at its spend cap (counted
    in COUNTER's progress row, by default the worker's own; rows of one batch are only ever summed, so a claim may
    count in one row and the final state in another); the batch row (+ item model) or None.

    A hard-capped batch's item is claimed only with its cost BOUND (nano-dollars), reserved with the claim when it
    fits under the cap beside what is spent and reserved; claims of one such batch must be made one at a time
    (claim_reserved), or two could each find room for one."""
    return conn.execute(_CLAIM, {"worker": worker_id, "batch_id": batch_id, "idx": idx,  # type: ignore[no-any-return]
                                 "counter": worker_id if counter is None else counter, "bound": bound}).fetchone()


def claim_reserved(conn: Conn, batch_id: UUID, idx: int, worker_id: str, counter: str, bound: int) -> Row | None:
    """claim_item of a hard-capped batch's item with its cost BOUND, in its own transaction, after the batch's claim
    lock: the claim statement then sees every reservation committed before it. Only claims take the lock, and take
    no other lock before it, so it never joins a deadlock."""
    with conn.transaction():
        end_if_paused(conn)
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"relay-cap:{batch_id}",))
        return claim_item(conn, batch_id, idx, worker_id, counter, bound)


class ClaimRetries:
    """One item's claim tried again through ended connections (an acked message whose claim failed would leave the
    item waiting for the lost-message sweep): the waits between attempts, and, once an attempt was cut, the claim of
    this worker's that committed unseen. That item is running under WORKER_ID since the cut attempt, and since
    nothing here ran it (the registry keeps one thread per item), it is adopted and run, not discarded."""

    def __init__(self, key: tuple[UUID, int], worker_id: str, waits: Sequence[float],
                 claimed_since: float | None = None) -> None:
        self.key, self.worker_id = key, worker_id
        self.retried = False  # an attempt was cut: the item's own claim may have committed unseen
        self._waits = iter((*waits, None))
        self._first = time.monotonic()
        # CLAIMED_SINCE (monotonic): the item's claim rode in a commit of this worker's whose answer was lost then
        # (its predecessor's final state, app/batches/messages.py); that claim is adopted too
        self._since = claimed_since

    def adopted(self, conn: Conn, row: Row | None) -> Row | None:
        """ROW (what an attempt claimed), or when it is None after a cut attempt (or with CLAIMED_SINCE), this
        worker's claim that committed unseen since the first attempt (or since then), as claim_item returns it, if
        there is one."""
        if row is not None or not (self.retried or self._since is not None):
            return row
        since = self._first if self._since is None else min(self._since, self._first)
        return own_unseen_claim(conn, *self.key, self.worker_id, time.monotonic() - since + 1)

    def wait(self, exc: Exception) -> None:
        """After an attempt ended by EXC: wait before the next one, or raise EXC when the waits are used up."""
        delay = next(self._waits)
        if delay is None:
            raise exc
        log.warning("claiming %s:%s failed (%s); retrying in %.1fs", *self.key, exc, delay)
        self.retried = True
        time.sleep(delay)


_CLAIM_MANY = """
WITH wanted AS (SELECT * FROM unnest(%(batch_ids)s::uuid[], %(idxs)s::int[]) AS w(batch_id, idx)),
claimed AS (
    UPDATE batch_items i SET state = 'running', worker_id = %(worker)s, started_at = now() FROM batches b, wanted w
    WHERE i.batch_id = w.batch_id AND i.idx = w.idx AND i.state = 'queued' AND b.id = i.batch_id
      AND b.status = 'queued' AND (b.expires_at IS NULL OR b.expires_at > now())
      AND b.max_cost_mode IS DISTINCT FROM 'hard'
    RETURNING i.idx, b.id, b.shape, b.policy_id, b.project_id, b.team_id, b.principal_kind, b.principal_id,
              b.credential_kind, b.credential_id, b.relay_key_hash, i.model, i.custom_id, i.started_at
), counted AS (
    INSERT INTO batch_progress AS p (batch_id, counter, running) SELECT id, %(counter)s, count(*) FROM claimed
    GROUP BY id ON CONFLICT (batch_id, counter) DO UPDATE SET running = p.running + excluded.running
)
SELECT * FROM claimed
"""


def claim_items(conn: Conn, keys: Sequence[tuple[UUID, int]], worker_id: str, counter: str) -> dict[tuple[UUID, int],
                                                                                                   Row]:
    """claim_item for several items at once (the next items of messages, claimed with their predecessors' final
    states): the claimed ones' rows by (batch id, idx)."""
    rows = conn.execute(_CLAIM_MANY, {"batch_ids": [k[0] for k in keys], "idxs": [k[1] for k in keys],
                                      "worker": worker_id, "counter": counter}).fetchall()
    return {(row["id"], row["idx"]): row for row in rows}


# -- The final write: queued or running → completed, discarded or cancelled. -----------------------------------

_FINALIZE = """
WITH f AS (
    SELECT * FROM unnest(%s::uuid[], %s::int[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
                         %s::text[], %s::bigint[], %s::int[], %s::bigint[])
        AS f(batch_id, idx, state, error, error_code, from_state, worker_id, segment, "offset", length, cost)
), done AS (
    UPDATE batch_items i SET state = f.state, error = f.error, error_code = f.error_code, finished_at = now(),
           response_segment = response_segment_code(f.segment), response_offset = f."offset", response_length = f.length
    FROM f
    WHERE i.batch_id = f.batch_id AND i.idx = f.idx AND i.state = f.from_state
      AND (f.worker_id IS NULL OR i.worker_id = f.worker_id)
    RETURNING i.batch_id, i.idx, f.state, f.from_state, f.cost, f.error_code, i.reserved_nanos
), moved AS (
    SELECT batch_id, count(*) AS n, count(*) FILTER (WHERE from_state = 'running') AS running,
           count(*) FILTER (WHERE state = 'completed') AS completed, count(*) FILTER (WHERE state = 'discarded')
           AS discarded, count(*) FILTER (WHERE state = 'cancelled') AS cancelled, coalesce(sum(cost), 0) AS cost,
           count(*) FILTER (WHERE error_code = 'batch_expired') AS expired,
           coalesce(sum(reserved_nanos) FILTER (WHERE from_state = 'running'), 0) AS reserved
    FROM done GROUP BY batch_id
), counted AS (
    INSERT INTO batch_progress AS p (batch_id, counter, running, completed, discarded, cancelled, cost_nanos,
                                     expired, reserved_nanos)
    SELECT batch_id, %s, -running, completed, discarded, cancelled, cost, expired, -reserved FROM moved
    ON CONFLICT (batch_id, counter) DO UPDATE SET running = p.running + excluded.running,
        completed = p.completed + excluded.completed, discarded = p.discarded + excluded.discarded,
        cancelled = p.cancelled + excluded.cancelled, cost_nanos = p.cost_nanos + excluded.cost_nanos,
        expired = p.expired + excluded.expired, reserved_nanos = p.reserved_nanos + excluded.reserved_nanos
), tails AS (
    -- The batches these finals leave with no queued item (by the counters before this statement: its own updates
    -- are not visible to it), and whether they complete them: what was final before plus what this moves. Only
    -- those are finished, in a statement of their own: no other batch row is touched.
    SELECT b.id, b.total <= g.final + m.n AS ends
    FROM moved m JOIN batches b ON b.id = m.batch_id,
         LATERAL (SELECT coalesce(sum(p.completed + p.discarded + p.cancelled), 0) AS final,
                         coalesce(sum(p.running), 0) AS running FROM batch_progress p WHERE p.batch_id = b.id) g
    WHERE b.finished_at IS NULL AND b.total <= g.final + g.running
)
SELECT batch_id, idx, NULL::boolean FROM done UNION ALL SELECT id, -1, ends FROM tails
"""


def _finalize(conn: Conn, finals: Sequence[ItemFinal],
              counter: str) -> tuple[set[ItemKey], set[UUID], set[UUID]]:
    """Move FINALS' items; the keys of those that moved, the batches whose every item is now final, and those left
    with no queued item but others running."""
    columns: list[list[Any]] = [[] for _ in range(11)]
    for f in finals:
        segment, offset, length = f.response or (None, None, None)
        for column, value in zip(columns, (f.batch_id, f.idx, f.state, f.error, f.error_code, f.from_state,
                                           f.worker_id, segment, offset, length, f.record.event.cost_nanos),
                                 strict=True):
            column.append(value)
    cur = conn.cursor(row_factory=tuple_row)
    cur.execute(_FINALIZE, [*columns, counter])
    rows = cur.fetchall()  # the items that moved, then a row (idx -1) per batch left with nothing queued
    return ({(row[0], row[1]) for row in rows if row[2] is None}, {row[0] for row in rows if row[2]},
            {row[0] for row in rows if row[2] is False})

def commit_finals(conn: Conn, finals: Sequence[ItemFinal], records: Sequence[UsageRecord] = (), *,
                  counter: str = "", tails: set[UUID] | None = None) -> set[ItemKey]:
    """Move FINALS' items to their final state in the caller's transaction, with the usage event of every item that
    moved (and RECORDS), through app.usage.writer; the keys of the finals whose item moved.

    A batch whose last items these finals are ends here too (finish_batches_now). TAILS, when given, gets the
    batches left with no queued item but others running: two processes committing the last items of one batch at
    once each miss the other's, so the caller checks those again once committed (the reaper would within a
    heartbeat)."""
    done, ending, tail = _finalize(conn, finals, counter) if finals else (set(), set(), set())
    correct_late_usage(conn, [f.record.event for f in finals if f.key not in done], counter)
    commit_records(conn, [*(f.record for f in finals if f.key in done), *records])
    if ending:
        finish_batches_now(conn, sorted(ending))
    if tails is not None:
        tails |= tail
    return done


# -- The batch's end: finished_at, and the end-of-batch hooks. ----------------------------------------------------

# The columns of an ended batch handed to the hooks.
ENDED_COLUMNS = ("id, api, status, total, project_id, team_id, callback_url, callback_secret_enc, metadata,"
                 " created_at, finished_at, expires_at")
BatchEndHook = Callable[[Conn, Sequence[Row]], object]
_hooks: dict[str, BatchEndHook] = {}


def on_batch_end(name: str, hook: BatchEndHook) -> None:
    """Register HOOK (by NAME: registering again replaces it) to run, in the transaction that ends them, on the
    batches that have just ended (rows of ENDED_COLUMNS)."""
    _hooks[name] = hook


def end_if_final(conn: Conn, row: Row, counts: dict[str, int]) -> None:
    """A read of a batch ROW with its item COUNTS: record finished_at on the row once every item is final (a batch
    nobody's commit finished yet: its last items' processes died, or their tail check missed)."""
    if row["finished_at"] is None and not counts.get("queued") and not counts.get("running"):
        with conn.transaction():  # the batch's end and its hooks' writes commit together
            row["finished_at"] = finish_batch(conn, row["id"])


_FINISHED = ("finished_at IS NULL AND total <= (SELECT coalesce(sum(p.completed + p.discarded + p.cancelled), 0)"
             " FROM batch_progress p WHERE p.batch_id = b.id)")
_LAST_FINISH = "coalesce((SELECT max(finished_at) FROM batch_items WHERE batch_id = b.id), now())"


def finish_batch(conn: Conn, batch_id: UUID) -> datetime | None:
    """Record finished_at (the last item's finish time) once every item is final, with its end-of-batch hooks;
    None if not yet."""
    ended = _finish(conn, _LAST_FINISH, "id = %s", (batch_id,))
    return ended[0]["finished_at"] if ended else None


def finish_batches(conn: Conn) -> int:
    """finish_batch for every unfinished batch (run by the reaper, so lists catch up without a read)."""
    return len(_finish(conn, _LAST_FINISH, "true", ()))


def finish_batches_now(conn: Conn, batch_ids: Sequence[UUID]) -> int:
    """finish_batch for BATCH_IDS, finished now: the group commit that makes their last items final (this
    transaction's time is their last item's)."""
    return len(_finish(conn, "now()", "id = ANY(%s)", (list(batch_ids),)))


def _finish(conn: Conn, finished_at: str, where: str, params: Sequence[Any]) -> list[Row]:
    """Set finished_at (the SQL FINISHED_AT) on the batches matching WHERE whose items are all final, and record
    their webhook events in the same transaction; the batches that ended."""
    ended = conn.execute(f"UPDATE batches b SET finished_at = {finished_at} WHERE {where} AND {_FINISHED}"
                         f" RETURNING {ENDED_COLUMNS}", params).fetchall()
    if ended:
        for hook in list(_hooks.values()):
            hook(conn, ended)
    return ended  # type: ignore[no-any-return]


def _group_commit(conn: Conn, finals: Sequence[ItemFinal], records: Sequence[UsageRecord] = (), *,
                  counter: str = "", tails: set[UUID] | None = None) -> set[ItemKey]:
    """commit_finals in a worker's group commit, whose transaction the server ends if the worker stops inside it."""
    if finals:
        end_if_paused(conn)
    return commit_finals(conn, finals, records, counter=counter, tails=tails)


# What a group writer needs of the engine to commit items' final states (app/usage never imports app/batches).
GROUP_FINALS = FinalsPort(commit=_group_commit, finish=finish_batches_now)
