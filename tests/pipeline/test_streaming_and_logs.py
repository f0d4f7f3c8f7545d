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
