"""The outbox pump: publishes committed-but-unpublished items to RabbitMQ, keeping at most `dispatch_window`
published items unfinished. It runs as a thread in every worker process (one publishes at a time, under an
advisory lock), woken by NOTIFY on submit and by local items finishing, and polling every second, so an API
that died right after committing a batch loses nothing. Publishing twice is harmless: the item claim dedupes.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from uuid import UUID

import pika
from pika.adapters.blocking_connection import BlockingChannel

from app.batches import store
from app.runtime import Runtime

log = logging.getLogger("relay.batches.dispatch")

DISPATCH_LOCK = 0x5E1A7B01  # advisory lock: one publishing dispatcher at a time
CHUNK = 1000  # messages per RabbitMQ transaction
LOST_MESSAGE_AGE_S = 120.0  # a queued item published this long ago, with the queue empty, lost its message
_PERSISTENT = pika.BasicProperties(delivery_mode=2)

Encoder = Callable[[UUID, int], bytes]


class Dispatcher:
    """A daemon thread that pumps the outbox; `wake()` makes it look now."""

    def __init__(self, runtime: Runtime, encode: Encoder, ensure_queue: Callable[[], None],
                 *, poll_s: float = 1.0) -> None:
        self.runtime = runtime
        self.queue = runtime.settings.queue_name
        self.window = runtime.settings.dispatch_window
        self._encode = encode
        self._ensure_queue = ensure_queue
        self._poll_s = poll_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._conn: pika.BlockingConnection | None = None
        self._channel: BlockingChannel | None = None
        self._thread = threading.Thread(target=self._run, name="relay-dispatcher", daemon=True)
        self._passes = 0
        self._window_full = False  # the last pass stopped at the window: finishing items should wake us
        # Refill in steps, not per item: a pass costs a few queries whatever it publishes.
        self._refill = max(1, min(CHUNK, self.window // 10))
        self._finished = 0

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def item_finished(self) -> None:
        """A local item became final: wake only if the window held publishing back and has room for a step."""
        if self._window_full:
            self._finished += 1
            if self._finished >= self._refill:
                self._finished = 0
                self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                self._cycle()
                backoff = 0.5
            except Exception as exc:  # broker or database trouble: drop the channel, retry with backoff
                log.warning("dispatcher: %s: %s (retrying in %.1fs)", type(exc).__name__, exc, backoff)
                self._close()
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
        self._close()

    def _cycle(self) -> None:
        """Publish until the outbox is empty or the window is full, then sleep until woken or the poll."""
        while not self._stop.is_set() and self.pump() >= CHUNK:
            pass
        self._passes += 1
        if self._passes % 30 == 0:
            self.recover_lost_messages()
        if self._conn is not None:
            self._conn.process_data_events(time_limit=0)  # keep the AMQP heartbeat answered
        self._wake.wait(self._poll_s)
        self._wake.clear()
        self._stop.wait(0.02)  # let a burst of wake-ups coalesce into one pass

    def pump(self) -> int:
        """One pass: publish up to CHUNK unpublished items within the window; how many were published."""
        with self.runtime.pool.connection() as conn:
            with conn.transaction():
                if not store.try_leader_lock(conn, DISPATCH_LOCK):
                    return 0
                batches = store.undispatched_batches(conn)
                room = self.window - store.in_flight(conn) if batches else 0
                self._window_full = batches > 0 and room <= 0
                if room <= 0:
                    return 0
                limit = min(room, CHUNK)
                keys = store.pick_unpublished(conn, limit=limit, per_batch=max(1, math.ceil(limit / batches)))
                if keys:
                    self._publish(keys)
                    store.mark_published(conn, keys)
            if len(keys) < limit:
                with conn.transaction():
                    store.mark_dispatched(conn)
        return len(keys)

    def recover_lost_messages(self) -> None:
        """Republish queued items whose message is long gone (the queue is empty yet they never ran)."""
        channel = self._open()
        if channel.queue_declare(queue=self.queue, passive=True).method.message_count:
            return
        with self.runtime.pool.connection() as conn, conn.transaction():
            if store.try_leader_lock(conn, DISPATCH_LOCK) and store.unpublish_stale(conn, LOST_MESSAGE_AGE_S):
                log.warning("dispatcher: republishing queued items whose messages were lost")
                self.wake()

    def _publish(self, keys: Sequence[tuple[UUID, int]]) -> None:
        """Publish one persistent message per item in one RabbitMQ transaction."""
        channel = self._open()
        channel.queue_declare(queue=self.queue, passive=True)  # never publish into a missing queue (dropped)
        for batch_id, idx in keys:
            channel.basic_publish("", self.queue, self._encode(batch_id, idx), _PERSISTENT)
        channel.tx_commit()

    def _open(self) -> BlockingChannel:
        if self._channel is None or not self._channel.is_open:
            self._close()
            self._ensure_queue()
            params = pika.URLParameters(self.runtime.settings.broker_url)
            params.heartbeat = 30
            params.blocked_connection_timeout = 30
            self._conn = pika.BlockingConnection(params)
            self._channel = self._conn.channel()
            self._channel.tx_select()
        return self._channel

    def _close(self) -> None:
        conn, self._conn, self._channel = self._conn, None, None
        if conn is not None and conn.is_open:
            try:
                conn.close()
            except Exception:  # already broken; nothing to release
                log.debug("dispatcher: closing a broken connection", exc_info=True)
