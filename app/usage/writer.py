"""The one writer of usage events: a call's event with its side writes, and (through the batch engine's lifecycle,
plugged in as a `FinalsPort`) a batch item's final state with its single event, committed in groups.

`commit_records(conn, records)` is the only code that inserts usage events. In one transaction (the caller's) it
inserts the usage event of every RECORD, then applies their side writes (rate-limit tokens, breaker changes, payload
logs) grouped by statement, always in the same order so concurrent groups cannot deadlock. Items' final states are
`app.batches.lifecycle.commit_finals`, which calls down into it; this package never imports app/batches.

`GroupWriter` is a per-process thread that batches what many threads submit into one such transaction: a worker
process's items, a live API process's calls. Calls' events with no side writes are one statement (an INSERT, or a
COPY of several), which commits by itself: no BEGIN and COMMIT round trips, two of a sequential call's three.
`before_commit` runs first (the payload store's sync: a response's location is committed only once its bytes are
durable).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

import psycopg
from psycopg_pool import ConnectionPool

from app.db import CONNECTION_ENDED, Statement, autocommit
from app.usage.events import UsageEvent
from app.usage.shared import STORED_COLUMNS, shared_rows, stored_values

log = logging.getLogger("relay.usage.writer")
ItemKey = tuple[UUID, int]
RETRY_S = (0.2, 0.5, 1.0, 2.0, 4.0, *(8.0,) * 8)  # waits between attempts while Postgres is away (~72 s)


@dataclass(frozen=True)
class UsageRecord:
    """A usage event and the writes that belong with it (rate-limit tokens, breaker changes, payload log)."""

    event: UsageEvent
    extra: tuple[Statement, ...] = ()


class Final(Protocol):
    """A batch item's final state as a group writer handles it (app.batches.lifecycle.ItemFinal)."""

    @property
    def key(self) -> ItemKey: ...
    @property
    def state(self) -> str: ...
    @property
    def response(self) -> tuple[str, int, int] | None: ...
    @property
    def then(self) -> tuple[int, Future[Any]] | None: ...


@dataclass(frozen=True)
class FinalsPort:
    """How a group writer commits items' final states: COMMIT (conn, finals, records, counter=, tails=) → the keys
    that moved, and FINISH (conn, batch ids) ends the batches a commit left for a second look. The batch engine's
    lifecycle provides it (`app.batches.lifecycle.GROUP_FINALS`)."""

    commit: Callable[..., set[ItemKey]]
    finish: Callable[[psycopg.Connection[Any], Sequence[UUID]], int]


def commit_records(conn: psycopg.Connection[Any], records: Sequence[UsageRecord]) -> None:
    """Insert RECORDS' usage events and apply their side writes, in the caller's transaction."""
    _insert_events(conn, [r.event for r in records])
    _side_writes(conn, [s for r in records for s in r.extra])


_LATE_USAGE = """
WITH f AS (
    SELECT * FROM unnest(%s::uuid[], %s::int[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[])
        AS f(batch_id, idx, input_tokens, output_tokens, cached_tokens, cost)
), fixed AS (
    UPDATE usage_events u SET input_tokens = f.input_tokens, output_tokens = f.output_tokens,
           cached_tokens = f.cached_tokens, cost_nanos = f.cost
    FROM f WHERE u.batch_id = f.batch_id AND u.batch_idx = f.idx AND u.error_code = 'worker_lost'
      AND u.input_tokens = 0 AND u.output_tokens = 0
    RETURNING u.batch_id, coalesce(f.cost, 0) AS cost
), counted AS (
    INSERT INTO batch_progress AS p (batch_id, counter, cost_nanos)
    SELECT batch_id, %s, sum(cost) FROM fixed GROUP BY batch_id
    ON CONFLICT (batch_id, counter) DO UPDATE SET cost_nanos = p.cost_nanos + excluded.cost_nanos
)
DELETE FROM batch_usage WHERE batch_id IN (SELECT batch_id FROM fixed)
"""


def correct_late_usage(conn: psycopg.Connection[Any], late: Sequence[UsageEvent], counter: str) -> None:
    """The usage events of batch items' finals that found their item moved on, the upstream having answered (tokens
    counted): the reaper judged their worker lost meanwhile (its session ended: a partition past the keepalives). The
    item stays `worker_lost`, but its usage event gets what the upstream counted, and its cost counts toward the
    spend cap (a finished batch's cached sums are dropped, to be summed again)."""
    events = [e for e in late if e.input_tokens or e.output_tokens]
    if not events:
        return
    conn.execute(_LATE_USAGE, ([e.batch_id for e in events], [e.batch_idx for e in events],
                               [e.input_tokens for e in events], [e.output_tokens for e in events],
                               [e.cached_tokens for e in events], [e.cost_nanos for e in events], counter))


def _insert_events(conn: psycopg.Connection[Any], events: Sequence[UsageEvent]) -> None:
    """One event: a plain insert; several: one COPY (the batch unique index still refuses a second event). A batch
    item's event leaves out what its batch's shared row holds (app/usage/shared.py)."""
    shared = shared_rows(conn, events)
    rows = [stored_values(e, shared.get(e.batch_id) if e.batch_id is not None else None) for e in events]
    if len(rows) == 1:
        conn.execute(_INSERT, rows[0])
    elif rows:
        with conn.cursor().copy(f"COPY usage_events ({', '.join(STORED_COLUMNS)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)


_INSERT = (
    f"INSERT INTO usage_events ({', '.join(STORED_COLUMNS)}) VALUES ({', '.join(['%s'] * len(STORED_COLUMNS))})"
    " ON CONFLICT (batch_id, batch_idx) WHERE batch_id IS NOT NULL DO NOTHING"
)


def _side_writes(conn: psycopg.Connection[Any], statements: Sequence[Statement]) -> None:
    """Run side writes grouped by SQL text, each group in parameter order: every transaction takes its row locks in
    the same order."""
    groups: dict[str, list[Sequence[Any]]] = {}
    for sql, params in statements:
        groups.setdefault(sql, []).append(params)
    for sql in sorted(groups):
        rows = sorted(groups[sql], key=lambda p: [str(v) for v in p])
        with conn.cursor() as cur:
            cur.executemany(sql, rows)


@dataclass
class _Pending:
    finals: list[tuple[Final, Future[str | None]]] = field(default_factory=list)
    records: list[UsageRecord] = field(default_factory=list)


# Claims the next items of finals that moved, in their transaction: (batch id, idx) of each → what the claim gave.
ThenClaim = Callable[[psycopg.Connection[Any], Sequence[tuple[UUID, int]]], dict[ItemKey, Any]]


class ThenClaimUnknown(Exception):
    """The next item's claim rode in a commit whose answer was lost: it may have committed (the item running under
    this worker, claimed by nobody who runs it) or not."""


def _answer_then(future: Future[Any], row: Any, cut: bool) -> None:
    """Tell a final's `then` what its claim became: the row, None (not claimed), or ThenClaimUnknown when an attempt
    of the group was cut (an unseen commit moved the final already, so the retry that answers claimed nothing)."""
    if row is None and cut:
        future.set_exception(ThenClaimUnknown())
    else:
        future.set_result(row)


class GroupWriter:
    """A daemon thread committing what threads submit in groups: one transaction for everything pending.

    A final may name the next item of its message (`then`): THEN_CLAIM claims those in the same transaction, so
    a worker thread's next item costs no statement of its own, and is claimed only once the previous one's
    final state is committed (a killed worker still leaves at most one item per thread running)."""

    def __init__(self, pool: ConnectionPool, *, counter: str = "", before_commit: Callable[[], None] | None = None,
                 unsynced: Callable[[Any, Exception], Any] | None = None, max_group: int = 500,
                 name: str = "relay-usage-writer", then_claim: ThenClaim | None = None,
                 finals: FinalsPort | None = None) -> None:
        self.pool = pool
        self._finals = finals  # how items' final states are committed (a writer of calls only has none)
        self._then_claim = then_claim
        self._unsynced = unsynced  # what a final with a response becomes when before_commit failed
        self.counter = counter  # the batch_progress row this process counts in (no lock contention between them)
        self._before_commit = before_commit
        self._max_group = max_group
        self._cond = threading.Condition()
        self._pending = _Pending()
        self._busy = False
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def finalize(self, final: Final) -> Future[str | None]:
        """Queue an item's final state; once committed, the future gives the state it moved to (None if it had
        moved on: another path finalized it first)."""
        if self._finals is None:
            raise RuntimeError("this group writer commits usage records only")
        future: Future[str | None] = Future()
        with self._cond:
            self._pending.finals.append((final, future))
            self._cond.notify()
        return future

    def record(self, record: UsageRecord) -> None:
        """Queue a call's usage record (committed within a few milliseconds, or at flush)."""
        with self._cond:
            self._pending.records.append(record)
            self._cond.notify()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything submitted so far is committed; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending.finals or self._pending.records or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def close(self, timeout: float = 30.0) -> None:
        """Commit what is pending, then stop the thread."""
        self.flush(timeout)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._pending.finals or self._pending.records or self._stopping):
                    self._cond.wait()
                if self._stopping and not (self._pending.finals or self._pending.records):
                    return
                group, self._pending, self._busy = self._pending, _Pending(), True
            try:
                self._commit(group)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _commit(self, group: _Pending) -> None:
        """Commit GROUP in slices of max_group, retrying through a database outage; never drops anything silently."""
        finals, records = group.finals, group.records
        while finals or records:
            part_f, finals = finals[: self._max_group], finals[self._max_group:]
            part_r, records = records[: self._max_group - len(part_f)], records[self._max_group - len(part_f):]
            self._commit_part(part_f, part_r)

    def _commit_part(self, finals: list[tuple[Final, Future[str | None]]], records: list[UsageRecord]) -> None:
        cut = False  # an attempt ended with the connection: it may have committed unseen
        for delay in (*RETRY_S, None):
            try:
                finals = self._synced(finals)
                tails: set[UUID] = set()
                with self._connection(finals, records) as conn:
                    done = self._commit_group(conn, [f for f, _ in finals], records, tails)
                    claimed = self._claim_next(conn, [f for f, _ in finals if f.key in done])
                for final, future in finals:
                    if final.then is not None:
                        _answer_then(final.then[1], claimed.get((final.key[0], final.then[0])), cut)
                    future.set_result(final.state if final.key in done else None)
                self._finish_tails(tails)
                return
            except CONNECTION_ENDED as exc:  # the database away, or this process paused inside the transaction
                cut = True
                if delay is None:
                    break
                log.warning("usage writer: %s; retrying in %.1fs", exc, delay)
                time.sleep(delay)
            except Exception as exc:  # one bad record must not sink the others: commit them one by one
                if len(finals) + len(records) > 1:
                    log.warning("usage writer: a group failed (%s: %s); committing one by one", type(exc).__name__, exc)
                    for pending in finals:
                        self._commit_part([pending], [])
                    for record in records:
                        self._commit_part([], [record])
                    return
                log.exception("usage writer: cannot commit a record")
                break
        for final, future in finals:
            if final.then is not None:
                _answer_then(final.then[1], None, cut)
            future.set_exception(RuntimeError("the item's final state could not be committed"))
        if records:
            log.error("usage writer: %d usage record(s) could not be committed", len(records))

    @contextmanager
    def _connection(self, finals: list[tuple[Final, Future[str | None]]],
                    records: list[UsageRecord]) -> Iterator[psycopg.Connection[Any]]:
        """A connection to commit one group on: in a transaction, unless the group is one statement's work (live
        calls' events with no side writes and no batch's shared row to insert first: an INSERT, or a COPY of
        several), which commits by itself without the BEGIN and COMMIT round trips."""
        if not finals and self._finals is None and all(not r.extra and r.event.batch_id is None for r in records):
            with autocommit(self.pool) as conn:
                yield conn
        else:
            with self.pool.connection() as conn, conn.transaction():
                yield conn

    def _commit_group(self, conn: psycopg.Connection[Any], finals: list[Final], records: list[UsageRecord],
                      tails: set[UUID]) -> set[ItemKey]:
        """Commit FINALS (through the finals port) and RECORDS in CONN's transaction; the keys that moved."""
        if self._finals is None:
            commit_records(conn, records)
            return set()
        return self._finals.commit(conn, finals, records, counter=self.counter, tails=tails)

    def _claim_next(self, conn: psycopg.Connection[Any], moved: list[Final]) -> dict[ItemKey, Any]:
        wanted = [(f.key[0], f.then[0]) for f in moved if f.then is not None]
        if not wanted or self._then_claim is None:
            return {}
        return self._then_claim(conn, wanted)

    def _finish_tails(self, tails: set[UUID]) -> None:
        """Finish those of TAILS whose last items another process committed meanwhile (see FinalsPort)."""
        if not tails or self._finals is None:
            return
        try:
            with self.pool.connection() as conn, conn.transaction():
                self._finals.finish(conn, sorted(tails))
        except psycopg.Error as exc:  # the reaper finishes them within a heartbeat
            log.warning("usage writer: cannot finish batches now (%s)", type(exc).__name__)

    def _synced(self, finals: list[tuple[Final, Future[str | None]]]) -> list[tuple[Final, Future[str | None]]]:
        """Run before_commit (the payload store's sync); if it fails, the finals whose response it should have made
        durable are committed as `unsynced` says (never with a place whose bytes may be lost)."""
        if self._before_commit is None or not finals:
            return finals
        try:
            self._before_commit()
        except psycopg.OperationalError:
            raise  # the database away (a sync in it): waited for with the commit, the responses kept
        except Exception as exc:
            if self._unsynced is None:
                raise
            log.warning("usage writer: %s; the responses of %d item(s) are not kept", exc, len(finals))
            return [(self._unsynced(f, exc) if f.response else f, future) for f, future in finals]
        return finals

