"""How a worker process gets through database trouble: claims retried through a dropped connection without
running anything twice, and the reaper judging other workers lost only when its own heartbeats are steady."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import UUID

import psycopg
import pytest

from app.batches import lifecycle, outbox, runner
from app.batches.monitor import Heartbeat, reap
from app.batches.runner import WorkerContext, run_item
from devtools.stack import Stack, item_requests

pytestmark = pytest.mark.integration


@pytest.fixture()
def ctx(shared: Stack) -> Iterator[WorkerContext]:
    """A worker context in the test process (no worker process runs: items stay where the test puts them)."""
    context = WorkerContext.create(shared.runtime, f"test-worker-{id(shared)}")
    Heartbeat(context).beat()
    yield context
    context.writer.close()
    with shared.runtime.pool.connection() as conn:
        outbox.remove_worker(conn, context.worker_id)


@pytest.fixture()
def no_claim_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "CLAIM_RETRIES_S", (0.01, 0.01))


def _drop_connection_once(monkeypatch: pytest.MonkeyPatch, *, after_commit: bool) -> list[int]:
    """Make the next claim fail as a dropped connection does: before its UPDATE ran, or after it committed."""
    real = lifecycle.claim_item
    calls: list[int] = []

    def claim(conn: Any, batch_id: UUID, idx: int, worker_id: str, **options: Any) -> Any:
        calls.append(idx)
        if len(calls) == 1:
            if after_commit:
                real(conn, batch_id, idx, worker_id, **options)  # autocommit: committed, the answer is lost
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return real(conn, batch_id, idx, worker_id, **options)

    monkeypatch.setattr(lifecycle, "claim_item", claim)
    return calls


def test_a_claim_cut_before_it_ran_is_retried_and_the_item_runs_once(shared: Stack, ctx: WorkerContext,
                                                                     monkeypatch, no_claim_wait) -> None:
    key = shared.new_key("kill")
    batch_id = shared.submit(key, "claim-retry", 1)
    calls = _drop_connection_once(monkeypatch, after_commit=False)

    assert run_item(ctx, UUID(batch_id), 0) == "completed"

    assert calls == [0, 0]
    accounting = shared.account(key, batch_id, "claim-retry", 1, timeout=10)
    assert accounting.states() == {"completed": 1} and accounting.calls[0] == 1


def test_a_claim_whose_answer_was_lost_is_adopted_and_the_item_runs_once(shared: Stack, ctx: WorkerContext,
                                                                         monkeypatch, no_claim_wait) -> None:
    key = shared.new_key("kill")
    batch_id = shared.submit(key, "claim-lost", 1)
    _drop_connection_once(monkeypatch, after_commit=True)

    assert run_item(ctx, UUID(batch_id), 0) == "completed"  # the claim committed unseen was this worker's own

    accounting = shared.account(key, batch_id, "claim-lost", 1, timeout=10)
    assert accounting.states() == {"completed": 1} and accounting.calls[0] == 1


def _submit_hard_capped(shared: Stack, key: str, tag: str) -> str:
    """A one-item batch under a hard spend cap with room for it (its item's cost bound is reserved at the claim)."""
    requests = [{**request, "max_tokens": 16} for request in item_requests(tag, 1)]
    res = shared.call(key, "POST", "/v1/batches", json={"shape": "openai", "requests": requests, "max_cost": 1})
    assert res.status_code == 202 and res.json["max_cost_mode"] == "hard", res.get_data(as_text=True)
    return str(res.json["id"])


def _drop_capped_claim_once(monkeypatch: pytest.MonkeyPatch, *, after_commit: bool) -> list[int]:
    """Make the next hard-capped claim fail as a dropped connection does: before it ran, or after it committed."""
    real = lifecycle.claim_reserved
    calls: list[int] = []

    def claim(conn: Any, batch_id: UUID, idx: int, *args: Any) -> Any:
        calls.append(idx)
        if len(calls) == 1:
            if after_commit:
                real(conn, batch_id, idx, *args)  # its own transaction: committed, the answer is lost
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return real(conn, batch_id, idx, *args)

    monkeypatch.setattr(lifecycle, "claim_reserved", claim)
    return calls


@pytest.mark.parametrize("after_commit", [False, True], ids=["cut-before-it-ran", "committed-unseen"])
def test_a_hard_capped_claim_cut_by_a_dropped_connection_is_retried_and_the_item_runs_once(
        shared: Stack, ctx: WorkerContext, monkeypatch, no_claim_wait, after_commit: bool) -> None:
    key = shared.new_key("kill")
    tag = f"capped-{'lost' if after_commit else 'retry'}"
    batch_id = _submit_hard_capped(shared, key, tag)
    calls = _drop_capped_claim_once(monkeypatch, after_commit=after_commit)

    assert run_item(ctx, UUID(batch_id), 0) == "completed"

    assert calls == [0, 0]  # tried again; after a claim committed unseen, the second finds the item taken: its own
    accounting = shared.account(key, batch_id, tag, 1, timeout=10)
    assert accounting.states() == {"completed": 1} and accounting.calls[0] == 1
    reserved = shared.db_one("SELECT coalesce(sum(reserved_nanos), 0) AS n FROM batch_progress WHERE batch_id = %s",
                             batch_id)
    assert reserved["n"] == 0  # the bound reserved with the claim went back with the final state


def test_an_item_left_running_under_this_worker_id_by_an_earlier_run_is_discarded_not_run(
        shared: Stack, ctx: WorkerContext, monkeypatch, no_claim_wait) -> None:
    """A claim that failed once, finding the item running under the same worker id since long before: an earlier
    process with that RELAY_WORKER_ID may have sent it, so it is discarded, never run again."""
    key = shared.new_key("kill")
    batch_id = shared.submit(key, "claim-old", 1)
    with shared.runtime.pool.connection() as conn:
        assert lifecycle.claim_item(conn, UUID(batch_id), 0, ctx.worker_id) is not None
        conn.execute("UPDATE batch_items SET started_at = now() - interval '1 hour' WHERE batch_id = %s",
                     (batch_id,))
    _drop_connection_once(monkeypatch, after_commit=False)

    assert run_item(ctx, UUID(batch_id), 0) == "discarded"

    accounting = shared.account(key, batch_id, "claim-old", 1, timeout=10)
    assert accounting.items[0]["error_code"] == "claim_interrupted" and accounting.calls[0] == 0


def test_a_claim_that_keeps_failing_raises_and_leaves_the_item_queued(shared: Stack, ctx: WorkerContext,
                                                                      monkeypatch, no_claim_wait) -> None:
    key = shared.new_key("kill")
    batch_id = shared.submit(key, "claim-down", 1)

    def down(*args: Any, **options: Any) -> Any:
        raise psycopg.OperationalError("connection refused")

    monkeypatch.setattr(lifecycle, "claim_item", down)
    with pytest.raises(psycopg.OperationalError):
        run_item(ctx, UUID(batch_id), 0)
    assert shared.count_items(batch_id, "queued") == 1  # the lost-message sweep publishes it again
    shared.call(key, "POST", f"/v1/batches/{batch_id}/cancel")


def test_a_worker_judges_others_only_after_its_own_heartbeats_have_been_steady(ctx: WorkerContext) -> None:
    now = [1000.0]
    beats = Heartbeat(ctx, clock=lambda: now[0])
    lost_after = ctx.runtime.settings.worker_lost_after_s

    def beat_for_lost_after() -> None:  # a beat every quarter of the lost-after time, for that long
        for _ in range(4):
            now[0] += lost_after / 4
            beats.beat()

    try:
        beats.beat()
        assert not beats.steady()
        beat_for_lost_after()
        assert beats.steady()
        now[0] += lost_after  # a gap: Postgres was away for this worker too, so everyone's beats are stale
        beats.beat()
        assert not beats.steady()
        beat_for_lost_after()  # back: a live worker's first beat may come seconds after this one's
        assert not beats.steady()
        beat_for_lost_after()
        assert beats.steady()  # after twice the lost-after time
    finally:
        beats.close()


def test_the_reaper_discards_items_of_a_silent_worker_only_when_told_it_can_judge(shared: Stack,
                                                                                ctx: WorkerContext) -> None:
    key = shared.new_key("kill")
    batch_id = shared.submit(key, "ghost", 1)
    with shared.runtime.pool.connection() as conn:
        outbox.heartbeat(conn, "ghost-worker", "elsewhere", 1)
        assert lifecycle.claim_item(conn, UUID(batch_id), 0, "ghost-worker") is not None
        conn.execute("UPDATE workers SET last_seen = now() - interval '1 hour' WHERE id = 'ghost-worker'")
        conn.execute("UPDATE batch_items SET started_at = now() - interval '1 minute' WHERE batch_id = %s",
                     (batch_id,))
    try:
        reap(ctx, judge_owners=False)
        assert shared.count_items(batch_id, "running") == 1
        reap(ctx, judge_owners=True)
        accounting = shared.account(key, batch_id, "ghost", 1, timeout=10)
        assert accounting.items[0]["error_code"] == "worker_lost"
    finally:
        with shared.runtime.pool.connection() as conn:
            outbox.remove_worker(conn, "ghost-worker")


def test_an_item_claimed_since_its_workers_last_heartbeat_is_not_judged_lost(shared: Stack,
                                                                            ctx: WorkerContext) -> None:
    """A worker back from a partition (its heartbeat stale) claims before its next beat lands: it is alive."""
    key = shared.new_key("kill")
    batch_id = shared.submit(key, "returning", 2)
    with shared.runtime.pool.connection() as conn:
        outbox.heartbeat(conn, "returning-worker", "elsewhere", 1)
        conn.execute("UPDATE workers SET last_seen = now() - interval '1 hour' WHERE id = 'returning-worker'")
        for idx in (0, 1):
            assert lifecycle.claim_item(conn, UUID(batch_id), idx, "returning-worker") is not None
        conn.execute("UPDATE batch_items SET started_at = now() - interval '1 minute' WHERE batch_id = %s AND idx = 0",
                     (batch_id,))
    try:
        reap(ctx, judge_owners=True)
        assert [r["idx"] for r in shared.item_rows(batch_id, "state = 'running'")] == [1]  # the fresh claim
        assert shared.item_rows(batch_id, "idx = 0")[0]["error_code"] == "worker_lost"  # claimed before it went
    finally:
        shared.call(key, "POST", f"/v1/batches/{batch_id}/cancel")
        with shared.runtime.pool.connection() as conn:
            outbox.remove_worker(conn, "returning-worker")
