"""Embeddings adapter (request shape `embeddings`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapters.base import Usage
from adapters.embeddings import ADAPTER
from tests.adapters.samples import EMBEDDINGS_RESPONSE, splits


@pytest.mark.parametrize("value", ["hi", ["a", "b"], [1, 2, 3], [[1, 2], [3]]])
def test_every_documented_input_form_is_valid(value: Any) -> None:
    assert ADAPTER.validate_request({"model": "text-embedding-3-small", "input": value, "dimensions": 8}) == []


@pytest.mark.parametrize(("body", "field"), [
    ({"input": "hi"}, "model"),
    ({"model": "m"}, "input"),
    ({"model": "m", "input": ""}, "input"),
    ({"model": "m", "input": []}, "input"),
    ({"model": "m", "input": [[]]}, "input"),
    ({"model": "m", "input": ["a", 1]}, "input"),
    ({"model": "m", "input": {"text": "x"}}, "input"),
    ({"model": "m", "input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"model": "m", "input": "x", "stream": True}, "stream"),
])
def test_an_invalid_embeddings_request_names_the_bad_field(body: Any, field: str) -> None:
    assert field in {e.field for e in ADAPTER.validate_request(body)}


def test_auth_is_a_bearer_token() -> None:
    assert ADAPTER.auth_headers("sk-1") == {"Authorization": "Bearer sk-1"}


def test_usage_is_prompt_tokens_as_input() -> None:
    assert ADAPTER.extract_usage(EMBEDDINGS_RESPONSE) == Usage(input_tokens=8)


def test_the_whole_body_reader_finds_the_usage_at_every_split_point() -> None:
    body = json.dumps(EMBEDDINGS_RESPONSE).encode()
    for parts in splits(body)[::7]:
        reader = ADAPTER.stream_usage_reader()
        for part in parts:
            reader.feed(part)
        assert reader.usage() == Usage(input_tokens=8)
        assert reader.completed()


def test_a_truncated_body_is_not_completed() -> None:
    reader = ADAPTER.stream_usage_reader()
    reader.feed(json.dumps(EMBEDDINGS_RESPONSE).encode()[:-1])
    assert not reader.completed()
    assert reader.usage() == Usage()


def test_embeddings_never_stream_and_only_the_model_is_rewritten() -> None:
    body = {"model": "m", "input": "x"}
    assert not ADAPTER.is_stream({**body, "stream": True})
    assert ADAPTER.prepare_body(body, "text-embedding-3-small") == {"model": "text-embedding-3-small", "input": "x"}


def test_error_bodies_use_the_openai_envelope() -> None:
    assert ADAPTER.error_body(400, "bad", "m")["error"]["type"] == "invalid_request_error"
