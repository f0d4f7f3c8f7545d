"""The official anthropic SDK, unchanged, talks to the fake upstream: messages, streams and errors parse."""

from __future__ import annotations

import anthropic
import pytest

from devtools.fake_upstream import count_tokens, plan_turn
from devtools.fake_upstream.harness import FakeUpstream

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream

MESSAGES = [{"role": "user", "content": "Name three rivers."}]


@pytest.fixture()
def client(upstream: FakeUpstream) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="sk-ant-test", base_url=upstream.anthropic_base_url, max_retries=0)


def test_messages_create_echoes_with_usage(client: anthropic.Anthropic, upstream: FakeUpstream) -> None:
    message = client.messages.create(model="claude-sonnet-4-6", max_tokens=100, system="You are terse.",
                                     messages=MESSAGES)  # type: ignore[arg-type]
    assert message.id.startswith("msg_")
    assert message.type == "message" and message.role == "assistant"
    assert message.model == "claude-sonnet-4-6"
    assert message.content[0].type == "text" and message.content[0].text == "Name three rivers."
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == count_tokens("You are terse.\nName three rivers.")
    assert message.usage.output_tokens == count_tokens("Name three rivers.")
    assert message.usage.cache_read_input_tokens == 0
    assert message.usage.cache_creation_input_tokens == 0
    (call,) = upstream.requests(path="/v1/messages")
    assert call["key"] == "sk-ant-test"
    assert "anthropic-version" in call["headers"]


def test_messages_stream_helper_accumulates_text_and_usage(client: anthropic.Anthropic) -> None:
    with client.messages.stream(model="claude-sonnet-4-6", max_tokens=100, messages=MESSAGES) as stream:  # type: ignore[arg-type]
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Name three rivers."
    assert final.content[0].text == "Name three rivers."  # type: ignore[union-attr]
    assert final.usage.input_tokens == count_tokens("Name three rivers.")
    assert final.usage.output_tokens == count_tokens("Name three rivers.")


def test_raw_stream_events_are_in_anthropic_order(client: anthropic.Anthropic) -> None:
    events = list(client.messages.create(model="c", max_tokens=100, messages=MESSAGES, stream=True))  # type: ignore[arg-type]
    kinds = [e.type for e in events]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert events[0].message.usage.input_tokens == count_tokens("Name three rivers.")  # type: ignore[union-attr]
    assert events[-2].usage.output_tokens == count_tokens("Name three rivers.")  # type: ignore[union-attr]


def test_max_tokens_stops_the_reply(client: anthropic.Anthropic) -> None:
    message = client.messages.create(model="c", max_tokens=1, messages=MESSAGES)  # type: ignore[arg-type]
    assert message.stop_reason == "max_tokens"
    assert message.content[0].text == "Name"  # type: ignore[union-attr]
    assert message.usage.output_tokens == 1


def test_x_api_key_header_is_accepted_too(upstream: FakeUpstream) -> None:
    client = anthropic.Anthropic(api_key=None, auth_token=None, base_url=upstream.url, max_retries=0,
                                 default_headers={"x-api-key": "sk-ant-header"})
    client.messages.create(model="c", max_tokens=10, messages=MESSAGES)  # type: ignore[arg-type]
    assert upstream.requests()[-1]["key"] == "sk-ant-header"


def test_usage_overrides_report_cache_reads_like_anthropic(client: anthropic.Anthropic,
                                                           upstream: FakeUpstream) -> None:
    upstream.control("sk-ant-test", usage={"input_tokens": 100, "cached_tokens": 60, "cache_creation_tokens": 10})
    message = client.messages.create(model="c", max_tokens=100, messages=MESSAGES)  # type: ignore[arg-type]
    assert message.usage.input_tokens == 30  # the uncached part, as the real API reports it
    assert message.usage.cache_read_input_tokens == 60
    assert message.usage.cache_creation_input_tokens == 10
    turn = plan_turn("messages", {"messages": MESSAGES}, usage={"input_tokens": 100, "cached_tokens": 60})
    assert turn.input_tokens == 100


def test_sdk_raises_authentication_error(client: anthropic.Anthropic, upstream: FakeUpstream) -> None:
    upstream.control("sk-ant-test", mode="invalid")
    with pytest.raises(anthropic.AuthenticationError) as raised:
        client.messages.create(model="c", max_tokens=10, messages=MESSAGES)  # type: ignore[arg-type]
    assert raised.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


def test_sdk_raises_rate_limit_error(client: anthropic.Anthropic, upstream: FakeUpstream) -> None:
    upstream.control("sk-ant-test", mode="rate_limited", retry_after=4)
    with pytest.raises(anthropic.RateLimitError) as raised:
        client.messages.create(model="c", max_tokens=10, messages=MESSAGES)  # type: ignore[arg-type]
    assert raised.value.response.headers["retry-after"] == "4"


def test_overloaded_failure_maps_to_the_sdk_error(client: anthropic.Anthropic, upstream: FakeUpstream) -> None:
    upstream.control("sk-ant-test", mode="fail", fail_status=529)
    with pytest.raises(anthropic.APIStatusError) as raised:
        client.messages.create(model="c", max_tokens=10, messages=MESSAGES)  # type: ignore[arg-type]
    assert raised.value.status_code == 529
    assert raised.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
