"""Webhook deliveries apart from batch items, on real processes: a receiver that accepts connections and never
answers holds only its own destination's delivery slots, and another owner's batch runs to the end beside it."""

from __future__ import annotations

import time
from typing import Any

import pytest

from devtools.stack import Stack
from devtools.webhook_receiver import Receiver
from tests.webhooks.helpers import CALLBACK_SECRET, submit

pytestmark = pytest.mark.integration

PER_DESTINATION = 2
HUNG_BATCHES = 16


def test_a_hung_receiver_holds_only_its_own_slots_while_another_owners_batch_runs_to_the_end(
        stack: Stack, receiver: Receiver, apply_catalog: Any) -> None:
    apply_catalog(project=[])
    receiver.behave("/hung", delay_s=30)  # accepts, reads, never answers within the attempt's deadline (2 s here)
    stack.start_worker(threads=4, webhook_threads=4, webhook_per_destination=PER_DESTINATION)
    hung_key, other_key = stack.new_key("hooks"), stack.new_key("hooks")
    hung = [submit(stack, hung_key, count=1, callback_url=f"{receiver.url}/hung", callback_secret=CALLBACK_SECRET)
            for _ in range(HUNG_BATCHES)]
    receiver.wait("/hung", count=PER_DESTINATION)  # the receiver holds attempts now
    other = submit(stack, other_key, count=40)
    done = stack.wait_finished(other_key, other)
    assert done["counts"]["completed"] == 40, done["counts"]
    attempts = _attempts_until(stack, hung, ended=3 * PER_DESTINATION)  # a few rounds of attempts to it
    assert _pending(stack, hung) == HUNG_BATCHES  # none got through: the receiver really hangs
    assert all(a["latency_ms"] < 30_000 for a in attempts if a["latency_ms"] is not None)  # cut at the deadline
    assert _most_at_once(attempts) <= PER_DESTINATION


def _pending(stack: Stack, batch_ids: list[str]) -> int:
    return int(stack.db_one("SELECT count(*) AS n FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id"
                            " WHERE e.batch_id = ANY(%s::uuid[]) AND d.state = 'pending'", batch_ids)["n"])


def _attempts_until(stack: Stack, batch_ids: list[str], ended: int, timeout: float = 60) -> list[dict[str, Any]]:
    """The attempts of the deliveries of BATCH_IDS once ENDED of them have ended (start, latency; an attempt in
    progress ends at the database's now)."""
    deadline = time.monotonic() + timeout
    while True:
        with stack.runtime.pool.connection() as conn:
            rows = conn.execute(
                "SELECT a.started_at, a.latency_ms, coalesce(a.started_at + make_interval(secs => a.latency_ms / 1000),"
                " now()) AS ended_at FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id"
                " JOIN webhook_events e ON e.id = d.event_id WHERE e.batch_id = ANY(%s::uuid[])",
                (batch_ids,)).fetchall()
        if sum(r["latency_ms"] is not None for r in rows) >= ended:
            return [dict(r) for r in rows]
        assert time.monotonic() < deadline, f"{len(rows)} attempts, fewer than {ended} ended, after {timeout}s"
        time.sleep(0.2)


def _most_at_once(attempts: list[dict[str, Any]]) -> int:
    """The most attempts whose [start, start + latency] overlap (starts are the claims' times, taken after a slot)."""
    edges = sorted([(a["started_at"], 1) for a in attempts] + [(a["ended_at"], -1) for a in attempts],
                   key=lambda edge: (edge[0], edge[1]))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most
