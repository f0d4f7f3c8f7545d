"""The canonical /v1/generate shape: validation, translation both ways, streaming."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapters import get_adapter
from adapters.base import Usage
from adapters.canonical import from_shape, stream_translator, to_shape, validate_canonical
from adapters.errors import UnknownShape
from tests.adapters.samples import (
    CHAT_RESPONSE,
    CHAT_STREAM,
    MESSAGES_RESPONSE,
    MESSAGES_STREAM,
    RESPONSES_RESPONSE,
    RESPONSES_STREAM,
    splits,
    sse,
)

FULL = {"model": "m", "instructions": "be brief", "max_tokens": 64, "temperature": 0.3,
        "input": [{"role": "system", "content": "no emojis"}, {"role": "user", "content": "hi"},
                  {"role": "assistant", "content": "hello"}, {"role": "user", "content": "again"}]}
SHAPES = ("openai", "anthropic", "openai_responses")
STREAMS = {"openai": CHAT_STREAM, "anthropic": MESSAGES_STREAM, "openai_responses": RESPONSES_STREAM}
RESPONSES = {"openai": CHAT_RESPONSE, "anthropic": MESSAGES_RESPONSE, "openai_responses": RESPONSES_RESPONSE}
USAGES = {"openai": Usage(12, 3, 4), "anthropic": Usage(135, 15, 100), "openai_responses": Usage(20, 5, 8)}


@pytest.mark.parametrize("body", [{"model": "m", "input": "hi"}, FULL, {**FULL, "stream": True, "extra": 1}])
def test_valid_canonical_requests_pass(body: Any) -> None:
    assert validate_canonical(body) == []


@pytest.mark.parametrize(("body", "field"), [
    ({"input": "hi"}, "model"),
    ({"model": ["a", "b"], "input": "hi"}, "model"),
    ({"model": "m"}, "input"),
    ({"model": "m", "input": ""}, "input"),
    ({"model": "m", "input": []}, "input"),
    ({"model": "m", "input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    ({"model": "m", "input": [{"role": "user", "content": [{"type": "text"}]}]}, "input[0].content"),
    ({"model": "m", "input": ["hi"]}, "input[0]"),
    ({"model": "m", "input": "hi", "max_tokens": 0}, "max_tokens"),
    ({"model": "m", "input": "hi", "stream": "yes"}, "stream"),
    (None, "body"),
])
def test_an_invalid_canonical_request_names_the_bad_field(body: Any, field: str) -> None:
    assert field in {e.field for e in validate_canonical(body)}


def test_to_openai_puts_instructions_first_as_a_system_message() -> None:
    assert to_shape(FULL, "openai") == {
        "model": "m", "max_completion_tokens": 64, "temperature": 0.3,
        "messages": [{"role": "system", "content": "be brief"}, *FULL["input"]],
    }


def test_to_openai_streaming_asks_for_usage() -> None:
    body = to_shape({"model": "m", "input": "hi", "stream": True}, "openai")
    assert body == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                    "stream_options": {"include_usage": True}}


def test_to_anthropic_moves_instructions_and_system_messages_into_system() -> None:
    assert to_shape(FULL, "anthropic") == {
        "model": "m", "max_tokens": 64, "temperature": 0.3, "system": "be brief\n\nno emojis",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                     {"role": "user", "content": "again"}],
    }


def test_to_anthropic_defaults_max_tokens() -> None:
    body = to_shape({"model": "m", "input": "hi", "stream": True}, "anthropic")
    assert body == {"model": "m", "max_tokens": 1024, "stream": True,
                    "messages": [{"role": "user", "content": "hi"}]}


def test_to_responses_maps_input_instructions_and_max_output_tokens() -> None:
    assert to_shape(FULL, "openai_responses") == {
        "model": "m", "input": FULL["input"], "instructions": "be brief", "max_output_tokens": 64,
        "temperature": 0.3,
    }
    assert to_shape({"model": "m", "input": "hi"}, "openai_responses") == {"model": "m", "input": "hi"}


@pytest.mark.parametrize("shape", SHAPES)
def test_every_translated_request_is_valid_in_its_target_shape(shape: str) -> None:
    for canonical in (FULL, {"model": "m", "input": "hi", "stream": True}):
        assert get_adapter(shape).validate_request(to_shape(canonical, shape)) == []


def test_to_shape_rejects_shapes_it_cannot_build() -> None:
    with pytest.raises(UnknownShape):
        to_shape(FULL, "embeddings")


@pytest.mark.parametrize(("shape", "response_id", "model"), [
    ("openai", "chatcmpl-1", "gpt-4o-mini-2024-07-18"), ("anthropic", "msg_01", "claude-sonnet-4-5"),
    ("openai_responses", "resp_1", "gpt-5"),
])
def test_from_shape_gives_the_canonical_response(shape: str, response_id: str, model: str) -> None:
    assert from_shape(shape, RESPONSES[shape]) == {
        "id": response_id, "model": model, "output_text": "Hello ✓", "finish_reason": "stop",
        "usage": USAGES[shape].to_dict(),
    }


@pytest.mark.parametrize(("shape", "response", "reason"), [
    ("openai", {"choices": [{"message": {"content": None}, "finish_reason": "tool_calls"}]}, "tool_calls"),
    ("openai", {"choices": [{"message": {"content": "x"}, "finish_reason": "length"}]}, "length"),
    ("anthropic", {"content": [], "stop_reason": "max_tokens"}, "length"),
    ("anthropic", {"content": [], "stop_reason": "tool_use"}, "tool_calls"),
    ("anthropic", {"content": [], "stop_reason": "pause_turn"}, "pause_turn"),
    ("openai_responses", {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}, "length"),
    ("openai_responses", {"status": "completed", "output": [{"type": "function_call"}]}, "tool_calls"),
])
def test_finish_reasons_are_mapped_to_the_canonical_vocabulary(shape: str, response: Any, reason: str) -> None:
    assert from_shape(shape, response)["finish_reason"] == reason


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("garbage", [None, [], "x", {"choices": "x", "content": 3, "output": [None, 1]}])
def test_from_shape_never_raises_on_odd_bodies(shape: str, garbage: Any) -> None:
    assert from_shape(shape, garbage)["output_text"] == ""


def events(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[len(b"data: "):]) for line in data.split(b"\n") if line.startswith(b"data: ")]


@pytest.mark.parametrize("shape", SHAPES)
def test_each_upstream_stream_becomes_canonical_deltas_then_done_at_every_split_point(shape: str) -> None:
    for parts in splits(STREAMS[shape])[::5]:
        translator = stream_translator(shape)
        out = b"".join(translator.translate(part) for part in parts) + translator.finish()
        got = events(out)
        assert "".join(e["text"] for e in got if e["type"] == "delta") == "Hello ✓"
        assert got[-1]["type"] == "done"
        assert got[-1]["usage"] == USAGES[shape].to_dict()
        assert got[-1]["finish_reason"] == "stop"
        assert [e["type"] for e in got].count("done") == 1
        assert translator.usage() == USAGES[shape] and translator.completed()


def test_a_stream_that_stops_early_ends_with_an_error_event() -> None:
    translator = stream_translator("openai")
    out = translator.translate(CHAT_STREAM[: CHAT_STREAM.index(b"data: [DONE]")]) + translator.finish()
    assert events(out)[-1] == {"type": "error", "message": "upstream stream ended before completion"}
    assert not translator.completed()


def test_an_upstream_error_event_becomes_a_canonical_error_event() -> None:
    translator = stream_translator("anthropic")
    out = translator.translate(sse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                                   named=True))
    assert events(out) == [{"type": "error", "message": "Overloaded"}]
    assert translator.finish() == b""


def test_a_failed_response_becomes_a_canonical_error_event() -> None:
    failed = {**RESPONSES_RESPONSE, "status": "failed", "error": {"code": "server_error", "message": "boom"}}
    translator = stream_translator("openai_responses")
    out = translator.translate(sse({"type": "response.failed", "response": failed}, named=True))
    assert events(out) == [{"type": "error", "message": "boom"}]


def test_the_done_event_carries_id_and_model() -> None:
    translator = stream_translator("anthropic")
    done = events(translator.translate(MESSAGES_STREAM))[-1]
    assert (done["id"], done["model"]) == ("msg_01", "claude-sonnet-4-5")


def test_the_stream_translator_rejects_unknown_shapes() -> None:
    with pytest.raises(UnknownShape):
        stream_translator("embeddings")


def test_the_translator_is_callable_with_an_empty_chunk_meaning_the_end() -> None:
    translate = stream_translator("openai")
    out = translate(CHAT_STREAM[:40]) + translate(CHAT_STREAM[40:]) + translate(b"")
    assert events(out)[-1]["type"] == "done"
    cut = stream_translator("openai")
    assert events(cut(CHAT_STREAM[:200]) + cut(b""))[-1]["type"] == "error"
