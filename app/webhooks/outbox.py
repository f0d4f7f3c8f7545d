"""The webhook outbox: a thread in every worker process that publishes a message for each delivery that is due,
woken by the NOTIFY of the transaction that recorded it (an ended batch, a "send again") and every SWEEP_S.

Due means: pending, no attempt holding its lease, and either never sent (new, or a wait too long for the broker)
or sent LOST_AFTER_S ago without an attempt since (its message was lost: dead-lettered, or never published
because the process died between commit and publish). Each message gets a new token, so at most one message per
delivery can make attempts; an older one that turns up later is dropped. Rows are taken FOR UPDATE SKIP LOCKED:
the processes share the work without publishing a delivery twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from uuid import UUID

from app.notify import NotifyListener
from app.runtime import Runtime
from app.webhooks import store

log = logging.getLogger("relay.webhooks.outbox")
SWEEP_S = 1.0
LOST_AFTER_S = 60.0
BATCH = 200


class Outbox:
    """Publishes due deliveries through PUBLISH(delivery id, token) (the webhook actor's send)."""

    def __init__(self, runtime: Runtime, publish: Callable[[str, str], Any], *, lost_after_s: float = LOST_AFTER_S,
                 interval: float = SWEEP_S) -> None:
        self.runtime = runtime
        self._publish = publish
        self._lost_after_s = lost_after_s
        self._listener = NotifyListener(runtime.settings.database_url, [store.CHANNEL], name="relay-webhook-outbox",
                                        interval=interval, on_connect=self._pass, on_wake=self._pass)

    def start(self) -> Outbox:
        self._listener.start()
        return self

    def close(self) -> None:
        self._listener.close()

    def publish_due(self) -> int:
        """Publish a message for every delivery due now; how many were published."""
        published = 0
        while True:
            with self.runtime.pool.connection() as conn, conn.transaction():
                taken = store.take_due(conn, lost_after_s=self._lost_after_s, limit=BATCH)
            if not taken:
                return published
            failed = self._send(taken)  # after the commit: a message never arrives before its token is stored
            published += len(taken) - len(failed)
            if failed:
                with self.runtime.pool.connection() as conn, conn.transaction():
                    store.unsend(conn, failed)
                return published
            if len(taken) < BATCH:
                return published

    def _send(self, taken: list[tuple[UUID, UUID]]) -> list[tuple[UUID, UUID]]:
        """Publish TAKEN in order; the rest, from the first that fails (the broker is away: try at the next pass)."""
        for i, (delivery_id, token) in enumerate(taken):
            try:
                self._publish(str(delivery_id), str(token))
            except Exception as exc:  # any broker failure: leave them due
                log.warning("webhook outbox: cannot publish (%s); %d delivery(ies) wait", type(exc).__name__,
                            len(taken) - i)
                return taken[i:]
        return []

    def _pass(self, _conn: Any, _notes: list[Any] | None = None) -> None:
        self.publish_due()
