"""The dispatcher on the in-process publisher (app/batches/publisher.py), against the real Postgres and the fake
upstream, with no broker: it publishes every item of a batch exactly once, in messages the worker's own item code
runs here on a thread pool, until the batch ends; and a publish that fails leaves its items to be published again."""

from __future__ import annotations

import socket
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from uuid import UUID, uuid4

import pytest

from app.batches.dispatch import Dispatcher
from app.batches.messages import run_items
from app.batches.publisher import InProcessPublisher
from app.batches.runner import WorkerContext
from app.batches.scheduler import Publication
from devtools.waiting import until
from tests.batches.helpers import CHAT, submit, wait_finished

pytestmark = pytest.mark.integration  # real Postgres and the fake upstream

THREADS = 4


@pytest.fixture()
def context(runtime: Any) -> Iterator[WorkerContext]:
    """A worker context in this process, announced in `workers` (the dispatcher's window is sized from it)."""
    ctx = WorkerContext.create(runtime, f"in-process-{uuid4().hex[:8]}", threads=THREADS)
    with runtime.pool.connection() as conn:
        conn.execute("INSERT INTO workers (id, hostname, pid, threads) VALUES (%s, %s, 1, %s)",
                     (ctx.worker_id, socket.gethostname(), THREADS))
    try:
        yield ctx
    finally:
        ctx.writer.close()
        with runtime.pool.connection() as conn:
            conn.execute("DELETE FROM workers WHERE id = %s", (ctx.worker_id,))


def _items_of(messages: Sequence[Publication], batch_id: str) -> list[int]:
    return sorted(idx for m in messages if m.batch_id == UUID(batch_id) for idx in m.idxs)


def test_the_dispatcher_runs_a_batch_to_its_end_through_an_in_process_publisher(
        client, key, runtime, context) -> None:  # type: ignore[no-untyped-def]
    batch_id = submit(client, key, [CHAT] * 12).json["id"]
    with ThreadPoolExecutor(THREADS, thread_name_prefix="in-process-items") as items:
        def deliver(m: Publication) -> None:  # this batch's messages only: another test's leftovers are not ours
            if m.batch_id == UUID(batch_id):
                items.submit(run_items, context, m.batch_id, m.idxs, trace=m.trace)

        publisher = InProcessPublisher(deliver)
        dispatcher = Dispatcher(runtime, publisher, item_seconds=lambda: context.item_seconds)
        context.finished.append(dispatcher.item_finished)
        dispatcher.start()
        try:
            body = wait_finished(client, key, batch_id, timeout=60)
        finally:
            dispatcher.stop()
    assert body["counts"]["completed"] == 12, body["counts"]
    assert _items_of(publisher.published, batch_id) == list(range(12))  # each item published once
    assert publisher.waiting == []  # all handed to the item code


class FailingOnce(InProcessPublisher):
    """Refuses its first publish, as a broker that went away would."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0

    def publish(self, messages: Sequence[Publication]) -> None:
        if not self.refused:
            self.refused = len(messages)
            raise ConnectionError("the queue is away")
        super().publish(messages)


def test_a_publish_that_fails_leaves_its_items_to_the_next_pass(client, key, runtime, context) -> None:  # type: ignore[no-untyped-def]
    batch_id = submit(client, key, [CHAT] * 3).json["id"]
    publisher = FailingOnce()
    dispatcher = Dispatcher(runtime, publisher, poll_s=0.2)
    dispatcher.start()
    try:
        until(lambda: _items_of(publisher.waiting, batch_id) == [0, 1, 2], what="the items published again")
    finally:
        dispatcher.stop()
        client.post(f"/v1/batches/{batch_id}/cancel", headers={"Authorization": f"Bearer {key}"})
    assert publisher.refused >= 1 and publisher.closed >= 1  # the failed publish dropped the connection
    assert _items_of(publisher.published, batch_id) == [0, 1, 2]  # the refused messages were not counted as sent
    assert publisher.depth() == len(publisher.waiting) and publisher.take() and publisher.depth() == 0
