"""The dispatcher refills its window as items finish, not only at its poll: a pass that fills the window arms the
refill, so a pool that drains what was published gets more within a step, not a second later (bench: drain)."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from actors.broker import RelayBroker
from actors.publisher import RabbitPublisher
from app.batches import outbox
from app.batches.dispatch import Dispatcher
from devtools.waiting import until
from tests.batches.helpers import CHAT, submit

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream


def _published(runtime: Any, batch_id: str) -> tuple[int, tuple[int, int], dict[str, int]]:
    """The batch's items published, with what sizes the window (live threads and processes, and what is in flight
    per owner): a timeout names all three."""
    with runtime.pool.connection() as conn:
        row = conn.execute("SELECT published_upto FROM batches WHERE id = %s", (batch_id,)).fetchone()
        return int(row["published_upto"]), outbox.live_workers(conn, 15.0), outbox.in_flight(conn)


def test_items_finishing_after_a_pass_that_filled_the_window_wake_the_next_pass(client, key, runtime) -> None:
    broker = RelayBroker(url=runtime.settings.broker_url, queue_type=runtime.settings.queue_type)
    broker.declare_queue(runtime.settings.queue_name, ensure=True)  # as a worker would, same arguments
    broker.close()
    batch_id = submit(client, key, [CHAT] * 40).json["id"]
    with runtime.pool.connection() as conn:  # 1 process of 2 threads, items of 1 s: a window of 2 + 1 (the lead)
        conn.execute("DELETE FROM workers")
        conn.execute("INSERT INTO workers (id, hostname, pid, threads) VALUES ('refill-test', %s, 1, 2)",
                     (socket.gethostname(),))
    dispatcher = Dispatcher(runtime, RabbitPublisher(runtime.settings.broker_urls, runtime.settings.queue_name),
                            item_seconds=lambda: 1.0, poll_s=300)  # slow items: one a message
    dispatcher.start()
    try:
        # Woken until then: a first pass that published nothing would sleep the whole poll (in CI one did, cause not
        # found; the counts read say what the window saw). The finishes below are the subject: never helped.
        until(lambda: (dispatcher.wake(), _published(runtime, batch_id))[1], lambda n: n[0] == 3,
              what="the first window published")
        assert dispatcher.window(threads=2, backlog=37, processes=1) == (3, 1)
        with runtime.pool.connection() as conn:  # the window's items become final (as a worker would count them)
            conn.execute("INSERT INTO batch_progress (batch_id, counter, completed) VALUES (%s, 'refill-test', 3)",
                         (batch_id,))
        for _ in range(3):
            dispatcher.item_finished()
        # Within a few seconds, far from the 300 s poll: the finishes woke the next pass.
        until(lambda: _published(runtime, batch_id), lambda n: n[0] == 6,
              what="the next window published after the finishes")
    finally:
        dispatcher.stop()
        client.post(f"/v1/batches/{batch_id}/cancel", headers={"Authorization": f"Bearer {key}"})
        with runtime.pool.connection() as conn:
            conn.execute("DELETE FROM workers WHERE id = 'refill-test'")
