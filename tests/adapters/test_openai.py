"""Chat Completions adapter (shape `openai`)."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.base import Usage
from adapters.openai import ADAPTER
from tests.adapters.samples import CHAT_RESPONSE, CHAT_STREAM, splits

VALID = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def fields_of(body: Any) -> set[str]:
    return {e.field for e in ADAPTER.validate_request(body)}


def test_a_minimal_chat_request_is_valid() -> None:
    assert ADAPTER.validate_request(VALID) == []


def test_unknown_extra_fields_pass_through_validation() -> None:
    assert ADAPTER.validate_request({**VALID, "some_future_option": {"x": 1}}) == []


def test_a_realistic_chat_request_with_tools_and_parts_is_valid() -> None:
    body = {
        "model": "gpt-4o", "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.2,
        "max_completion_tokens": 100, "stop": ["\n"], "tools": [{"type": "function", "function": {"name": "f"}}],
        "messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"},
                                         {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
        ],
    }
    assert ADAPTER.validate_request(body) == []


@pytest.mark.parametrize(("body", "field"), [
    ({"messages": VALID["messages"]}, "model"),
    ({**VALID, "model": ""}, "model"),
    ({**VALID, "model": 7}, "model"),
    ({"model": "m"}, "messages"),
    ({**VALID, "messages": []}, "messages"),
    ({**VALID, "messages": "hi"}, "messages"),
    ({**VALID, "messages": ["hi"]}, "messages[0]"),
    ({**VALID, "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({**VALID, "messages": [{"role": "user"}]}, "messages[0].content"),
    ({**VALID, "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({**VALID, "messages": [{"role": "assistant", "content": None}]}, "messages[0].content"),
    ({**VALID, "messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    ({**VALID, "stream": "yes"}, "stream"),
    ({**VALID, "temperature": "hot"}, "temperature"),
    ({**VALID, "temperature": True}, "temperature"),
    ({**VALID, "max_tokens": 0}, "max_tokens"),
    ({**VALID, "max_tokens": 1.5}, "max_tokens"),
    ({**VALID, "stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
    ([VALID], "body"),
    (None, "body"),
])
def test_an_invalid_chat_request_names_the_bad_field(body: Any, field: str) -> None:
    assert field in fields_of(body)


def test_optional_fields_may_be_null() -> None:
    assert ADAPTER.validate_request({**VALID, "temperature": None, "stream": None, "max_tokens": None}) == []


def test_auth_is_a_bearer_token() -> None:
    assert ADAPTER.auth_headers("sk-1") == {"Authorization": "Bearer sk-1"}


def test_an_empty_secret_sends_no_auth_header() -> None:
    assert ADAPTER.auth_headers("") == {}


def test_usage_comes_from_prompt_completion_and_cached_tokens() -> None:
    assert ADAPTER.extract_usage(CHAT_RESPONSE) == Usage(input_tokens=12, output_tokens=3, cached_tokens=4)


@pytest.mark.parametrize("body", [{}, {"usage": None}, {"usage": {"prompt_tokens": None}}, None, [1], "x",
                                  {"usage": {"prompt_tokens": "12", "prompt_tokens_details": None}}])
def test_missing_or_null_usage_counts_as_zero(body: Any) -> None:
    assert ADAPTER.extract_usage(body) == Usage()


def test_the_stream_reader_finds_the_usage_chunk_and_done_at_every_split_point() -> None:
    for parts in splits(CHAT_STREAM):
        reader = ADAPTER.stream_usage_reader()
        for part in parts:
            reader.feed(part)
        assert reader.usage() == Usage(12, 3, 4)
        assert reader.completed()


def test_a_stream_cut_before_done_is_not_completed() -> None:
    reader = ADAPTER.stream_usage_reader()
    reader.feed(CHAT_STREAM[: CHAT_STREAM.index(b"data: [DONE]")])
    assert reader.usage() == Usage(12, 3, 4)
    assert not reader.completed()


def test_a_stream_without_usage_reports_zero_usage() -> None:
    reader = ADAPTER.stream_usage_reader()
    reader.feed(b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\ndata: [DONE]\n\n')
    assert reader.usage() == Usage()
    assert reader.completed()


def test_crlf_framed_streams_are_read_too() -> None:
    reader = ADAPTER.stream_usage_reader()
    reader.feed(CHAT_STREAM.replace(b"\n", b"\r\n"))
    assert reader.usage() == Usage(12, 3, 4)
    assert reader.completed()


def test_prepare_body_rewrites_only_the_model() -> None:
    body = {**VALID, "temperature": 0.5, "extra": [1]}
    assert ADAPTER.prepare_body(body, "gpt-4o-mini-2024-07-18") == {**body, "model": "gpt-4o-mini-2024-07-18"}
    assert body["model"] == "gpt-4o-mini"


def test_prepare_body_asks_a_stream_to_include_usage_and_keeps_other_stream_options() -> None:
    body = {**VALID, "stream": True, "stream_options": {"include_obfuscation": False}}
    prepared = ADAPTER.prepare_body(body, "up")
    assert prepared["stream_options"] == {"include_obfuscation": False, "include_usage": True}
    assert body["stream_options"] == {"include_obfuscation": False}


def test_prepare_body_overrides_include_usage_false() -> None:
    prepared = ADAPTER.prepare_body({**VALID, "stream": True, "stream_options": {"include_usage": False}}, "up")
    assert prepared["stream_options"] == {"include_usage": True}


def test_prepare_body_leaves_non_stream_requests_without_stream_options() -> None:
    assert "stream_options" not in ADAPTER.prepare_body(VALID, "up")


@pytest.mark.parametrize(("status", "error_type"), [
    (400, "invalid_request_error"), (401, "authentication_error"), (403, "permission_error"),
    (404, "invalid_request_error"), (429, "rate_limit_error"), (500, "server_error"), (503, "server_error"),
])
def test_error_bodies_use_the_openai_envelope(status: int, error_type: str) -> None:
    assert ADAPTER.error_body(status, "some_code", "msg") == {
        "error": {"message": "msg", "type": error_type, "param": None, "code": "some_code"}}


def test_is_stream_is_true_only_for_stream_true() -> None:
    assert ADAPTER.is_stream({**VALID, "stream": True})
    assert not ADAPTER.is_stream({**VALID, "stream": "true"})
    assert not ADAPTER.is_stream(None)
