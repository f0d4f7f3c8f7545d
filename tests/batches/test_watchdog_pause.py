"""The item time limit counts the time the worker runs: a watchdog tick that comes late by a pause (SIGSTOP, a paused
VM, a long GC) moves the running items' deadlines by the pause, so an answer that arrived meanwhile is read and kept
on resume; without a pause, an item past its deadline is stopped as before (the real pause:
tests/reliability/test_frozen_leader.py)."""

from __future__ import annotations

from collections.abc import Iterator
from uuid import uuid4

import pytest

from app.batches.monitor import PAUSE_AFTER_S, WATCHDOG_S, watchdog
from app.batches.runner import WorkerContext
from app.pipeline.interrupt import Interrupter
from app.runtime import Runtime

pytestmark = pytest.mark.integration


@pytest.fixture()
def ctx(runtime: Runtime) -> Iterator[WorkerContext]:
    made = WorkerContext.create(runtime, f"watchdog-test-{uuid4().hex[:8]}")
    try:
        yield made
    finally:
        made.writer.close()


def test_a_pause_moves_the_deadlines_by_its_length_and_the_item_is_stopped_only_that_much_later(
        ctx: WorkerContext) -> None:
    now = [1000.0]
    tick = watchdog(ctx, WATCHDOG_S, clock=lambda: now[0])
    item = Interrupter()
    ctx.registry.add((uuid4(), 0), item, deadline=1010.0)
    now[0] += WATCHDOG_S
    tick()
    now[0] += WATCHDOG_S + 30.0  # paused 30 s, its limit falling meanwhile
    tick()
    assert not item.interrupted
    while not item.interrupted and now[0] < 1100.0:  # then ticks on time
        now[0] += WATCHDOG_S
        tick()
    assert item.reason == "time_limit" and 1040.0 <= now[0] < 1040.0 + 2 * WATCHDOG_S  # the deadline moved by 30 s


def test_without_a_pause_an_item_past_its_deadline_is_stopped(ctx: WorkerContext) -> None:
    now = [1000.0]
    tick = watchdog(ctx, WATCHDOG_S, clock=lambda: now[0])
    item = Interrupter()
    ctx.registry.add((uuid4(), 0), item, deadline=1001.0)
    while now[0] < 1001.0 + WATCHDOG_S:
        now[0] += WATCHDOG_S + PAUSE_AFTER_S / 2  # late, not paused: a busy machine
        tick()
    assert item.reason == "time_limit"
