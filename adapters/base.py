"""What every shape adapter provides; shared value types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

SHAPES = ("openai", "anthropic", "openai_responses")


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class FieldError:
    field: str
    message: str


class StreamUsageReader(Protocol):
    """Fed the raw SSE bytes as they pass through; knows the usage once the stream is complete."""

    def feed(self, chunk: bytes) -> None: ...

    def usage(self) -> Usage: ...


class ShapeAdapter(Protocol):
    shape: str
    upstream_path: str  # e.g. /v1/chat/completions

    def validate_request(self, body: Any) -> list[FieldError]: ...

    def auth_headers(self, secret: str) -> dict[str, str]: ...

    def extract_usage(self, body: Any) -> Usage: ...

    def stream_usage_reader(self) -> StreamUsageReader: ...

    def error_body(self, status: int, code: str, message: str) -> dict[str, Any]: ...
