"""Anthropic Messages (shape `anthropic`, POST /v1/messages)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

import msgspec

from adapters import fields as f
from adapters.base import FieldError, ShapeAdapter, Usage, count, dig, wants_stream
from adapters.sse import SseStreamReader, decode_json, text_of

ANTHROPIC_VERSION = "2023-06-01"

_OPTIONAL: dict[str, f.Check] = {
    "system": f.content_parts, "stream": f.boolean, "temperature": f.number, "top_p": f.number,
    "top_k": f.integer, "stop_sequences": f.strings, "metadata": f.obj, "tools": f.array,
    "tool_choice": f.obj, "thinking": f.obj, "service_tier": f.string,
}


class MessagesMessage(msgspec.Struct):
    role: Literal["user", "assistant"]
    content: f.Content


class MessagesItem(msgspec.Struct):
    """A Messages body as a batch item: a subset of what validate_request accepts (see fields.Content)."""

    model: str  # non-blank, ASCII, NUL-free: checked by the caller, which keeps the name
    max_tokens: f.TokenLimit
    messages: Annotated[list[MessagesMessage], msgspec.Meta(min_length=1)]
    system: f.Content | None = None
    stream: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop_sequences: list[str] | None = None
    metadata: f.Object | None = None
    tools: f.Array | None = None
    tool_choice: f.Object | None = None
    thinking: f.Object | None = None
    service_tier: str | None = None

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
                403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                429: "rate_limit_error", 503: "overloaded_error", 504: "timeout_error", 529: "overloaded_error"}


def _check_message(name: str, message: dict[str, Any]) -> list[FieldError]:
    """One entry of `messages`: role user or assistant, content a string or a list of typed blocks."""
    errors: list[FieldError] = []
    if (problem := f.one_of("user", "assistant")(message.get("role"))) is not None:
        errors.append(FieldError(f"{name}.role", problem))
    if "content" not in message:
        errors.append(FieldError(f"{name}.content", "is required"))
    elif (problem := f.content_parts(message["content"])) is not None:
        errors.append(FieldError(f"{name}.content", problem))
    return errors


def messages_usage(usage: Any) -> Usage:
    """Usage from a Messages `usage` object.

    Anthropic's `input_tokens` excludes cache reads and cache writes, so Relay's input is
    input_tokens + cache_creation_input_tokens + cache_read_input_tokens (the whole prompt, as OpenAI counts it),
    and cached = cache_read_input_tokens. Cache writes are therefore priced at the plain input rate.
    """
    cached = count(dig(usage, "cache_read_input_tokens"))
    input_tokens = count(dig(usage, "input_tokens")) + count(dig(usage, "cache_creation_input_tokens")) + cached
    return Usage(input_tokens=input_tokens, output_tokens=count(dig(usage, "output_tokens")), cached_tokens=cached)


class MessagesStreamReader(SseStreamReader):
    """message_start (input + cache), content_block_delta (text), message_delta (output, cumulative), message_stop."""

    def __init__(self) -> None:
        super().__init__()
        self._usage: dict[str, Any] = {}  # latest value of each usage field (message_delta counts are cumulative)

    def _merge_usage(self, usage: Any) -> None:
        """Take the non-null fields of USAGE over the ones seen before."""
        if isinstance(usage, dict):
            self._usage.update({k: v for k, v in usage.items() if v is not None})
            self.state.usage = messages_usage(self._usage)

    def on_event(self, event: str, data: str) -> list[str]:
        """Interpret one event, by the `type` in its data (the `event:` line says the same)."""
        payload = decode_json(data)
        if not isinstance(payload, dict):
            return []
        kind = payload.get("type")
        if kind == "message_start":
            message = payload.get("message")
            self.state.response_id = text_of(dig(message, "id"))
            self.state.model = text_of(dig(message, "model"))
            self._merge_usage(dig(message, "usage"))
        elif kind == "content_block_delta":
            text = text_of(dig(payload, "delta", "text")) if dig(payload, "delta", "type") == "text_delta" else None
            return [text] if text else []
        elif kind == "message_delta":
            self._merge_usage(payload.get("usage"))
            self.state.finish_reason = text_of(dig(payload, "delta", "stop_reason")) or self.state.finish_reason
        elif kind == "message_stop":
            self.state.completed = True
        elif kind == "error":
            self.state.error = text_of(dig(payload, "error", "message")) or "upstream stream error"
        return []


class MessagesAdapter:
    """The `anthropic` shape."""

    shape = "anthropic"
    title = "Anthropic Messages"
    provider = "anthropic"
    batch_item_type = MessagesItem
    upstream_path = "/v1/messages"
    output_limit_fields: tuple[str, ...] = ("max_tokens",)
    choices_field: str | None = None
    canonical_markers: tuple[str, ...] = ()
    bare_input = False

    def validate_request(self, body: Any) -> list[FieldError]:
        """`model`, a positive `max_tokens`, a non-empty `messages` list of user/assistant turns, typed options."""
        required = {"model": f.non_empty_string, "max_tokens": f.positive_integer, "messages": f.array}
        errors = f.check_body(body, required, _OPTIONAL)
        messages = body.get("messages") if isinstance(body, dict) else None
        if isinstance(messages, list):
            if not messages:
                errors.append(FieldError("messages", "must not be empty"))
            errors.extend(f.check_items(messages, "messages", _check_message))
        return errors

    def auth_headers(self, secret: str) -> dict[str, str]:
        """x-api-key plus the API version Relay speaks; no key header for an empty secret."""
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if secret:
            headers["x-api-key"] = secret
        return headers

    def extract_usage(self, body: Any) -> Usage:
        """usage.input_tokens (+ cache writes + cache reads) / output_tokens / cache_read_input_tokens."""
        return messages_usage(dig(body, "usage"))

    def stream_usage_reader(self) -> MessagesStreamReader:
        """A reader for Messages event streams."""
        return MessagesStreamReader()

    def error_body(self, status: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
        """Anthropic's error envelope (the SDK picks its class from the status); Relay adds its stable `code`.
        Anthropic's errors name no parameter."""
        error_type = _ERROR_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": error_type, "message": message, "code": code}}

    def caller_headers(self, headers: dict[str, str], now: datetime) -> dict[str, str]:
        """Anthropic's rate-limit header names and reset times."""
        return ratelimit_headers(headers, now)

    def prepare_body(self, body: dict[str, Any], upstream_model: str) -> dict[str, Any]:
        """Pass-through with `model` rewritten (Messages streams always carry usage)."""
        return {**body, "model": upstream_model}

    def is_stream(self, body: Any) -> bool:
        """`stream: true`."""
        return wants_stream(body)


ADAPTER: ShapeAdapter = MessagesAdapter()


_RATELIMIT_NAMES = {  # Relay's OpenAI-style rate-limit headers → Anthropic's names
    "x-ratelimit-limit-requests": "anthropic-ratelimit-requests-limit",
    "x-ratelimit-remaining-requests": "anthropic-ratelimit-requests-remaining",
    "x-ratelimit-reset-requests": "anthropic-ratelimit-requests-reset",
    "x-ratelimit-limit-tokens": "anthropic-ratelimit-tokens-limit",
    "x-ratelimit-remaining-tokens": "anthropic-ratelimit-tokens-remaining",
    "x-ratelimit-reset-tokens": "anthropic-ratelimit-tokens-reset",
}


def ratelimit_headers(headers: dict[str, str], now: datetime) -> dict[str, str]:
    """HEADERS with Relay's `x-ratelimit-*` under Anthropic's `anthropic-ratelimit-*` names, a reset (`12s`) as the
    RFC 3339 time Anthropic gives; every other header as it is."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        renamed = _RATELIMIT_NAMES.get(name.lower())
        if renamed is None:
            out[name] = value
        elif renamed.endswith("-reset"):
            seconds = int(value.rstrip("s")) if value.rstrip("s").isdigit() else 0
            out[renamed] = (now + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
        else:
            out[renamed] = value
    return out
