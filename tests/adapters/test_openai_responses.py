"""Responses adapter (shape `openai_responses`)."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.base import Usage
from adapters.openai_responses import ADAPTER
from tests.adapters.samples import RESPONSES_RESPONSE, RESPONSES_STREAM, splits, sse

VALID = {"model": "gpt-5", "input": "hi"}


def fields_of(body: Any) -> set[str]:
    return {e.field for e in ADAPTER.validate_request(body)}


@pytest.mark.parametrize("body", [
    VALID,
    {"model": "gpt-5", "input": [{"role": "user", "content": "hi"}], "instructions": "brief", "store": False},
    {"model": "gpt-5", "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
    ], "max_output_tokens": 50, "reasoning": {"effort": "low"}, "stream": True, "a_future_field": [1]},
])
def test_valid_responses_requests_pass(body: Any) -> None:
    assert ADAPTER.validate_request(body) == []


@pytest.mark.parametrize(("body", "field"), [
    ({"input": "hi"}, "model"),
    ({"model": "gpt-5"}, "input"),
    ({**VALID, "input": 3}, "input"),
    ({**VALID, "input": ["hi"]}, "input[0]"),
    ({**VALID, "input": [{"content": "no role no type"}]}, "input[0]"),
    ({**VALID, "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({**VALID, "input": [{"role": "user"}]}, "input[0].content"),
    ({**VALID, "max_output_tokens": -1}, "max_output_tokens"),
    ({**VALID, "instructions": ["x"]}, "instructions"),
    ({**VALID, "stream": "no"}, "stream"),
])
def test_an_invalid_responses_request_names_the_bad_field(body: Any, field: str) -> None:
    assert field in fields_of(body)


def test_auth_is_a_bearer_token() -> None:
    assert ADAPTER.auth_headers("sk-1") == {"Authorization": "Bearer sk-1"}


def test_usage_comes_from_input_output_and_cached_tokens() -> None:
    assert ADAPTER.extract_usage(RESPONSES_RESPONSE) == Usage(input_tokens=20, output_tokens=5, cached_tokens=8)


def test_missing_usage_counts_as_zero() -> None:
    assert ADAPTER.extract_usage({"usage": {"input_tokens_details": None}}) == Usage()


def test_the_stream_reader_takes_usage_from_response_completed_at_every_split_point() -> None:
    for parts in splits(RESPONSES_STREAM):
        reader = ADAPTER.stream_usage_reader()
        for part in parts:
            reader.feed(part)
        assert reader.usage() == Usage(20, 5, 8)
        assert reader.completed()


def test_a_stream_cut_before_response_completed_is_not_completed_and_has_no_usage() -> None:
    reader = ADAPTER.stream_usage_reader()
    reader.feed(RESPONSES_STREAM.split(b"event: response.completed")[0])
    assert reader.usage() == Usage()
    assert not reader.completed()


def test_an_incomplete_response_still_ends_the_stream_with_its_usage() -> None:
    response = {**RESPONSES_RESPONSE, "status": "incomplete",
                "incomplete_details": {"reason": "max_output_tokens"}}
    reader = ADAPTER.stream_usage_reader()
    reader.feed(sse({"type": "response.incomplete", "sequence_number": 1, "response": response}, named=True))
    assert reader.usage() == Usage(20, 5, 8)
    assert reader.completed()


def test_error_bodies_use_the_openai_envelope() -> None:
    assert ADAPTER.error_body(429, "rate_limited", "slow down") == {
        "error": {"message": "slow down", "type": "rate_limit_error", "param": None, "code": "rate_limited"}}


def test_prepare_body_rewrites_only_the_model_even_when_streaming() -> None:
    body = {**VALID, "stream": True}
    assert ADAPTER.prepare_body(body, "gpt-5-2025") == {**body, "model": "gpt-5-2025"}
