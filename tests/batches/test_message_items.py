"""The items of one message run one after another on one thread, each next one claimed in the transaction that
commits its predecessor's final state: one claim statement a message, and still never two items of a thread
running at once; a stopping worker claims nothing more, a cancel between items stops the rest."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest

from app.batches import lifecycle
from app.batches.messages import run_items
from app.batches.runner import WorkerContext
from app.usage import writer
from app.usage.writer import GroupWriter
from tests.batches.helpers import CHAT, submit, usage_events

pytestmark = pytest.mark.integration


@pytest.fixture()
def ctx(runtime) -> Iterator[WorkerContext]:  # type: ignore[no-untyped-def]
    context = WorkerContext.create(runtime, f"in-process-{uuid4()}")
    yield context
    context.writer.close()


@pytest.fixture()
def claims(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the claim statements of single items (the first of a message)."""
    real, seen = lifecycle.claim_item, []

    def counted(conn: Any, batch_id: UUID, idx: int, worker_id: str, **options: Any) -> Any:
        seen.append(idx)
        return real(conn, batch_id, idx, worker_id, **options)

    monkeypatch.setattr(lifecycle, "claim_item", counted)
    return seen


def _items(runtime: Any, batch_id: str) -> list[dict[str, Any]]:
    with runtime.pool.connection() as conn:
        return conn.execute("SELECT idx, state, worker_id, started_at, finished_at FROM batch_items"
                            " WHERE batch_id = %s ORDER BY idx", (batch_id,)).fetchall()


def test_a_message_of_eight_items_runs_them_in_order_with_one_claim_statement(
        client, key, runtime, ctx, claims, upstream) -> None:
    batch_id = submit(client, key, [CHAT] * 8).json["id"]
    assert run_items(ctx, UUID(batch_id), list(range(8))) == []
    items = _items(runtime, batch_id)
    assert [i["state"] for i in items] == ["completed"] * 8
    assert claims == [0]  # the other seven were claimed with their predecessors' final states
    for before, after in itertools.pairwise(items):
        assert after["started_at"] >= before["finished_at"]  # never two of the thread's items running at once
    assert len(usage_events(runtime, batch_id)) == 8


def test_a_stopping_worker_claims_nothing_more_and_hands_back_the_rest(client, key, runtime, ctx,
                                                                        upstream) -> None:
    batch_id = submit(client, key, [CHAT] * 5).json["id"]
    ctx.stopping.set()  # asked to stop as the message arrives: the item taken runs, the rest go back
    assert run_items(ctx, UUID(batch_id), list(range(5))) == [1, 2, 3, 4]
    assert [i["state"] for i in _items(runtime, batch_id)] == ["completed"] + ["queued"] * 4
    client.post(f"/v1/batches/{batch_id}/cancel", headers={"Authorization": f"Bearer {key}"})


def test_a_cancel_between_two_items_of_a_message_stops_the_rest(client, key, runtime, ctx, upstream) -> None:
    batch_id = submit(client, key, [CHAT] * 4).json["id"]
    cancel = lambda: client.post(f"/v1/batches/{batch_id}/cancel",  # noqa: E731
                                 headers={"Authorization": f"Bearer {key}"})
    ctx.finished.append(lambda: ctx.finished.clear() or cancel())
    assert run_items(ctx, UUID(batch_id), list(range(4))) == []
    states = [i["state"] for i in _items(runtime, batch_id)]
    # item 1 may have been claimed with item 0's final state just before the cancel (a worker's listener would
    # stop it; none runs in this process): the items after it never start.
    assert states[0] == "completed" and states[1] in ("completed", "cancelled") and states[2:] == ["cancelled"] * 2
    assert len(usage_events(runtime, batch_id)) == 4


def test_an_items_usage_event_shows_a_request_id_it_does_not_store(client, key, runtime, ctx, upstream) -> None:
    batch_id = submit(client, key, [CHAT] * 3).json["id"]
    assert run_items(ctx, UUID(batch_id), [0, 1, 2]) == []
    with runtime.pool.connection() as conn:
        stored = conn.execute("SELECT request_id FROM usage_events WHERE batch_id = %s", (batch_id,)).fetchall()
    assert [row["request_id"] for row in stored] == [None] * 3  # 42 bytes a row the readers can make
    res = client.get("/v1/usage/events", query_string={"batch_id": batch_id},
                     headers={"Authorization": f"Bearer {key}"})
    assert res.status_code == 200, res.get_data(as_text=True)
    assert sorted(e["request_id"] for e in res.json["events"]) == [f"{batch_id}:{idx}" for idx in range(3)]


def test_a_worker_paused_inside_its_group_commit_holds_up_no_other_workers_claim(
        client, key, runtime, ctx, upstream, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process stopped inside the transaction that commits an item's final state and claims its message's next
    item (SIGSTOP, a paused container: here its group writer's thread, held there) keeps that item's row locked.
    The server ends that transaction (lifecycle.PAUSED_HOLDER_TIMEOUT), so another worker's claim of a copy of the
    item (the lost-message sweep publishes one) goes on while the process is still paused; when it resumes, its
    group writer commits again. Every item ends once, with one usage event."""
    batch_id = UUID(submit(client, key, [CHAT] * 2).json["id"])
    paused, resume = threading.Event(), threading.Event()
    real = lifecycle.claim_items

    def claim_then_pause(conn: Any, keys: Any, worker_id: str, counter: str) -> Any:
        rows = real(conn, keys, worker_id, counter)
        if not paused.is_set():
            paused.set()
            resume.wait(120)
        return rows

    monkeypatch.setattr(lifecycle, "claim_items", claim_then_pause)
    first = threading.Thread(target=run_items, args=(ctx, batch_id, [0, 1]), daemon=True)
    first.start()
    other = WorkerContext.create(runtime, f"in-process-{uuid4()}")
    try:
        assert paused.wait(60), "item 1 was never claimed with item 0's final state"
        with runtime.pool.connection() as conn:  # the paused transaction holds item 1's row
            held = conn.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE state = 'idle in transaction'"
                                " AND datname = current_database()").fetchone()
        second = threading.Thread(target=run_items, args=(other, batch_id, [1]), daemon=True)
        second.start()
        second.join(60)  # a bound only a hang crosses: without the server ending it, this waits out the pause
        went_on = not second.is_alive()
    finally:
        resume.set()
        first.join(60)
        other.writer.close()
    assert held["n"] >= 1
    assert went_on, "another worker's claim waited for the paused process"
    assert not first.is_alive()
    assert [i["state"] for i in _items(runtime, batch_id)] == ["completed"] * 2
    assert len(usage_events(runtime, batch_id)) == 2


def test_a_next_item_claimed_by_a_commit_whose_answer_was_lost_is_adopted_and_runs_once(
        client, key, runtime, ctx, claims, upstream, monkeypatch) -> None:
    """Item 0's final state commits with item 1's claim, and the connection ends before the answer comes: the retry
    finds item 0 final already and claims nothing, so the thread does not know item 1 is running under its id.
    It claims item 1 the usual way, finds that claim, and runs it (not left running until its time limit)."""
    batch_id = submit(client, key, [CHAT] * 2).json["id"]
    real, cut = GroupWriter._connection, []

    @contextmanager
    def connection(self: GroupWriter, finals: Any, records: Any) -> Iterator[Any]:
        with real(self, finals, records) as conn:
            yield conn
        if finals and not cut:  # committed; the answer is lost with the connection
            cut.append(True)
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(GroupWriter, "_connection", connection)
    monkeypatch.setattr(writer, "RETRY_S", (0.01,))
    assert run_items(ctx, UUID(batch_id), [0, 1]) == []
    assert cut and claims == [0, 1]  # item 1 was looked for again on its own
    items = _items(runtime, batch_id)
    assert [i["state"] for i in items] == ["completed", "completed"]
    assert items[1]["started_at"] >= items[0]["finished_at"]  # the claim that rode with item 0's final, adopted
    assert len(usage_events(runtime, batch_id)) == 2
