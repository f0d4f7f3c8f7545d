"""The one LISTEN loop (app.notify.NotifyListener) on the real Postgres: ON_WAKE gets the notifications as they come,
an empty list after each quiet interval, and those that reached the connection while ON_WAKE ran its own query
(they are already read, so the socket shows nothing: they must not wait for the next interval); close() wakes it."""

from __future__ import annotations

import queue
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest

from app.notify import NotifyListener
from devtools.services import ServiceUrls

pytestmark = pytest.mark.integration

WAIT_S = 30.0  # a bound only a hang crosses
LONG_INTERVAL_S = 3600.0  # no quiet-interval wake during a test: only a notification wakes the listener


def _notify(database_url: str, channel: str, *payloads: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn, conn.transaction():
        for payload in payloads:
            conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))


class _Recorder:
    """What a listener's callbacks saw: each wake's payloads, in order, on a queue."""

    def __init__(self) -> None:
        self.wakes: queue.Queue[list[str]] = queue.Queue()
        self.connected = threading.Event()
        self.during_wake: Any = None  # called with the connection inside the next wake, then cleared

    def on_connect(self, _conn: Any) -> None:
        self.connected.set()

    def on_wake(self, conn: Any, notes: list[psycopg.Notify]) -> None:
        action, self.during_wake = self.during_wake, None
        if action is not None:
            action(conn)
        self.wakes.put([note.payload for note in notes])

    def next_with_notes(self) -> list[str]:
        deadline = time.monotonic() + WAIT_S
        while (left := deadline - time.monotonic()) > 0:
            payloads = self.wakes.get(timeout=left)
            if payloads:
                return payloads
        raise AssertionError("no wake with notifications")


def _listener(services: ServiceUrls, channel: str, recorder: _Recorder, interval: float) -> NotifyListener:
    listener = NotifyListener(services.database_url, [channel], name="relay-notify-test", interval=interval,
                              on_connect=recorder.on_connect, on_wake=recorder.on_wake).start()
    assert recorder.connected.wait(WAIT_S)
    return listener


def test_notifications_wake_the_listener_and_a_quiet_interval_wakes_it_with_none(services: ServiceUrls) -> None:
    channel = f"relay_test_{uuid.uuid4().hex}"
    recorder = _Recorder()
    listener = _listener(services, channel, recorder, interval=0.2)
    try:
        assert recorder.wakes.get(timeout=WAIT_S) == []  # quiet: woken by the interval, with nothing
        _notify(services.database_url, channel, "a", "b", "c")  # one transaction: delivered together
        seen: list[str] = []
        while len(seen) < 3:
            seen += recorder.next_with_notes()
        assert seen == ["a", "b", "c"]
    finally:
        listener.close()


def test_a_notification_that_came_during_a_wakes_own_query_is_handed_over_without_waiting_an_interval(
        services: ServiceUrls) -> None:
    channel = f"relay_test_{uuid.uuid4().hex}"
    recorder = _Recorder()
    listener = _listener(services, channel, recorder, interval=LONG_INTERVAL_S)
    try:
        def notify_then_query(conn: Any) -> None:
            # Sent and committed before this connection's next query, whose answer then carries it.
            _notify(services.database_url, channel, "second")
            conn.execute("SELECT pg_sleep(0.2)")

        recorder.during_wake = notify_then_query
        _notify(services.database_url, channel, "first")
        assert recorder.next_with_notes() == ["first"]
        assert recorder.next_with_notes() == ["second"]  # not LONG_INTERVAL_S later
    finally:
        listener.close()


def test_close_wakes_a_listener_in_a_long_interval(services: ServiceUrls) -> None:
    recorder = _Recorder()
    listener = _listener(services, f"relay_test_{uuid.uuid4().hex}", recorder, interval=LONG_INTERVAL_S)
    listener.close(timeout=WAIT_S)
    assert not listener._thread.is_alive()
