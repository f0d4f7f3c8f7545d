"""A worker process's background threads: heartbeat + reaper, time-limit watchdog, and the listener that hears
batch submits (wakes the dispatcher) and cancels (stops local running items of that batch)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from uuid import UUID

import psycopg

from app.batches import lifecycle, outbox, outcomes, store
from app.batches.finals import expire_due, finalize_by_key
from app.batches.runner import WorkerContext
from app.db import connect_defaults
from app.notify import NotifyListener

log = logging.getLogger("relay.batches.monitor")

REAPER_LOCK = 0x5E1A7B02  # advisory lock: one reaper at a time
TIME_LIMIT_GRACE_S = 30.0  # the reaper fails a running item this long after its limit (its owner is stuck)
WATCHDOG_S = 0.2  # how often the watchdog looks for items past their deadline
PAUSE_AFTER_S = 1.0  # a watchdog tick this late means the process was paused (watchdog())
CANCEL_POLL_S = 2.0  # how often running items are checked against cancelled batches (NOTIFY can be missed)


class Periodic:
    """A daemon thread calling `tick()` every `interval` seconds until stopped; errors are logged, not fatal."""

    def __init__(self, name: str, interval: float, tick: Callable[[], None],
                 on_stop: Callable[[], None] | None = None) -> None:
        self.interval = interval
        self._tick = tick
        self._on_stop = on_stop
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def tick(self) -> None:
        self._tick()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        if self._on_stop is not None:
            self._on_stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except Exception as exc:  # a database blip must not kill the thread
                log.warning("%s: %s: %s", self._thread.name, type(exc).__name__, exc)
            self._stop.wait(self.interval)


class Heartbeat:
    """The heartbeat tick: say this worker is alive, then (if leader) fail items of lost or stuck workers.

    Its connection also holds the worker's session lock (outbox.hold_worker_session) for the process's life: a
    worker that is paused keeps it, so its items are not judged lost however stale its heartbeat; a dead one's
    session ends, and with it the lock.

    It beats on a connection of its own, reconnecting on every tick after an error, so a live worker beats again
    soon after Postgres comes back. And it judges another worker lost only once its own beats have been steady:
    for RELAY_WORKER_LOST_AFTER_S after it starts, and for twice that after a gap of its own. A gap means Postgres
    was away for everyone: every heartbeat is stale and no session lock is held until each worker beats again, and a
    live worker's first beat back can come seconds after this one's (its reconnect waits out a connect attempt of
    up to the connect timeout, its reaper's turn, a loaded machine), so each gets a whole lost-after time of its own.
    """

    def __init__(self, ctx: WorkerContext, clock: Callable[[], float] = time.monotonic) -> None:
        self.ctx = ctx
        self.lost_after_s = ctx.runtime.settings.worker_lost_after_s
        self._clock = clock
        self._hostname, self._pid = socket.gethostname(), os.getpid()
        self._conn: psycopg.Connection | None = None
        self._last_beat: float | None = None
        self._steady_since: float | None = None
        self._steady_for = self.lost_after_s  # how long its beats must be steady before it judges others
        self._lock = threading.Lock()

    def __call__(self) -> None:
        self.beat()
        reap(self.ctx, judge_owners=self.steady())

    def beat(self) -> None:
        """Record this worker's heartbeat; a beat after a gap of half the lost-after time starts a new steady run,
        twice as long as the first."""
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    url = self.ctx.runtime.settings.database_url
                    self._conn = psycopg.connect(url, autocommit=True, **connect_defaults(url))
                    if not outbox.hold_worker_session(self._conn, self.ctx.worker_id):
                        log.warning("worker %s: its session lock is held elsewhere", self.ctx.worker_id)
                outbox.heartbeat(self._conn, self.ctx.worker_id, self._hostname, self._pid, self.ctx.threads)
            except psycopg.Error:
                self._close()
                raise
            now = self._clock()
            if self._last_beat is None:
                self._steady_since = now
            elif now - self._last_beat > self.lost_after_s / 2:
                self._steady_since, self._steady_for = now, 2 * self.lost_after_s
            self._last_beat = now

    def steady(self) -> bool:
        """Whether this worker has beaten without a gap for long enough to judge others (see the class)."""
        return self._steady_since is not None and self._clock() - self._steady_since >= self._steady_for

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:  # already broken
                pass


def reap(ctx: WorkerContext, *, judge_owners: bool = True) -> int:
    """Discard running items whose worker stopped heartbeating ("worker lost", only when JUDGE_OWNERS) or ran far
    past the limit; expire the queued items of batches past their expires_at; record finished_at of batches whose
    items are all final."""
    settings = ctx.runtime.settings
    # The reaper runs on the heartbeat's thread: while the pool reconnects after a database restart (its backoff
    # reaches 10 s) it must give up soon, or this worker stops beating and a steady peer judges it lost.
    wait_s = min(5.0, settings.worker_lost_after_s / 4)
    with ctx.runtime.pool.connection(timeout=wait_s) as conn, conn.transaction():
        if not outbox.try_leader_lock(conn, REAPER_LOCK):
            return 0
        rows = outbox.lost_items(conn, lost_after_s=settings.worker_lost_after_s,
                                time_limit_s=settings.batch_item_time_limit_s + TIME_LIMIT_GRACE_S,
                                judge_owners=judge_owners)
        outbox.forget_stale_workers(conn, older_than_s=max(3600.0, settings.worker_lost_after_s * 10))
    done = 0
    for row in rows:
        outcome = outcomes.worker_lost() if row["owner_lost"] else outcomes.time_limit()
        if finalize_by_key(ctx.runtime, row["batch_id"], row["idx"], outcome, owner=row["worker_id"],
                           counter=ctx.worker_id):
            log.warning("batch item %s:%s discarded: %s", row["batch_id"], row["idx"], outcome.error)
            done += 1
    with ctx.runtime.pool.connection(timeout=wait_s) as conn, conn.transaction():
        if outbox.try_leader_lock(conn, REAPER_LOCK):
            expire_due(conn)
            lifecycle.finish_batches(conn)
    return done


def watchdog(ctx: WorkerContext, interval: float = WATCHDOG_S,
             clock: Callable[[], float] = time.monotonic) -> Callable[[], None]:
    """The watchdog tick (every INTERVAL): shut the sockets of items past their deadline (a blocked recv ignores
    async raises). A tick that comes PAUSE_AFTER_S or more late finds the process was paused (SIGSTOP, a paused VM,
    a long GC): the item time limit counts the time the worker runs, so the deadlines move by the pause, and an
    answer the upstream gave meanwhile is read and kept, not thrown away as `time_limit_exceeded` on resume."""
    last = [clock()]

    def tick() -> None:
        now = clock()
        late = now - last[0] - interval
        last[0] = now
        if late >= PAUSE_AFTER_S:
            log.warning("worker %s was paused for %.1fs: its running items' time limits move by as much",
                        ctx.worker_id, late)
            ctx.registry.postpone(late)
        ctx.registry.interrupt_overdue(now)

    return tick


class Listener:
    """Hears submits (wakes the dispatcher) and cancels (stops local running items of the batch) on the one LISTEN
    loop (`app.notify`); polls cancelled batches as a backstop."""

    def __init__(self, ctx: WorkerContext, on_submit: Callable[[], None]) -> None:
        self.ctx = ctx
        self._on_submit = on_submit
        self._next_poll = 0.0
        self._notify = NotifyListener(ctx.runtime.settings.database_url, [store.SUBMIT_CHANNEL, store.CANCEL_CHANNEL],
                                      name="relay-batch-listener", interval=0.5, on_connect=self._connected,
                                      on_wake=self._wake)

    def start(self) -> None:
        self._notify.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._notify.close(timeout)

    def _connected(self, _conn: object) -> None:
        self._next_poll = 0.0  # notifications sent while disconnected are lost: poll at once
        self._on_submit()

    def _wake(self, _conn: object, notes: list[psycopg.Notify]) -> None:
        for note in notes:
            self._handle(note.channel, note.payload)
        if time.monotonic() >= self._next_poll:
            self.poll_cancelled()
            self._next_poll = time.monotonic() + CANCEL_POLL_S

    def _handle(self, channel: str, payload: str) -> None:
        if channel == store.SUBMIT_CHANNEL:
            self._on_submit()
            return
        try:
            batch_id = UUID(payload)
        except ValueError:
            return
        if len(self.ctx.cancelled) > 10_000:
            self.ctx.cancelled.clear()
        self.ctx.cancelled.add(batch_id)  # items of it waiting for their rate limits stop waiting
        stopped = self.ctx.registry.interrupt_batch(batch_id, "cancelled")
        if stopped:
            log.info("batch %s cancelled: stopped %d running item(s)", batch_id, stopped)

    def poll_cancelled(self) -> None:
        """Stop local running items whose batch is cancelled (a NOTIFY missed while reconnecting)."""
        keys = self.ctx.registry.keys()
        if not keys:
            return
        with self.ctx.runtime.pool.connection() as conn:
            cancelled = set(outbox.cancelled_batches(conn, sorted({batch_id for batch_id, _ in keys})))
        for key in keys:
            if key[0] in cancelled:
                self.ctx.registry.interrupt(key, "cancelled")
