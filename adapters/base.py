"""What every shape adapter provides; shared value types."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

EMBEDDINGS = "embeddings"  # live-only request shape, sent to OpenAI-family bindings
CANONICAL = "canonical"  # /v1/generate: live-only, always translated to the binding's shape


@dataclass(frozen=True)
class Usage:
    """Token counts of one call. `input_tokens` INCLUDES `cached_tokens` (OpenAI semantics) for every shape."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, int]:
        """The `usage` object of Relay's canonical responses and events."""
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cached_tokens": self.cached_tokens}


@dataclass(frozen=True)
class FieldError:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class StreamUsageReader(Protocol):
    """Fed the raw SSE bytes as they pass through; knows the usage once the stream is complete."""

    def feed(self, chunk: bytes) -> None: ...

    def usage(self) -> Usage: ...

    def completed(self) -> bool: ...


class ShapeAdapter(Protocol):
    """One wire shape: everything the engine, the batch checks, the estimate and the compatible APIs need of it
    (adapters/registry.py checks each of these when the adapter is registered)."""

    shape: str
    title: str  # what people call it, e.g. "OpenAI Chat Completions" (the console's submit form)
    provider: str  # gen_ai.provider.name of its calls: "openai" | "anthropic"
    upstream_path: str  # e.g. /v1/chat/completions (for an "openai" batch shape, also its OpenAI batch lines' url)
    output_limit_fields: tuple[str, ...]  # the members that limit an item's output (the estimate's bound, hard caps)
    choices_field: str | None  # the member that multiplies the output by its number of choices (OpenAI's `n`)
    canonical_markers: tuple[str, ...]  # canonical /v1/generate members this shape lacks: one in a body marks it
    bare_input: bool  # model + input alone is a valid body (so only an embeddings name or option marks embeddings)

    def validate_request(self, body: Any) -> list[FieldError]: ...

    @property
    def batch_item_type(self) -> type | None:
        """A msgspec type that accepts a subset of the bodies validate_request accepts (a batch's fast path)."""

    def auth_headers(self, secret: str) -> dict[str, str]: ...

    def extract_usage(self, body: Any) -> Usage: ...

    def stream_usage_reader(self) -> StreamUsageReader: ...

    def error_body(self, status: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
        """Its error object for STATUS with Relay's stable CODE (PARAM: the request parameter at fault, where the
        shape's errors name one)."""

    def caller_headers(self, headers: dict[str, str], now: datetime) -> dict[str, str]:
        """Relay's answer HEADERS under the names this shape's SDK reads (its rate-limit headers)."""

    def prepare_body(self, body: dict[str, Any], upstream_model: str) -> dict[str, Any]: ...

    def is_stream(self, body: Any) -> bool: ...


def count(value: Any) -> int:
    """A token count from untrusted JSON: a non-negative int, anything else (null, str, bool...) is 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not value.is_integer():
        return 0
    return max(int(value), 0)


def dig(obj: Any, *keys: str) -> Any:
    """obj[k1][k2]... through nested objects; None as soon as a level is missing or not an object."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def wants_stream(body: Any) -> bool:
    """True when the request body asks for a streamed (SSE) answer."""
    return isinstance(body, dict) and body.get("stream") is True
