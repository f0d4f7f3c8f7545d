"""OpenAI Responses (shape `openai_responses`, POST /v1/responses)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from adapters import fields as f
from adapters.base import FieldError, ShapeAdapter, Usage, count, dig, wants_stream
from adapters.openai import bearer_headers, openai_error_body
from adapters.sse import SseStreamReader, decode_json, text_of

_ROLES = ("user", "assistant", "system", "developer")
_TERMINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")

_OPTIONAL: dict[str, f.Check] = {
    "instructions": f.string, "max_output_tokens": f.positive_integer, "stream": f.boolean,
    "temperature": f.number, "top_p": f.number, "tools": f.array, "tool_choice": f.string_or_object,
    "store": f.boolean, "metadata": f.obj, "previous_response_id": f.string, "text": f.obj, "reasoning": f.obj,
    "parallel_tool_calls": f.boolean, "truncation": f.string, "user": f.string, "include": f.array,
    "background": f.boolean, "service_tier": f.string, "stream_options": f.obj,
}


class ResponsesMessage(msgspec.Struct):
    role: Literal["user", "assistant", "system", "developer"]
    content: f.Content


class ResponsesItem(msgspec.Struct):
    """A Responses body as a batch item: a subset of what validate_request accepts (input items are messages), and
    without the members that could make it an embeddings or /v1/generate body instead (see batches/validation)."""

    model: str  # non-blank, ASCII, NUL-free: checked by the caller, which keeps the name
    input: str | list[ResponsesMessage]
    instructions: str | None = None
    max_output_tokens: f.TokenLimit | None = None
    stream: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    tools: f.Array | None = None
    tool_choice: f.StringOrObject | None = None
    store: bool | None = None
    metadata: f.Object | None = None
    previous_response_id: str | None = None
    text: f.Object | None = None
    reasoning: f.Object | None = None
    parallel_tool_calls: bool | None = None
    truncation: str | None = None
    user: str | None = None
    include: f.Array | None = None
    background: bool | None = None
    service_tier: str | None = None
    stream_options: f.Object | None = None
    max_tokens: f.Absent = msgspec.UNSET
    encoding_format: f.Absent = msgspec.UNSET
    dimensions: f.Absent = msgspec.UNSET


def _check_input_item(name: str, item: dict[str, Any]) -> list[FieldError]:
    """One `input` item: messages (items with a `role`) need a known role and content; other items pass."""
    if "role" not in item:
        return [] if isinstance(item.get("type"), str) else [FieldError(name, "must have a `role` or a `type`")]
    errors: list[FieldError] = []
    if (problem := f.one_of(*_ROLES)(item.get("role"))) is not None:
        errors.append(FieldError(f"{name}.role", problem))
    if (problem := f.content_parts(item.get("content"))) is not None:
        errors.append(FieldError(f"{name}.content", problem))
    return errors


def responses_usage(usage: Any) -> Usage:
    """Usage from a Responses `usage` object (input_tokens already includes the cached ones)."""
    return Usage(
        input_tokens=count(dig(usage, "input_tokens")),
        output_tokens=count(dig(usage, "output_tokens")),
        cached_tokens=count(dig(usage, "input_tokens_details", "cached_tokens")),
    )


def responses_finish_reason(response: Any) -> str | None:
    """Why a Response ended: `function_call`, the incomplete_details reason, or its status."""
    output = dig(response, "output")
    if isinstance(output, list) and any(dig(item, "type") == "function_call" for item in output):
        return "function_call"
    return text_of(dig(response, "incomplete_details", "reason")) or text_of(dig(response, "status"))


class ResponsesStreamReader(SseStreamReader):
    """Responses events: output_text deltas; usage in the terminal response.completed/incomplete/failed event."""

    def on_event(self, event: str, data: str) -> list[str]:
        """Interpret one event, by the `type` in its data (the `event:` line says the same)."""
        payload = decode_json(data)
        if not isinstance(payload, dict):
            return []
        kind = payload.get("type")
        response = payload.get("response")
        if isinstance(response, dict):
            self.state.response_id = text_of(response.get("id")) or self.state.response_id
            self.state.model = text_of(response.get("model")) or self.state.model
        if kind == "response.output_text.delta":
            text = text_of(payload.get("delta"))
            return [text] if text else []
        if kind in _TERMINAL_EVENTS:
            self.state.completed = True
            self.state.usage = responses_usage(dig(response, "usage"))
            self.state.finish_reason = responses_finish_reason(response)
            if kind == "response.failed":
                self.state.error = text_of(dig(response, "error", "message")) or "upstream response failed"
        elif kind == "error":
            self.state.error = text_of(payload.get("message")) or "upstream stream error"
        return []


class ResponsesAdapter:
    """The `openai_responses` shape."""

    shape = "openai_responses"
    title = "OpenAI Responses"
    provider = "openai"
    batch_item_type = ResponsesItem
    upstream_path = "/v1/responses"
    output_limit_fields: tuple[str, ...] = ("max_output_tokens",)
    choices_field: str | None = None
    canonical_markers: tuple[str, ...] = ("max_tokens",)  # Responses calls it max_output_tokens
    bare_input = True  # model + input is also an embeddings body

    def validate_request(self, body: Any) -> list[FieldError]:
        """`model`, `input` as a string or a list of items, and well-typed common options."""
        errors = f.check_body(body, {"model": f.non_empty_string, "input": _string_or_list}, _OPTIONAL)
        items = body.get("input") if isinstance(body, dict) else None
        if isinstance(items, list):
            errors.extend(f.check_items(items, "input", _check_input_item))
        return errors

    def auth_headers(self, secret: str) -> dict[str, str]:
        """Authorization: Bearer."""
        return bearer_headers(secret)

    def extract_usage(self, body: Any) -> Usage:
        """usage.input_tokens / output_tokens / input_tokens_details.cached_tokens."""
        return responses_usage(dig(body, "usage"))

    def stream_usage_reader(self) -> ResponsesStreamReader:
        """A reader for Responses event streams."""
        return ResponsesStreamReader()

    def error_body(self, status: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
        """OpenAI's error envelope."""
        return openai_error_body(status, code, message, param)

    def caller_headers(self, headers: dict[str, str], now: datetime) -> dict[str, str]:
        """Relay's names are OpenAI's (`x-ratelimit-*`)."""
        return headers

    def prepare_body(self, body: dict[str, Any], upstream_model: str) -> dict[str, Any]:
        """Pass-through with `model` rewritten (Responses streams always end with usage)."""
        return {**body, "model": upstream_model}

    def is_stream(self, body: Any) -> bool:
        """`stream: true`."""
        return wants_stream(body)


def _string_or_list(value: Any) -> str | None:
    """`input`: a string or a list of items."""
    return None if isinstance(value, str | list) else "must be a string or an array of input items"


ADAPTER: ShapeAdapter = ResponsesAdapter()
