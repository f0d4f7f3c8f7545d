"""Counters and the recorded calls let tests assert what reached the upstream."""


from __future__ import annotations

import pytest
import requests

from devtools.fake_upstream.harness import FakeUpstream

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream

USER = [{"role": "user", "content": "hi"}]


def call(upstream: FakeUpstream, path: str, key: str, body: dict[str, object],
         headers: dict[str, str] | None = None) -> requests.Response:
    return requests.post(upstream.url + path, json=body, timeout=10,
                         headers={"Authorization": f"Bearer {key}", **(headers or {})})


def test_stats_count_calls_per_key_path_model_and_status(upstream: FakeUpstream) -> None:
    call(upstream, "/v1/chat/completions", "k1", {"model": "gpt-4o", "messages": USER})
    call(upstream, "/v1/chat/completions", "k1", {"model": "gpt-5", "messages": USER})
    call(upstream, "/v1/responses", "k2", {"model": "gpt-5", "input": "hi"})
    call(upstream, "/v1/responses", "k2", {"model": "gpt-5"})
    stats = upstream.stats()
    assert stats["total"] == 4 and stats["in_flight"] == 0
    assert stats["by_key"] == {"k1": 2, "k2": 2}
    assert stats["by_path"] == {"/v1/chat/completions": 2, "/v1/responses": 2}
    assert stats["by_model"] == {"gpt-4o": 1, "gpt-5": 3}
    assert stats["by_status"] == {"200": 3, "400": 1}
    assert stats["by_outcome"] == {"answered": 4}


def test_requests_record_every_header_and_the_body(upstream: FakeUpstream) -> None:
    body = {"model": "gpt-4o", "messages": USER, "stream": False}
    call(upstream, "/v1/chat/completions", "sk-upstream", body, {"X-Custom": "yes"})
    (record,) = upstream.requests()
    assert record["key"] == "sk-upstream"
    assert record["path"] == "/v1/chat/completions" and record["method"] == "POST"
    assert record["headers"]["authorization"] == "Bearer sk-upstream"
    assert record["headers"]["x-custom"] == "yes"
    assert record["body"] == body
    assert record["model"] == "gpt-4o" and record["stream"] is False
    assert record["status"] == 200 and record["outcome"] == "answered"


def test_requests_filter_by_key_path_since_and_limit(upstream: FakeUpstream) -> None:
    for key in ("a", "b", "a"):
        call(upstream, "/v1/chat/completions", key, {"model": "m", "messages": USER})
    assert [r["key"] for r in upstream.requests(key="a")] == ["a", "a"]
    first = upstream.requests()[0]["seq"]
    assert [r["key"] for r in upstream.requests(since=first)] == ["b", "a"]
    assert [r["key"] for r in upstream.requests(limit=1)] == ["a"]
    assert upstream.requests(path="/v1/messages") == []


def test_request_log_keeps_only_the_newest_calls(upstream: FakeUpstream) -> None:
    upstream.settings(request_log_size=2)
    for key in ("a", "b", "c"):
        call(upstream, "/v1/chat/completions", key, {"model": "m", "messages": USER})
    assert [r["key"] for r in upstream.requests()] == ["b", "c"]
    assert upstream.stats()["total"] == 3


def test_reset_clears_counters_and_log(upstream: FakeUpstream) -> None:
    call(upstream, "/v1/chat/completions", "a", {"model": "m", "messages": USER})
    upstream.reset()
    assert upstream.stats()["total"] == 0
    assert upstream.requests() == []


def test_keys_endpoint_shows_behaviours_and_remaining_times(upstream: FakeUpstream) -> None:
    upstream.control("a", mode="fail", times=3)
    call(upstream, "/v1/chat/completions", "a", {"model": "m", "messages": USER})
    state = requests.get(upstream.url + "/_control/keys", timeout=10).json()
    assert state["keys"]["a"]["mode"] == "fail"
    assert state["remaining_times"] == {"a": 2}
    assert state["options"]["strict_keys"] is False


def test_keys_with_slashes_can_be_controlled(upstream: FakeUpstream) -> None:
    upstream.control("key/with/slashes", mode="invalid")
    assert call(upstream, "/v1/chat/completions", "key/with/slashes",
                {"model": "m", "messages": USER}).status_code == 401
