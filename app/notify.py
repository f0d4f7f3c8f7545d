"""A background thread that LISTENs on Postgres channels over its own autocommit connection, reconnecting with a
short backoff: the one LISTEN loop, which the per-process caches (catalog, key health), the webhook outbox and the
workers' submit and cancel listener build on."""

from __future__ import annotations

import logging
import selectors
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row

from app.db import connect_defaults

log = logging.getLogger("relay.notify")
Connection = psycopg.Connection[Any]
# Waits between reconnection attempts: short, so a cache is current again well within a second of Postgres being
# back (notifications sent meanwhile are lost; the catch-up after the reconnect covers them). At most 0.5 s, as the
# pools' own attempts: a refused connection costs next to nothing, and with 1 s a key revoked as Postgres came back
# was still taken 2.36 s after the return in one loaded run (tests/reliability/test_database_reconnects.py, 2 s).
FIRST_BACKOFF_S = 0.2
MAX_BACKOFF_S = 0.5


class NotifyListener:
    """LISTEN on CHANNELS; ON_CONNECT(conn) after every (re)connect (notifications sent while disconnected are
    lost: catch up there), ON_WAKE(conn, notes) after each notification or INTERVAL seconds without one (NOTES
    empty; each note has its `channel` and `payload`)."""

    def __init__(self, database_url: str, channels: Sequence[str], *, name: str, interval: float,
                 on_connect: Callable[[Connection], object],
                 on_wake: Callable[[Connection, list[psycopg.Notify]], object]) -> None:
        self._url = database_url
        self._channels = tuple(channels)
        self._name = name
        self._interval = max(0.05, interval)
        self._on_connect = on_connect
        self._on_wake = on_wake
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        # this listener's own channel: close() notifies it, so a thread waiting up to INTERVAL stops at once (a
        # stopping worker process closes four of these, each of which took up to a second)
        self._wake_channel = f"relay_wake_{uuid.uuid4().hex}"

    def start(self) -> NotifyListener:
        self._thread.start()
        return self

    def close(self, timeout: float | None = None) -> None:
        """Stop the thread: woken through its wake channel, else it notices within INTERVAL."""
        self._stop.set()
        if self._thread.is_alive():
            self._wake()
            self._thread.join(self._interval + 5 if timeout is None else timeout)

    def _wake(self) -> None:
        try:
            with psycopg.connect(self._url, autocommit=True, application_name=f"{self._name}-close",
                                 **connect_defaults(self._url)) as conn:
                conn.execute("SELECT pg_notify(%s, '')", (self._wake_channel,))
        except psycopg.Error as exc:  # the database is away: the thread still stops within INTERVAL
            log.info("%s: not woken to stop (%s)", self._name, type(exc).__name__)

    def _run(self) -> None:
        backoff = FIRST_BACKOFF_S
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._url, autocommit=True, row_factory=dict_row, application_name=self._name,
                                     **connect_defaults(self._url)) as conn:
                    for channel in (*self._channels, self._wake_channel):
                        conn.execute(f"LISTEN {channel}")
                    self._on_connect(conn)
                    backoff = FIRST_BACKOFF_S
                    self._wait(conn)
            except Exception as exc:  # any failure: log the kind only, then reconnect
                if not self._stop.is_set():
                    log.warning("%s: %s; reconnecting in %.1fs", self._name, type(exc).__name__, backoff)
            self._stop.wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _wait(self, conn: Connection) -> None:
        # The socket is polled here and psycopg only reads what has come: its own wait, `conn.notifies(timeout=T)`,
        # ends each T with zero-timeout polls for the last millisecond (about 30 of them, seen with strace; psycopg
        # 3.3), about 1 ms of CPU a wake, and a worker process has four listeners waking every interval.
        with selectors.DefaultSelector() as socket_ready:
            socket_ready.register(conn.fileno(), selectors.EVENT_READ)
            while not self._stop.is_set():
                notes = self._arrived(conn)  # also those that came with the answer of ON_WAKE's own queries
                if not notes and socket_ready.select(self._interval):
                    notes = self._arrived(conn)
                if not self._stop.is_set():
                    self._on_wake(conn, notes)

    def _arrived(self, conn: Connection) -> list[psycopg.Notify]:
        """The notifications already received, without waiting (the wake channel's left out)."""
        return [note for note in conn.notifies(timeout=0) if note.channel != self._wake_channel]
