"""Streaming pass-through with usage, and payload logging on and off."""

from __future__ import annotations

import json

import pytest

from tests.pipeline.helpers import CHAT, chat, usage_event

pytestmark = pytest.mark.integration


def test_a_streamed_chat_passes_sse_through_and_records_its_usage(client, make_key, runtime) -> None:
    res = chat(client, make_key(), {**CHAT, "stream": True})
    assert res.status_code == 200
    assert res.mimetype == "text/event-stream"
    text = res.get_data(as_text=True)
    assert text.rstrip().endswith("data: [DONE]")
    event = usage_event(runtime, res.headers["x-request-id"])
    assert event["streamed"] is True
    assert event["input_tokens"] > 0 and event["output_tokens"] > 0
    assert event["cost_nanos"] > 0


def test_a_streamed_anthropic_message_records_input_and_output_tokens(client, make_key, runtime) -> None:
    body = {"model": "claude-sonnet", "max_tokens": 50, "stream": True,
            "messages": [{"role": "user", "content": "stream this please"}]}
    res = client.post("/v1/messages", json=body, headers={"x-api-key": make_key(), "anthropic-version": "2023-06-01"})
    assert res.status_code == 200
    assert "event: message_stop" in res.get_data(as_text=True)
    event = usage_event(runtime, res.headers["x-request-id"])
    assert event["input_tokens"] > 0 and event["output_tokens"] > 0


def test_payloads_are_logged_only_when_the_policy_asks(client, make_key, runtime) -> None:
    logged = chat(client, make_key("logged"))
    quiet = chat(client, make_key("main"))
    usage_event(runtime, logged.headers["x-request-id"])  # the payload log is committed with the usage event
    usage_event(runtime, quiet.headers["x-request-id"])
    with runtime.pool.connection() as conn:
        row = conn.execute("SELECT * FROM payload_logs WHERE request_id = %s",
                           (logged.headers["x-request-id"],)).fetchone()
        none = conn.execute("SELECT 1 FROM payload_logs WHERE request_id = %s",
                            (quiet.headers["x-request-id"],)).fetchone()
    assert row is not None and none is None
    assert json.loads(row["request_body"])["messages"] == CHAT["messages"]
    assert json.loads(row["response_body"])["object"] == "chat.completion"
    assert row["request_truncated"] is False


def _read_text_then_close(res) -> str:  # type: ignore[no-untyped-def]
    """Read a streamed chat until its last text chunk (finish_reason set), then hang up like a client that has
    what it wanted; the usage chunk is still on its way."""
    seen = ""
    for chunk in res.response:
        seen += chunk.decode() if isinstance(chunk, bytes) else chunk
        if '"finish_reason":"stop"' in seen.replace(" ", ""):
            break
    res.close()
    assert "[DONE]" not in seen and '"usage":{' not in seen.replace(" ", "")
    return seen


def test_a_stream_the_client_closes_after_the_text_still_records_the_real_tokens_and_cost(
        client, make_key, upstream, runtime) -> None:
    upstream.control("sk-oa-1", chunk_delay_ms=150)
    res = chat(client, make_key(), {**CHAT, "stream": True}, buffered=False)
    _read_text_then_close(res)
    event = usage_event(runtime, res.headers["x-request-id"])
    assert event["error_code"] == "client_disconnected" and event["streamed"] is True
    assert event["input_tokens"] > 0 and event["output_tokens"] > 0
    assert event["cost_nanos"] > 0  # the binding is priced: never a made-up zero


def test_a_stream_the_client_closes_charges_the_token_budget(client, make_key, upstream, runtime) -> None:
    upstream.control("sk-oa-1", chunk_delay_ms=150)
    key = make_key("token-limited")  # one token per hour
    res = chat(client, key, {**CHAT, "stream": True}, buffered=False)
    _read_text_then_close(res)
    usage_event(runtime, res.headers["x-request-id"])  # the call's tokens are counted once its event commits
    res = chat(client, key)
    assert res.status_code == 429 and res.json["error"]["code"] == "rate_limited"


def test_a_stream_the_upstream_cuts_records_a_null_cost_not_a_zero(client, make_key, upstream, runtime) -> None:
    upstream.control("sk-oa-1", mode="stream_cut")
    res = chat(client, make_key(), {**CHAT, "stream": True})
    res.get_data()
    event = usage_event(runtime, res.headers["x-request-id"])
    assert event["error_code"] == "upstream_stream_broken" and event["status"] == 200
    assert event["cost_nanos"] is None
