"""Pacing on real worker processes: a paced policy's batch starts items only within its share of the limits (none
discarded rate_limited, the batch takes as long as the limits require), live calls keep the rest, an unpaced share
discards at once, a completion_window ends what could not start in time, and cancel stops waiting items."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from tests.batches.helpers import (
    CHAT,
    PACED_LIMIT,
    PACED_WINDOW_S,
    get,
    submit,
    usage_events,
    wait_finished,
)

pytestmark = pytest.mark.integration
BATCH_SHARE = PACED_LIMIT // 2  # batch items per window of the `paced` policy


@pytest.fixture()
def paced_key(make_key, fresh_upstream) -> str:  # type: ignore[no-untyped-def]
    return str(make_key("paced")["key"])


def starts_per_window(events: list[dict[str, Any]]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for e in events:
        if e["error_code"] != "rate_limited":
            w = math.floor(e["started_at"].timestamp() / PACED_WINDOW_S)
            counts[w] = counts.get(w, 0) + 1
    return counts


def batch_granted(runtime: Any) -> list[int]:
    with runtime.pool.connection() as conn:
        rows = conn.execute("SELECT w.batch_requests FROM rate_limit_windows w JOIN policy_rate_limits l"
                            " ON l.id = w.limit_id JOIN policies p ON p.id = l.policy_id WHERE p.name = 'paced'"
                            ).fetchall()
    return [int(r["batch_requests"]) for r in rows]


def test_a_paced_batch_runs_every_item_within_its_share_and_none_is_rate_limited(client, paced_key, runtime) -> None:
    started = time.monotonic()
    batch_id = submit(client, paced_key, [CHAT] * 12).json["id"]
    batch = wait_finished(client, paced_key, batch_id, timeout=40)
    took = time.monotonic() - started
    assert batch["counts"]["completed"] == 12
    events = usage_events(runtime, batch_id)
    assert len(events) == 12 and not [e for e in events if e["error_code"] == "rate_limited"]
    assert max(starts_per_window(events).values()) <= BATCH_SHARE
    assert max(batch_granted(runtime)) <= BATCH_SHARE
    assert took >= (12 / BATCH_SHARE - 2) * PACED_WINDOW_S  # three windows' worth: it waited for the limit


def test_live_calls_within_the_rest_of_the_limit_get_no_429_while_a_paced_batch_runs(client, paced_key) -> None:
    batch_id = submit(client, paced_key, [CHAT] * 16).json["id"]
    statuses = []
    for _ in range(4):  # live calls up to (1 - share) of each window, right at its start
        time.sleep(PACED_WINDOW_S - time.time() % PACED_WINDOW_S + 0.02)
        statuses += [client.post("/v1/chat/completions", json=CHAT,
                                 headers={"Authorization": f"Bearer {paced_key}"}).status_code
                     for _ in range(PACED_LIMIT - BATCH_SHARE)]
    assert statuses == [200] * len(statuses)
    batch = wait_finished(client, paced_key, batch_id, timeout=40)
    assert batch["counts"]["completed"] == 16


def test_an_unpaced_share_discards_batch_items_past_it_at_once_and_leaves_the_rest_live(
        client, make_key, runtime, fresh_upstream) -> None:
    key = make_key("shared")["key"]  # 10 requests an hour, half of them for batch items
    batch = wait_finished(client, key, submit(client, key, [CHAT] * 8).json["id"])
    counts = batch["counts"]
    # 5 are the batch's share; a worker process whose lease holds part of it while the other process has the items
    # strands that part until the window ends (seen under parallel load: 4 completed), never more than the share
    assert 3 <= counts["completed"] <= 5 and counts["completed"] + counts["discarded"] == 8, counts
    assert {i["error_code"] for i in batch["items"] if i["state"] == "discarded"} == {"rate_limited"}
    live = [client.post("/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {key}"}).status_code
            for _ in range(6)]
    assert live == [200] * 5 + [429]


def test_a_paced_item_not_started_by_the_completion_window_ends_expired(client, paced_key, runtime) -> None:
    res = submit(client, paced_key, [CHAT] * 30, completion_window="3s")
    assert res.status_code == 202, res.get_data(as_text=True)
    answer = res.json
    assert answer["completion_window"] == "3s" and answer["expires_at"] is not None
    assert answer["pacing"]["paced"] is True and answer["pacing"]["past_deadline"] is True
    batch = wait_finished(client, paced_key, answer["id"], timeout=30)
    counts = batch["counts"]
    assert 0 < counts["completed"] <= 3 * BATCH_SHARE and counts["completed"] + counts["discarded"] == 30
    expired = [i for i in batch["items"] if i["state"] == "discarded"]
    assert expired and {i["error_code"] for i in expired} == {"expired"}
    events = usage_events(runtime, answer["id"])
    assert len(events) == 30 and len({e["batch_idx"] for e in events}) == 30


def test_a_paced_batch_says_its_rate_and_when_it_should_finish(client, paced_key) -> None:
    res = submit(client, paced_key, [CHAT] * 20)
    before = time.time()
    pacing = res.json["pacing"]
    assert pacing["share"] == 0.5
    assert pacing["items_per_minute"] == pytest.approx(BATCH_SHARE * 60 / PACED_WINDOW_S)
    assert before + 3 * PACED_WINDOW_S <= pacing["expected_finish_at"] <= before + 6 * PACED_WINDOW_S
    assert pacing["past_deadline"] is False
    seen = get(client, paced_key, f"/v1/batches/{res.json['id']}").json["pacing"]
    assert seen["waiting_items"] <= 20
    wait_finished(client, paced_key, res.json["id"], timeout=40)
    assert get(client, paced_key, f"/v1/batches/{res.json['id']}").json["pacing"] is None


def test_cancel_stops_the_items_of_a_paced_batch_that_wait_for_budget(client, paced_key, upstream) -> None:
    batch_id = submit(client, paced_key, [CHAT] * 40).json["id"]
    time.sleep(1.0)
    assert client.post(f"/v1/batches/{batch_id}/cancel",
                       headers={"Authorization": f"Bearer {paced_key}"}).status_code == 200
    stopped = time.monotonic()
    batch = wait_finished(client, paced_key, batch_id, timeout=10)
    assert time.monotonic() - stopped < PACED_WINDOW_S + 1.5
    assert batch["counts"]["cancelled"] >= 40 - 2 * BATCH_SHARE


@pytest.mark.parametrize("window", ["soon", "0s", "400d", 12])
def test_an_invalid_completion_window_is_a_400_naming_it(client, key, window) -> None:
    res = submit(client, key, [CHAT], completion_window=window)
    assert res.status_code == 400
    assert any(d["field"] == "completion_window" for d in res.json["error"]["details"])


def test_live_calls_beyond_a_paced_share_are_still_limited(client, paced_key) -> None:
    """The share protects live calls from batch items, not from the limit itself."""
    time.sleep(PACED_WINDOW_S - time.time() % PACED_WINDOW_S + 0.02)
    statuses = [client.post("/v1/chat/completions", json=CHAT,
                            headers={"Authorization": f"Bearer {paced_key}"}).status_code
                for _ in range(PACED_LIMIT + 2)]
    assert statuses.count(200) == PACED_LIMIT and statuses[-1] == 429
