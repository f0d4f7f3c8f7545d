"""Per-key and default behaviours set through the control API change how calls are answered."""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests

from devtools.fake_upstream import count_tokens
from devtools.fake_upstream.behaviour import MAX_LATENCY_MS
from devtools.fake_upstream.harness import FakeUpstream
from devtools.waiting import until

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "one two three four five six"}]}


def chat(upstream: FakeUpstream, key: str = "sk-a", body: dict[str, Any] | None = None,
         timeout: float = 10, **kwargs: Any) -> requests.Response:
    return requests.post(upstream.url + "/v1/chat/completions", json=body or CHAT,
                         headers={"Authorization": f"Bearer {key}"}, timeout=timeout, **kwargs)



def test_keys_are_valid_by_default(upstream: FakeUpstream) -> None:
    assert chat(upstream, "any-key-at-all").status_code == 200


def test_invalid_mode_gives_401_only_for_that_key(upstream: FakeUpstream) -> None:
    upstream.control("sk-bad", mode="invalid")
    assert chat(upstream, "sk-bad").status_code == 401
    assert chat(upstream, "sk-good").status_code == 200


def test_rate_limited_mode_gives_429_with_retry_after(upstream: FakeUpstream) -> None:
    upstream.control("sk-a", mode="rate_limited", retry_after=12)
    response = chat(upstream)
    assert response.status_code == 429
    assert response.headers["retry-after"] == "12"
    assert response.json()["error"]["code"] == "rate_limit_exceeded"


@pytest.mark.parametrize("status", [500, 502, 503])
def test_fail_mode_answers_the_chosen_status(upstream: FakeUpstream, status: int) -> None:
    upstream.control("sk-a", mode="fail", fail_status=status)
    response = chat(upstream)
    assert response.status_code == status
    assert response.json()["error"]["type"] == "server_error"


def test_times_limits_a_behaviour_to_the_next_calls(upstream: FakeUpstream) -> None:
    upstream.control("sk-a", mode="rate_limited", times=2)
    assert [chat(upstream).status_code for _ in range(3)] == [429, 429, 200]


def test_hang_never_answers_and_the_call_ends_when_the_client_gives_up(upstream: FakeUpstream) -> None:
    upstream.control("sk-a", mode="hang")
    with pytest.raises(requests.ReadTimeout):
        chat(upstream, timeout=0.3)
    until(lambda: upstream.stats()["in_flight"] == 0, what="no call in flight")
    assert upstream.requests()[-1]["outcome"] == "abandoned"


def test_reset_drops_the_connection_without_an_answer(upstream: FakeUpstream) -> None:
    upstream.control("sk-a", mode="reset")
    with pytest.raises(requests.ConnectionError):
        chat(upstream)
    assert upstream.requests()[-1]["outcome"] == "reset"
    assert chat(upstream, "sk-other").status_code == 200


def test_stream_cut_drops_a_stream_halfway(upstream: FakeUpstream) -> None:
    upstream.control("sk-a", mode="stream_cut")
    received: list[bytes] = []
    with pytest.raises(requests.exceptions.ChunkedEncodingError), \
            chat(upstream, body={**CHAT, "stream": True}, stream=True) as response:
        assert response.status_code == 200
        received.extend(response.iter_lines())
    assert received and b"[DONE]" not in b"".join(received)


def test_key_latency_delays_the_answer(upstream: FakeUpstream) -> None:
    upstream.control("sk-slow", latency_ms=2000)
    started = time.monotonic()
    assert chat(upstream, "sk-slow").status_code == 200
    assert time.monotonic() - started >= 2.0
    upstream.control("sk-slow", latency_ms=MAX_LATENCY_MS)  # an hour: a call that waited it would time out
    assert chat(upstream, "sk-fast", timeout=60).status_code == 200  # the other key's latency is not this one's


def test_global_latency_adds_to_every_key(upstream: FakeUpstream) -> None:
    upstream.settings(latency_ms=200)
    upstream.control("sk-slow", latency_ms=100)
    started = time.monotonic()
    chat(upstream, "sk-slow")
    assert time.monotonic() - started >= 0.3


def test_chunk_delay_spaces_the_stream_events(upstream: FakeUpstream) -> None:
    upstream.control("sk-a", chunk_delay_ms=50)
    started = time.monotonic()
    with chat(upstream, body={**CHAT, "stream": True}, stream=True) as response:
        frames = [line for line in response.iter_lines() if line]
    assert time.monotonic() - started >= 0.05 * (len(frames) - 1)


def test_default_behaviour_applies_to_keys_without_their_own(upstream: FakeUpstream) -> None:
    upstream.default(mode="fail", fail_status=502)
    upstream.control("sk-fine")
    assert chat(upstream, "sk-unlisted").status_code == 502
    assert chat(upstream, "sk-fine").status_code == 200


def test_strict_keys_accept_only_listed_keys(upstream: FakeUpstream) -> None:
    upstream.settings(strict_keys=True)
    upstream.control("sk-listed")
    assert chat(upstream, "sk-listed").status_code == 200
    assert chat(upstream, "sk-unlisted").status_code == 401
    upstream.forget("sk-listed")
    assert chat(upstream, "sk-listed").status_code == 401


def test_allow_missing_key_serves_keyless_calls(upstream: FakeUpstream) -> None:
    upstream.settings(allow_missing_key=True)
    response = requests.post(upstream.url + "/v1/chat/completions", json=CHAT, timeout=10)
    assert response.status_code == 200


def test_usage_and_reply_overrides(upstream: FakeUpstream) -> None:
    upstream.control("sk-a", reply="fixed answer", usage={"cached_tokens": 3, "reasoning_tokens": 2})
    body = chat(upstream).json()
    assert body["choices"][0]["message"]["content"] == "fixed answer"
    assert body["usage"]["completion_tokens"] == count_tokens("fixed answer")
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 3
    assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] == 2


def test_reset_restores_the_start_up_behaviour(upstream: FakeUpstream) -> None:
    upstream.control("sk-a", mode="invalid")
    upstream.settings(strict_keys=True, latency_ms=MAX_LATENCY_MS)
    upstream.reset()
    assert chat(upstream, timeout=60).status_code == 200  # the hour's latency is gone (a call that waited it times out)


@pytest.mark.parametrize("behaviour", [{"mode": "bogus"}, {"latency_ms": -1}, {"fail_status": 200},
                                       {"colour": "red"}, {"usage": {"tokens": 1}}, {"times": 0}])
def test_control_api_refuses_invalid_behaviours(upstream: FakeUpstream, behaviour: dict[str, Any]) -> None:
    response = requests.put(upstream.url + "/_control/keys/sk-a", json=behaviour, timeout=10)
    assert response.status_code == 400
    assert "error" in response.json()


def test_a_client_leaving_mid_stream_is_recorded_as_abandoned(upstream: FakeUpstream) -> None:
    upstream.control("sk-a", chunk_delay_ms=100)
    with chat(upstream, body={**CHAT, "stream": True}, stream=True) as response:
        next(response.iter_lines())
    until(lambda: upstream.stats()["in_flight"] == 0, what="no call in flight")
    assert upstream.requests()[-1]["outcome"] == "abandoned"
