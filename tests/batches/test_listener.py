"""The workers' submit and cancel listener runs on the one LISTEN loop (app.notify): it hears a cancel, and after
its connection is cut it reconnects by itself, catches up (wakes the dispatcher) and hears the next one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from uuid import UUID, uuid4

import pytest

from app.batches import store
from app.batches.monitor import Listener
from app.batches.runner import WorkerContext
from app.runtime import Runtime
from devtools.waiting import until

pytestmark = pytest.mark.integration



@pytest.fixture()
def listening(runtime: Runtime) -> Iterator[tuple[WorkerContext, list[float]]]:
    ctx = WorkerContext.create(runtime, f"listener-test-{uuid4().hex[:8]}")
    wakes: list[float] = []
    listener = Listener(ctx, on_submit=lambda: wakes.append(time.monotonic()))
    listener.start()
    try:
        yield ctx, wakes
    finally:
        listener.stop()
        ctx.writer.close()


def _cancel(runtime: Runtime, batch_id: UUID) -> None:
    with runtime.pool.connection() as conn:
        conn.execute("SELECT pg_notify(%s, %s)", (store.CANCEL_CHANNEL, str(batch_id)))


def test_the_listener_hears_a_cancel_and_after_a_cut_connection_reconnects_and_hears_the_next(
        runtime: Runtime, listening: tuple[WorkerContext, list[float]]) -> None:
    ctx, wakes = listening
    until(lambda: len(wakes) >= 1, what="the first connect")
    first, second = uuid4(), uuid4()
    _cancel(runtime, first)
    until(lambda: first in ctx.cancelled, what="the first cancel")
    with runtime.pool.connection() as conn:
        cut = conn.execute("SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity"
                           " WHERE application_name = 'relay-batch-listener' AND datname = current_database()"
                           ).fetchone()
    assert cut is not None and cut["n"] >= 1
    until(lambda: len(wakes) >= 2, what="the reconnect's catch-up")
    _cancel(runtime, second)
    until(lambda: second in ctx.cancelled, what="the cancel after the reconnect")
