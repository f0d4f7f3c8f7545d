"""Key pool failover, circuit breakers and rate limits on the live path."""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor

import pytest
import requests

from tests.pipeline.helpers import CHAT, chat, settle, usage_event

pytestmark = pytest.mark.integration


def keys_seen(upstream) -> list[str]:  # type: ignore[no-untyped-def]
    out = []
    for r in upstream.requests():
        headers = {k.lower(): v for k, v in r["headers"].items()}
        out.append(headers.get("authorization", "").removeprefix("Bearer ") or headers.get("x-api-key", ""))
    return out


@pytest.mark.parametrize("mode", ["rate_limited", "fail", "invalid"])
def test_prioritized_fails_over_to_the_next_key(client, make_key, upstream, runtime, mode) -> None:
    upstream.control("sk-oa-1", mode=mode)
    res = chat(client, make_key())
    assert res.status_code == 200
    assert keys_seen(upstream) == ["sk-oa-1", "sk-oa-2"]
    event = usage_event(runtime, res.headers["x-request-id"])
    assert event["attempts"] == 2 and event["host_key_name"] == "oa-2"


def test_a_connection_reset_fails_over_too(client, make_key, upstream) -> None:
    upstream.control("sk-oa-1", mode="reset")
    res = chat(client, make_key())
    assert res.status_code == 200
    assert keys_seen(upstream)[-1] == "sk-oa-2"


def test_a_caller_error_is_returned_as_it_is_without_failover(client, make_key, upstream) -> None:
    upstream.control("sk-oa-1", mode="fail", fail_status=400)
    res = chat(client, make_key())
    assert res.status_code == 400
    assert keys_seen(upstream) == ["sk-oa-1"]


def test_round_robin_rotates_the_first_key(client, make_key, upstream) -> None:
    key = make_key("rr")
    for _ in range(3):
        assert chat(client, key).status_code == 200
    assert sorted(keys_seen(upstream)) == ["sk-oa-1", "sk-oa-2", "sk-oa-3"]


def test_least_recently_used_picks_the_key_idle_longest(client, make_key, upstream) -> None:
    key = make_key("lru")
    seen = []
    for _ in range(4):
        assert chat(client, key).status_code == 200
        seen.append(keys_seen(upstream)[-1])
    assert sorted(seen[:3]) == ["sk-oa-1", "sk-oa-2", "sk-oa-3"]
    assert seen[3] == seen[0]


def test_every_key_failing_is_a_502_naming_the_last_status(client, make_key, upstream, runtime) -> None:
    for i in (1, 2, 3):
        upstream.control(f"sk-oa-{i}", mode="fail", fail_status=503)
    res = chat(client, make_key("rr"))
    assert res.status_code == 502
    assert res.json["error"]["code"] == "all_keys_failed"
    assert "503" in res.json["error"]["message"]
    event = usage_event(runtime, res.headers["x-request-id"])
    assert (event["error_code"], event["upstream_status"], event["status"]) == ("all_keys_failed", 503, 502)


def test_every_key_rate_limited_is_a_429_with_the_soonest_retry_after(client, make_key, upstream, runtime) -> None:
    for i, wait in ((1, 7), (2, 3), (3, 9)):
        upstream.control(f"sk-oa-{i}", mode="rate_limited", retry_after=wait)
    res = chat(client, make_key("rr"))
    assert res.status_code == 429 and res.headers["Retry-After"] == "3", res.headers
    assert (res.json["error"]["code"], res.json["error"]["type"]) == ("all_keys_rate_limited", "rate_limit_error")
    event = usage_event(runtime, res.headers["x-request-id"])
    assert (event["error_code"], event["upstream_status"], event["status"]) == ("all_keys_rate_limited", 429, 429)


def test_keys_rate_limited_and_failing_together_are_still_a_502(client, make_key, upstream) -> None:
    upstream.control("sk-oa-1", mode="rate_limited")
    for i in (2, 3):
        upstream.control(f"sk-oa-{i}", mode="fail", fail_status=503)
    res = chat(client, make_key("rr"))
    assert res.status_code == 502 and res.json["error"]["code"] == "all_keys_failed"
    assert "Retry-After" not in res.headers


def test_all_keys_failing_without_an_answer_records_no_upstream_status(client, make_key, upstream, runtime) -> None:
    for i in (1, 2, 3):
        upstream.control(f"sk-oa-{i}", mode="reset")
    res = chat(client, make_key("rr"))
    assert res.status_code == 502 and "connection failed" in res.json["error"]["message"]
    event = usage_event(runtime, res.headers["x-request-id"])
    assert (event["error_code"], event["upstream_status"]) == ("all_keys_failed", None)


def test_a_policy_without_keys_for_the_host_is_a_503(client, make_key, upstream) -> None:
    res = chat(client, make_key("nokeys"))
    assert res.status_code == 503
    assert res.json["error"]["code"] == "no_key_available"


def _open_breaker_on_oa1(client, key, upstream) -> None:  # type: ignore[no-untyped-def]
    upstream.control("sk-oa-1", mode="fail")
    for _ in range(2):  # the policy opens the breaker after 2 failures
        assert chat(client, key).status_code == 200
    upstream.reset()


def test_an_open_breaker_skips_its_key(client, make_key, upstream) -> None:
    key = make_key()
    _open_breaker_on_oa1(client, key, upstream)
    assert chat(client, key).status_code == 200
    assert keys_seen(upstream) == ["sk-oa-2"]


def test_after_the_cool_down_a_successful_probe_closes_the_breaker(client, make_key, upstream) -> None:
    key = make_key()
    _open_breaker_on_oa1(client, key, upstream)
    time.sleep(2.2)  # the policy's cool-down
    assert chat(client, key).status_code == 200
    assert keys_seen(upstream) == ["sk-oa-1"], "the half-open key takes the probe in its place"
    upstream.reset()
    for _ in range(2):
        assert chat(client, key).status_code == 200
    assert keys_seen(upstream) == ["sk-oa-1", "sk-oa-1"]


def test_a_failed_probe_keeps_the_breaker_open(client, make_key, upstream) -> None:
    key = make_key()
    _open_breaker_on_oa1(client, key, upstream)
    time.sleep(2.2)
    upstream.control("sk-oa-1", mode="fail")
    assert chat(client, key).status_code == 200
    assert keys_seen(upstream) == ["sk-oa-1", "sk-oa-2"]
    upstream.reset()
    assert chat(client, key).status_code == 200
    assert keys_seen(upstream) == ["sk-oa-2"], "the probe failed: the key is skipped again"


def _post_chat(args: tuple[str, str]) -> int:
    url, key = args
    return requests.post(url + "/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {key}"},
                         timeout=30).status_code


def test_a_rate_limit_admits_exactly_n_across_processes(relay_api, make_key) -> None:
    key = make_key("limited")  # 5 requests per hour
    with ProcessPoolExecutor(4) as pool:
        statuses = list(pool.map(_post_chat, [(relay_api.url, key)] * 6))
    assert sorted(statuses) == [200] * 5 + [429]


def test_a_429_carries_retry_after_and_ratelimit_headers(client, make_key) -> None:
    key = make_key("limited")
    for _ in range(5):
        assert chat(client, key).status_code == 200
    res = chat(client, key)
    assert res.status_code == 429
    assert res.json["error"]["code"] == "rate_limited"
    assert int(res.headers["Retry-After"]) > 0
    assert res.headers["x-ratelimit-limit-requests"] == "5"
    assert res.headers["x-ratelimit-remaining-requests"] == "0"


def test_tokens_from_the_upstreams_usage_spend_the_token_budget(client, make_key, runtime) -> None:
    key = make_key("token-limited")
    assert chat(client, key).status_code == 200
    settle(runtime)  # tokens are counted when the usage writer commits the call, just after its answer
    res = chat(client, key)
    assert res.status_code == 429
