"""Parsing a batch body in one pass: raw item bytes, member order, limits and item validation (no services)."""

from __future__ import annotations

import json

import pytest

from app.batches.errors import BatchTooLarge, InvalidBatch, InvalidJson
from app.batches.intake import parse_batch

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def _parse(body: object, max_items: int = 100) -> object:
    return parse_batch(json.dumps(body).encode(), max_items=max_items)


def test_item_bodies_are_slices_of_the_original_bytes_even_with_non_ascii_text() -> None:
    raw = ('{"requests": [ {"model": "m1", "messages": [{"role": "user", "content": "café ☕"}]} ,\n'
           '{"model":"m2","messages":[{"role":"user","content":"x"}]}], "shape": "openai"}').encode()
    parsed = parse_batch(raw, max_items=10)
    bodies = list(parsed.item_bodies())
    assert bodies[0] == '{"model": "m1", "messages": [{"role": "user", "content": "café ☕"}]}'.encode()
    assert bodies[1] == b'{"model":"m2","messages":[{"role":"user","content":"x"}]}'
    assert parsed.models == ["m1", "m2"] and parsed.shape == "openai"


def test_the_shape_may_come_after_the_requests() -> None:
    with pytest.raises(InvalidBatch) as caught:
        parse_batch(b'{"requests": [{"model": "m"}], "shape": "openai"}', max_items=10)
    assert caught.value.details == [{"idx": 0, "field": "messages", "message": "is required"}]


def test_a_repeated_requests_member_replaces_the_first_like_json_loads() -> None:
    parsed = parse_batch(b'{"shape": "openai", "requests": [1, 2], "requests": [' + json.dumps(CHAT).encode()
                         + b"]}", max_items=10)
    assert parsed.count == 1


def test_the_item_limit_stops_the_scan() -> None:
    with pytest.raises(BatchTooLarge):
        _parse({"shape": "openai", "requests": [CHAT] * 4}, max_items=3)


@pytest.mark.parametrize("raw", [b"", b"   ", b"{", b'{"shape": "openai",}', b'{"a": 1} {}', b"\xc3\x28"])
def test_malformed_bodies_are_invalid_json(raw: bytes) -> None:
    with pytest.raises(InvalidJson):
        parse_batch(raw, max_items=10)


def test_every_bad_item_is_reported_but_only_up_to_the_cap() -> None:
    with pytest.raises(InvalidBatch) as caught:
        _parse({"shape": "openai", "requests": [{"model": "m"}] * 1500}, max_items=2000)
    assert len(caught.value.details) == 1000
    assert caught.value.message == ("invalid batch: requests[0].messages: is required"
                                    " (and more: the first 1000 are listed)")
