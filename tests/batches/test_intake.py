"""Parsing a batch body in one pass: raw item bytes, member order, limits and item validation (no services)."""

from __future__ import annotations

import json

import pytest

from app.batches.errors import BatchItemTooLarge, BatchTooLarge, InvalidBatch
from app.batches.intake import parse_batch
from app.errors import InvalidJson

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


def _chat_line(text: str) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]}, ensure_ascii=False).encode()


def _body(*items: bytes) -> bytes:
    return b'{"shape": "openai", "requests": [' + b", ".join(items) + b"]}"


@pytest.mark.parametrize("where", [0, 3, 9])
def test_an_item_longer_than_the_item_limit_is_a_413_naming_it(where: int) -> None:
    items = [_chat_line(f"item {i}") for i in range(10)]
    items[where] = _chat_line("x" * 1000)
    with pytest.raises(BatchItemTooLarge) as caught:
        parse_batch(_body(*items), max_items=100, max_item_bytes=500)
    assert caught.value.status == 413 and caught.value.message.startswith(f"requests[{where}] holds more than 500")


def test_items_within_the_limit_parse_alike_in_a_body_many_times_the_limit() -> None:
    items = [_chat_line(f"item {i} " + "y" * (i % 37) + "é" * (i % 3)) for i in range(400)]
    parsed = parse_batch(_body(*items), max_items=1000, max_item_bytes=120)
    assert list(parsed.item_bodies()) == items
    assert parse_batch(_body(*items), max_items=1000).count == 400


def test_the_item_limit_counts_bytes_not_characters() -> None:
    small, wide = _chat_line("a"), _chat_line("€" * 60)  # 60 characters, 180 bytes of text
    with pytest.raises(BatchItemTooLarge):
        parse_batch(_body(small, wide, small), max_items=10, max_item_bytes=150)
    assert parse_batch(_body(small, wide, small), max_items=10, max_item_bytes=300).count == 3


def test_a_malformed_item_in_a_large_body_is_invalid_json_at_its_place() -> None:
    items = [_chat_line(f"item {i}") for i in range(50)]
    items[30] = b'{"model": "m", "messages": [}'
    with pytest.raises(InvalidJson) as caught:
        parse_batch(_body(*items), max_items=100, max_item_bytes=100)
    assert "line 1 column" in caught.value.message


@pytest.mark.parametrize("raw", [b"NaN", b"Infinity", b"-Infinity", b"1e999", b"1" * 4301])
def test_non_finite_numbers_and_4301_digit_integers_are_invalid_json_anywhere(raw: bytes) -> None:
    item = b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": %s}' % raw
    padding = [_chat_line("x")] * 200  # a body larger than the item limit: items are decoded in windows
    for body in (_body(item), _body(*padding, item, *padding),
                 b'{"shape": "openai", "metadata": {"n": %s}, "requests": [%s]}' % (raw, _chat_line("x"))):
        for limit in (None, 5000):
            with pytest.raises(InvalidJson):
                parse_batch(body, max_items=1000, max_item_bytes=limit)


def test_an_item_at_the_end_of_a_window_is_never_taken_for_a_shorter_one() -> None:
    head, first, limit = b'{"shape": "openai", "requests": [', _chat_line("first") + b", ", 200
    window_end = len(head) + limit + 1  # the first window: LIMIT + 1 characters from the first item
    tail = b", ".join([_chat_line(f"item {i}") for i in range(10)]) + b"]}"
    for item in (b"1234567890123456789", b'"a string item"', b"[1, 2, 3]"):
        for k in range(1, len(item)):  # the window ends K characters into the item
            body = head + first + b" " * (window_end - k - len(head + first)) + item + b", " + tail
            with pytest.raises(InvalidBatch) as caught:
                parse_batch(body, max_items=100, max_item_bytes=limit)
            assert caught.value.details[0] == {"idx": 1, "field": "", "message": NOT_AN_OBJECT}


NOT_AN_OBJECT = "must be a JSON object (a request body)"


def test_the_closed_item_types_refuse_unknown_members_at_every_level_and_decode_raw_values() -> None:
    import msgspec

    from adapters.fields import closed_type
    from adapters.openai import ChatItem

    closed = msgspec.json.Decoder(closed_type(ChatItem))
    item = closed.decode(b'{"model":"m","messages":[{"role":"tool","content":[{"type":"text","text":"t"}],'
                         b'"tool_call_id":"c"}],"tools":[{"type":"function","n":1.5}]}')
    assert item.messages[0].tool_call_id == "c" and item.messages[0].content[0].text == "t"
    assert item.tools == [{"type": "function", "n": 1.5}]
    for extra in (b'{"model":"m","messages":[{"role":"user","content":"x"}],"x":1}',
                  b'{"model":"m","messages":[{"role":"user","content":"x","name":"a"}]}',
                  b'{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}'):
        with pytest.raises(msgspec.ValidationError, match="unknown field"):
            closed.decode(extra)
    with pytest.raises(msgspec.DecodeError):
        closed.decode(b'{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[1e999]}')
    with pytest.raises(msgspec.ValidationError, match="Invalid value 'nobody'"):
        closed.decode(b'{"model":"m","messages":[{"role":"nobody","content":"x"}]}')
