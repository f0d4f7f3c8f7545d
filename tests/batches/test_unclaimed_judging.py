"""A message whose item another worker is running: the worker that took it discards the item as `worker_lost` only
when its own heartbeat is steady. After a database outage or a failover every heartbeat is stale and no session lock
is held until each worker beats again, so a worker just back judges nobody; the reaper does, once steady."""

from __future__ import annotations

from uuid import UUID

import pytest

from app.batches import lifecycle, outbox, unclaimed
from tests.batches.helpers import CHAT, submit, usage_events

pytestmark = pytest.mark.integration  # real Postgres


def _state(runtime, batch_id: str) -> tuple[str, str | None]:  # type: ignore[no-untyped-def]
    with runtime.pool.connection() as conn:
        row = conn.execute("SELECT state, error_code FROM batch_items WHERE batch_id = %s AND idx = 0",
                           (batch_id,)).fetchone()
    return row["state"], row["error_code"]


def test_an_item_of_a_silent_worker_is_judged_lost_only_by_a_worker_whose_own_heartbeat_is_steady(
        client, key, runtime) -> None:  # type: ignore[no-untyped-def]
    batch_id = submit(client, key, [CHAT]).json["id"]
    with runtime.pool.connection() as conn:  # running under a worker with no heartbeat row and no session, long ago
        assert lifecycle.claim_item(conn, UUID(batch_id), 0, "silent-worker") is not None
        conn.execute("UPDATE batch_items SET started_at = now() - interval '1 hour' WHERE batch_id = %s",
                     (batch_id,))

    assert unclaimed.settle(runtime, "judge", UUID(batch_id), 0, judge_owners=False) == "duplicate"
    assert _state(runtime, batch_id) == ("running", None)
    assert usage_events(runtime, batch_id) == []

    assert unclaimed.settle(runtime, "judge", UUID(batch_id), 0, judge_owners=True) == "discarded"
    assert _state(runtime, batch_id) == ("discarded", "worker_lost")
    assert [e["error_code"] for e in usage_events(runtime, batch_id)] == ["worker_lost"]


def test_a_fresh_claim_of_a_silent_worker_is_a_sign_of_life_to_a_steady_judge(client, key, runtime) -> None:  # type: ignore[no-untyped-def]
    batch_id = submit(client, key, [CHAT]).json["id"]
    with runtime.pool.connection() as conn:  # claimed just now by a worker whose heartbeat has not come back yet
        outbox.heartbeat(conn, "back-worker", "elsewhere", 1)
        conn.execute("UPDATE workers SET last_seen = now() - interval '1 hour' WHERE id = 'back-worker'")
        assert lifecycle.claim_item(conn, UUID(batch_id), 0, "back-worker") is not None

    assert unclaimed.settle(runtime, "judge", UUID(batch_id), 0, judge_owners=True) == "duplicate"
    assert _state(runtime, batch_id) == ("running", None)

    with runtime.pool.connection() as conn:  # the claim as old as the lost-after time: no sign of life left
        conn.execute("UPDATE batch_items SET started_at = now() - make_interval(secs => %s) WHERE batch_id = %s",
                     (runtime.settings.worker_lost_after_s + 1, batch_id))
    assert unclaimed.settle(runtime, "judge", UUID(batch_id), 0, judge_owners=True) == "discarded"
    assert _state(runtime, batch_id) == ("discarded", "worker_lost")
