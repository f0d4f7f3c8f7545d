"""Two real API replicas share the breakers (cached per process, invalidated by NOTIFY) and the rate limits
(admission stays a Postgres round trip, exact across replicas)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from devtools.fake_upstream.harness import FakeUpstream
from devtools.processes import RelayProcess
from devtools.waiting import until
from tests.live.conftest import bearer
from tests.pipeline.helpers import CHAT

pytestmark = pytest.mark.integration


def post_chat(url: str, key: str) -> requests.Response:
    return requests.post(f"{url}/v1/chat/completions", json=CHAT, headers=bearer(key), timeout=30)


def keys_used(upstream: FakeUpstream, since: int) -> list[str]:
    calls = upstream.requests()[since:]
    return [{k.lower(): v for k, v in c["headers"].items()}.get("authorization", "") for c in calls]


def test_a_breaker_opened_on_one_replica_is_skipped_by_the_other(
        replicas: list[RelayProcess], new_key: Callable[[str], str], upstream: FakeUpstream) -> None:
    first, second = replicas
    key = new_key("breaker")  # keys oa-2 then oa-3; the breaker opens at the first failure, for an hour
    upstream.reset()
    for _ in range(6):  # the second replica's workers read oa-2's state (healthy) and keep it
        assert post_chat(second.url, key).status_code == 200
    assert set(keys_used(upstream, 0)) == {"Bearer sk-oa-2"}
    upstream.control("sk-oa-2", mode="fail")
    assert post_chat(first.url, key).status_code == 200  # oa-2 fails, oa-3 answers: oa-2's breaker opens
    upstream.control("sk-oa-2", mode="ok")  # oa-2 would answer now: only the breaker keeps calls off it

    def second_skips_oa2() -> bool:
        since = len(upstream.requests())
        assert all(post_chat(second.url, key).status_code == 200 for _ in range(6))
        return set(keys_used(upstream, since)) == {"Bearer sk-oa-3"}

    until(second_skips_oa2, what="the second replica to skip oa-2")


def test_a_rate_limit_admits_exactly_its_count_across_two_replicas(
        replicas: list[RelayProcess], new_key: Callable[[str], str]) -> None:
    key = new_key("limited-20")  # 20 requests per hour
    urls = [api.url for api in replicas] * 15
    with ThreadPoolExecutor(16) as pool:
        statuses = list(pool.map(lambda url: post_chat(url, key).status_code, urls))
    assert sorted(statuses) == [200] * 20 + [429] * 10
