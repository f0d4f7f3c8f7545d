"""Fair share on real workers: owners' batches interleave, a new owner overtakes a long backlog, and policy
weights change the shares (one worker process, four threads, an upstream answering in 100 ms)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devtools.waiting import until
from tests.batches.conftest import module_workers
from tests.batches.helpers import CHAT, get, submit, wait_finished

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream
ITEMS = 400


workers = module_workers(processes=1)


@pytest.fixture()
def slow_upstream(upstream, workers) -> Iterator[None]:  # type: ignore[no-untyped-def]
    upstream.control("sk-batch-fair", latency_ms=100)
    yield
    upstream.control("sk-batch-fair", latency_ms=0)


def _final(client: Any, key: str, batch_id: str) -> int:
    counts = get(client, key, f"/v1/batches/{batch_id}", limit=0).json["counts"]
    return int(counts["completed"] + counts["discarded"] + counts["cancelled"])


def _cancel(client: Any, *batches: tuple[str, str]) -> None:
    for key, batch_id in batches:
        client.post(f"/v1/batches/{batch_id}/cancel", headers={"Authorization": f"Bearer {key}"})
        wait_finished(client, key, batch_id)


def test_a_new_owners_small_batch_overtakes_another_owners_long_backlog(client, make_key, slow_upstream) -> None:
    big_key, small_key = make_key("fair")["key"], make_key("fair")["key"]
    big = submit(client, big_key, [CHAT] * ITEMS).json["id"]
    until(lambda: _final(client, big_key, big) >= 20, timeout=60, what="the big batch running")
    small = submit(client, small_key, [CHAT] * 5).json["id"]
    done = wait_finished(client, small_key, small, timeout=60)
    behind = ITEMS - _final(client, big_key, big)
    _cancel(client, (big_key, big))
    assert done["counts"]["completed"] == 5
    assert behind > ITEMS // 2  # it did not wait for the big batch's backlog (over 200 items still to run)


def test_two_owners_big_batches_progress_at_the_same_pace(client, make_key, slow_upstream) -> None:
    key_a, key_b = make_key("fair")["key"], make_key("fair")["key"]
    a = submit(client, key_a, [CHAT] * ITEMS).json["id"]
    b = submit(client, key_b, [CHAT] * ITEMS).json["id"]
    until(lambda: _final(client, key_a, a) + _final(client, key_b, b) >= 160, timeout=120, what="160 items run")
    done_a, done_b = _final(client, key_a, a), _final(client, key_b, b)
    _cancel(client, (key_a, a), (key_b, b))
    assert abs(done_a - done_b) <= 0.3 * (done_a + done_b), (done_a, done_b)


def test_a_policy_batch_weight_gives_its_batches_a_larger_share(client, make_key, slow_upstream) -> None:
    heavy_key, light_key = make_key("fair-heavy")["key"], make_key("fair")["key"]
    light = submit(client, light_key, [CHAT] * ITEMS).json["id"]
    heavy = submit(client, heavy_key, [CHAT] * ITEMS).json["id"]
    def finals() -> tuple[int, int]:
        return _final(client, heavy_key, heavy), _final(client, light_key, light)

    # Measured after the first 40 items: the light batch, submitted first, had the whole first window to itself.
    until(lambda: sum(finals()) >= 40, timeout=120, what="40 items run")
    start_heavy, start_light = finals()
    until(lambda: sum(finals()) >= 40 + 200, timeout=120, what="200 more items run")
    end_heavy, end_light = finals()
    done_heavy, done_light = end_heavy - start_heavy, end_light - start_light
    _cancel(client, (heavy_key, heavy), (light_key, light))
    assert done_heavy >= 2 * done_light, (done_heavy, done_light)  # weight 3 against 1
