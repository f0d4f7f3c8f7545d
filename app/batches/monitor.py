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

from app.batches import store
from app.batches.runner import WorkerContext, finalize_by_key, time_limit_outcome, worker_lost_outcome

log = logging.getLogger("relay.batches.monitor")

REAPER_LOCK = 0x5E1A7B02  # advisory lock: one reaper at a time
TIME_LIMIT_GRACE_S = 30.0  # the reaper fails a running item this long after its limit (its owner is stuck)
CANCEL_POLL_S = 2.0  # how often running items are checked against cancelled batches (NOTIFY can be missed)


class Periodic:
    """A daemon thread calling `tick()` every `interval` seconds until stopped; errors are logged, not fatal."""

    def __init__(self, name: str, interval: float, tick: Callable[[], None]) -> None:
        self.interval = interval
        self._tick = tick
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def tick(self) -> None:
        self._tick()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except Exception as exc:  # a database blip must not kill the thread
                log.warning("%s: %s: %s", self._thread.name, type(exc).__name__, exc)
            self._stop.wait(self.interval)


def heartbeat_and_reap(ctx: WorkerContext) -> Callable[[], None]:
    """The heartbeat tick: say this worker is alive, then (if leader) fail items of lost or stuck workers."""
    hostname, pid = socket.gethostname(), os.getpid()

    def tick() -> None:
        with ctx.runtime.pool.connection() as conn:
            store.heartbeat(conn, ctx.worker_id, hostname, pid)
        reap(ctx)

    return tick


def reap(ctx: WorkerContext) -> int:
    """Discard running items whose worker stopped heartbeating ("worker lost") or ran far past the limit;
    record finished_at of batches whose items are all final."""
    settings = ctx.runtime.settings
    with ctx.runtime.pool.connection() as conn, conn.transaction():
        if not store.try_leader_lock(conn, REAPER_LOCK):
            return 0
        rows = store.lost_items(conn, lost_after_s=settings.worker_lost_after_s,
                                time_limit_s=settings.batch_item_time_limit_s + TIME_LIMIT_GRACE_S)
        store.forget_stale_workers(conn, older_than_s=max(3600.0, settings.worker_lost_after_s * 10))
    done = 0
    for row in rows:
        outcome = worker_lost_outcome() if row["owner_lost"] else time_limit_outcome()
        if finalize_by_key(ctx.runtime, row["batch_id"], row["idx"], outcome, owner=row["worker_id"]):
            log.warning("batch item %s:%s discarded: %s", row["batch_id"], row["idx"], outcome.error)
            done += 1
    with ctx.runtime.pool.connection() as conn, conn.transaction():
        if store.try_leader_lock(conn, REAPER_LOCK):
            store.finish_batches(conn)
    return done


def watchdog(ctx: WorkerContext) -> Callable[[], None]:
    """The watchdog tick: shut the sockets of items past their deadline (a blocked recv ignores async raises)."""

    def tick() -> None:
        ctx.registry.interrupt_overdue()

    return tick


class Listener:
    """LISTENs for submits and cancels on one autocommit connection; polls cancelled batches as a backstop."""

    def __init__(self, ctx: WorkerContext, on_submit: Callable[[], None]) -> None:
        self.ctx = ctx
        self._on_submit = on_submit
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="relay-batch-listener", daemon=True)
        self._next_poll = 0.0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.ctx.runtime.settings.database_url, autocommit=True) as conn:
                    conn.execute(f"LISTEN {store.SUBMIT_CHANNEL}")
                    conn.execute(f"LISTEN {store.CANCEL_CHANNEL}")
                    self._next_poll = 0.0  # notifications sent while disconnected are lost: poll at once
                    self._on_submit()
                    self._listen(conn)
            except Exception as exc:  # reconnect after a database restart
                log.warning("batch listener: %s: %s", type(exc).__name__, exc)
                self._stop.wait(1.0)

    def _listen(self, conn: psycopg.Connection) -> None:
        while not self._stop.is_set():
            for note in conn.notifies(timeout=0.5, stop_after=1):
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
        stopped = self.ctx.registry.interrupt_batch(batch_id, "cancelled")
        if stopped:
            log.info("batch %s cancelled: stopped %d running item(s)", batch_id, stopped)

    def poll_cancelled(self) -> None:
        """Stop local running items whose batch is cancelled (a NOTIFY missed while reconnecting)."""
        if not len(self.ctx.registry):
            return
        with self.ctx.runtime.pool.connection() as conn:
            keys = store.cancelled_running(conn, self.ctx.worker_id)
        for key in keys:
            self.ctx.registry.interrupt(key, "cancelled")
