"""Property tests: no adapter function raises on any JSON value or any byte stream."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters import ADAPTERS
from adapters.base import FieldError, Usage
from adapters.canonical import from_shape, stream_translator, validate_canonical
from adapters.sse import SseParser

SHAPES = ("openai", "anthropic", "openai_responses")
KEYS = ("model", "messages", "input", "role", "content", "max_tokens", "stream", "temperature", "usage", "type",
        "tool_calls", "tool_call_id", "stream_options", "include_usage", "system", "instructions", "choices")

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=4), inner,
                                                                max_size=5),
    max_leaves=25,
)
bodies = st.fixed_dictionaries({}, optional={key: json_values for key in KEYS}) | json_values
quick = settings(max_examples=200, database=None, deadline=None)


@quick
@given(body=bodies)
def test_validation_never_raises_and_returns_field_errors(body: Any) -> None:
    for adapter in ADAPTERS.values():
        errors = adapter.validate_request(body)
        assert all(isinstance(e, FieldError) for e in errors)
    assert all(isinstance(e, FieldError) for e in validate_canonical(body))


@quick
@given(body=bodies)
def test_usage_extraction_and_canonical_responses_never_raise(body: Any) -> None:
    for adapter in ADAPTERS.values():
        usage = adapter.extract_usage(body)
        assert min(usage.input_tokens, usage.output_tokens, usage.cached_tokens) >= 0
    for shape in SHAPES:
        from_shape(shape, body)


chat_messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant"]),
                                                "content": st.text(max_size=5)}), min_size=1, max_size=3)
chat_bodies = st.fixed_dictionaries(
    {"model": st.text(min_size=1, max_size=5).filter(str.strip), "messages": chat_messages},
    optional={"stream": st.booleans(), "stream_options": st.dictionaries(st.text(max_size=4), json_values),
              "x_future": json_values},
)


@quick
@given(body=chat_bodies, model=st.text(min_size=1, max_size=8))
def test_prepare_body_changes_only_model_and_stream_options_and_a_stream_always_counts_usage(
        body: dict[str, Any], model: str) -> None:
    adapter = ADAPTERS["openai"]
    prepared = adapter.prepare_body(body, model)
    assert prepared["model"] == model
    assert {k: v for k, v in prepared.items() if k not in ("model", "stream_options")} == {
        k: v for k, v in body.items() if k not in ("model", "stream_options")}
    if body.get("stream") is True:
        assert prepared["stream_options"]["include_usage"] is True
    else:
        assert prepared.get("stream_options") == body.get("stream_options")


sse_bytes = st.lists(
    st.binary(max_size=30) | st.sampled_from([b"data: ", b"\n\n", b"\r\n", b"data: [DONE]\n\n", b"event: x\n",
                                              b'data: {"type":"message_start","message":{"usage":7}}\n\n',
                                              b'data: {"usage":[1],"choices":[null,{"index":0}]}\n\n']),
    max_size=20,
)


@quick
@given(chunks=sse_bytes)
def test_stream_readers_and_translators_never_raise_on_any_bytes(chunks: list[bytes]) -> None:
    readers = [adapter.stream_usage_reader() for adapter in ADAPTERS.values()]
    translators = [stream_translator(shape) for shape in SHAPES]
    for chunk in chunks:
        for reader in readers:
            reader.feed(chunk)
        for translator in translators:
            translator.translate(chunk)
    for reader in readers:
        reader.usage()
        reader.completed()
    for translator in translators:
        translator.finish()


@quick
@given(data=st.binary(max_size=200), cut=st.integers(min_value=0, max_value=200))
def test_the_sse_parser_gives_the_same_events_however_the_bytes_are_cut(data: bytes, cut: int) -> None:
    whole = SseParser().feed(data)
    parser = SseParser()
    assert parser.feed(data[:cut]) + parser.feed(data[cut:]) == whole


@pytest.mark.parametrize("depth", [10_000])
def test_deeply_nested_json_in_a_stream_is_skipped_and_counts_no_usage(depth: int) -> None:
    for adapter in ADAPTERS.values():
        reader = adapter.stream_usage_reader()
        reader.feed(b"data: " + b"[" * depth + b"\n\n")
        assert reader.usage() == Usage()
