"""Messages adapter (shape `anthropic`)."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.anthropic import ADAPTER
from adapters.base import Usage
from tests.adapters.samples import MESSAGES_RESPONSE, MESSAGES_STREAM, splits, sse

VALID = {"model": "claude-sonnet-4-5", "max_tokens": 256, "messages": [{"role": "user", "content": "hi"}]}


def fields_of(body: Any) -> set[str]:
    return {e.field for e in ADAPTER.validate_request(body)}


def test_a_minimal_messages_request_is_valid() -> None:
    assert ADAPTER.validate_request(VALID) == []


def test_a_realistic_messages_request_with_blocks_and_system_is_valid() -> None:
    body = {
        **VALID, "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        "stream": True, "temperature": 1, "top_k": 5, "stop_sequences": ["END"], "metadata": {"user_id": "u"},
        "thinking": {"type": "enabled", "budget_tokens": 1024}, "a_future_field": True,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]},
        ],
    }
    assert ADAPTER.validate_request(body) == []


@pytest.mark.parametrize(("body", "field"), [
    ({k: v for k, v in VALID.items() if k != "model"}, "model"),
    ({k: v for k, v in VALID.items() if k != "max_tokens"}, "max_tokens"),
    ({**VALID, "max_tokens": 0}, "max_tokens"),
    ({**VALID, "max_tokens": "100"}, "max_tokens"),
    ({**VALID, "max_tokens": True}, "max_tokens"),
    ({**VALID, "messages": []}, "messages"),
    ({**VALID, "messages": {"role": "user"}}, "messages"),
    ({**VALID, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({**VALID, "messages": [{"role": "user"}]}, "messages[0].content"),
    ({**VALID, "messages": [{"role": "user", "content": [{"text": "no type"}]}]}, "messages[0].content"),
    ({**VALID, "system": 3}, "system"),
    ({**VALID, "stop_sequences": "END"}, "stop_sequences"),
    ({**VALID, "stream": 1}, "stream"),
    ("body", "body"),
])
def test_an_invalid_messages_request_names_the_bad_field(body: Any, field: str) -> None:
    assert field in fields_of(body)


def test_auth_is_an_api_key_with_the_api_version() -> None:
    assert ADAPTER.auth_headers("sk-ant") == {"x-api-key": "sk-ant", "anthropic-version": "2023-06-01"}


def test_usage_counts_cache_reads_and_writes_as_input_and_cache_reads_as_cached() -> None:
    assert ADAPTER.extract_usage(MESSAGES_RESPONSE) == Usage(input_tokens=135, output_tokens=15, cached_tokens=100)


def test_usage_without_cache_fields_is_plain_input_and_output() -> None:
    body = {"usage": {"input_tokens": 9, "output_tokens": 2, "cache_read_input_tokens": None}}
    assert ADAPTER.extract_usage(body) == Usage(9, 2, 0)


@pytest.mark.parametrize("body", [{}, {"usage": None}, None, 3, {"usage": {"input_tokens": -4}}])
def test_missing_null_or_nonsense_usage_counts_as_zero(body: Any) -> None:
    assert ADAPTER.extract_usage(body) == Usage()


def test_the_stream_reader_takes_input_from_message_start_and_output_from_message_delta_at_every_split() -> None:
    for parts in splits(MESSAGES_STREAM):
        reader = ADAPTER.stream_usage_reader()
        for part in parts:
            reader.feed(part)
        assert reader.usage() == Usage(135, 15, 100)
        assert reader.completed()


def test_message_delta_counts_are_cumulative_not_added() -> None:
    reader = ADAPTER.stream_usage_reader()
    reader.feed(sse(
        {"type": "message_start", "message": {"usage": {"input_tokens": 10, "output_tokens": 1}}},
        {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 5}},
        {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 9, "input_tokens": 12}},
        named=True))
    assert reader.usage() == Usage(12, 9, 0)
    assert not reader.completed()


def test_a_stream_that_ends_in_an_error_event_is_not_completed() -> None:
    reader = ADAPTER.stream_usage_reader()
    reader.feed(MESSAGES_STREAM.split(b"event: content_block_stop")[0])
    reader.feed(sse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, named=True))
    assert reader.usage() == Usage(135, 1, 100)
    assert not reader.completed()


@pytest.mark.parametrize(("status", "error_type"), [
    (400, "invalid_request_error"), (401, "authentication_error"), (403, "permission_error"),
    (404, "not_found_error"), (413, "request_too_large"), (422, "invalid_request_error"),
    (429, "rate_limit_error"), (500, "api_error"), (502, "api_error"), (503, "overloaded_error"),
    (529, "overloaded_error"),
])
def test_error_bodies_use_the_anthropic_envelope_with_the_type_for_the_status(status: int, error_type: str) -> None:
    assert ADAPTER.error_body(status, "model_not_found", "no such model") == {
        "type": "error",
        "error": {"type": error_type, "message": "no such model", "code": "model_not_found"},
    }


def test_prepare_body_rewrites_only_the_model() -> None:
    body = {**VALID, "stream": True}
    assert ADAPTER.prepare_body(body, "claude-x") == {**body, "model": "claude-x"}
