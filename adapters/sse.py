"""Incremental server-sent-events parsing, and the base of every shape's stream reader."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from adapters.base import Usage

_EOL = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True)
class SseEvent:
    event: str  # the `event:` field, "message" when absent
    data: str  # the `data:` lines joined with "\n"


class SseParser:
    """Turns byte chunks split anywhere (even inside a line, a CRLF or a UTF-8 character) into whole events."""

    def __init__(self) -> None:
        self._buffer = b""
        self._skip_lf = False  # the previous chunk ended with CR: a leading LF completes that CRLF
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Consume CHUNK; return the events it completed (an event ends at a blank line, per the SSE spec)."""
        if self._skip_lf and chunk:
            chunk = chunk[1:] if chunk.startswith(b"\n") else chunk
            self._skip_lf = False
        buffer = self._buffer + chunk
        events: list[SseEvent] = []
        start = 0
        while (match := _EOL.search(buffer, start)) is not None:
            event = self._line(buffer[start:match.start()].decode("utf-8", errors="replace"))
            if event is not None:
                events.append(event)
            start = match.end()
        self._buffer = buffer[start:]
        self._skip_lf = buffer.endswith(b"\r") and start == len(buffer)
        return events

    def _line(self, line: str) -> SseEvent | None:
        """Apply one line; a blank line dispatches the pending event if it has data."""
        if not line:
            event = SseEvent(self._event or "message", "\n".join(self._data)) if self._data else None
            self._event, self._data = "", []
            return event
        if line.startswith(":"):
            return None  # comment / keep-alive
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None


def decode_json(data: str) -> Any:
    """The JSON value of an event's data, or None when it is not JSON."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def encode_event(payload: dict[str, Any], event: str | None = None) -> bytes:
    """One SSE frame carrying PAYLOAD as JSON."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()


@dataclass
class StreamState:
    """What a shape reader learned from the events so far."""

    usage: Usage = field(default_factory=Usage)
    completed: bool = False  # the shape's own end-of-stream marker was seen
    response_id: str | None = None
    model: str | None = None
    finish_reason: str | None = None  # in the upstream's vocabulary
    error: str | None = None  # an error event's message


class SseStreamReader:
    """Base of the shape readers: SSE framing here, one-event interpretation in `on_event`; never raises."""

    def __init__(self) -> None:
        self._parser = SseParser()
        self.state = StreamState()

    def feed(self, chunk: bytes) -> None:
        """StreamUsageReader.feed: consume CHUNK."""
        self.read(chunk)

    def read(self, chunk: bytes) -> list[str]:
        """Consume CHUNK; return the output text deltas it carried, in order."""
        texts: list[str] = []
        for event in self._parser.feed(chunk):
            texts.extend(self.on_event(event.event, event.data))
        return texts

    def usage(self) -> Usage:
        """The usage reported so far (final once `completed()`)."""
        return self.state.usage

    def completed(self) -> bool:
        """True once the shape's end-of-stream marker was seen."""
        return self.state.completed

    def on_event(self, event: str, data: str) -> list[str]:
        """Update `state` from one event; return its output text deltas."""
        raise NotImplementedError


def text_of(value: Any) -> str | None:
    """VALUE when it is a string (for optional ids, models, reasons), else None."""
    return value if isinstance(value, str) else None
