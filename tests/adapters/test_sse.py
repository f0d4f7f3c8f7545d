"""The incremental SSE parser shared by every stream reader."""

from __future__ import annotations

from adapters.sse import SseEvent, SseParser
from tests.adapters.samples import splits

STREAM = "event: a\ndata: {\"x\": \"é✓\"}\n\n: keep-alive\n\ndata: line1\ndata:line2\n\nid: 3\nretry: 5\ndata: z\n\n"
EXPECTED = [SseEvent("a", '{"x": "é✓"}'), SseEvent("message", "line1\nline2"), SseEvent("message", "z")]


def parse(parts: list[bytes]) -> list[SseEvent]:
    parser = SseParser()
    return [event for part in parts for event in parser.feed(part)]


def test_events_are_the_same_wherever_the_bytes_are_split() -> None:
    data = STREAM.encode()
    for parts in splits(data):
        assert parse(parts) == EXPECTED


def test_crlf_and_lone_cr_line_endings_are_both_understood_even_split_between_chunks() -> None:
    for ending in (b"\r\n", b"\r"):
        data = STREAM.encode().replace(b"\n", ending)
        for parts in splits(data):
            assert parse(parts) == EXPECTED


def test_comments_and_events_without_data_are_not_dispatched() -> None:
    assert parse([b": ping\n\nevent: empty\n\n"]) == []


def test_an_event_without_its_closing_blank_line_is_not_dispatched_yet() -> None:
    parser = SseParser()
    assert parser.feed(b"data: [DONE]\n") == []
    assert parser.feed(b"\n") == [SseEvent("message", "[DONE]")]


def test_invalid_utf8_is_replaced_not_raised() -> None:
    assert parse([b"data: \xff\xfe\n\n"]) == [SseEvent("message", "\ufffd\ufffd")]
