"""Anthropic Messages (`POST /v1/messages`): validation, the `message` object and its SSE events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from devtools.fake_upstream.content import Turn
from devtools.fake_upstream.errors import InvalidRequest
from devtools.fake_upstream.wire import check_stream_flag, new_id, reply_pieces, sse_event

ROLES = ("user", "assistant")


def validate_messages(body: Mapping[str, Any]) -> None:
    """Refuse what the real endpoint refuses: no model, no `max_tokens`, no/empty `messages`, bad roles."""
    for name in ("model", "max_tokens", "messages"):
        if name not in body:
            raise InvalidRequest(f"{name}: Field required")
    if not isinstance(body["model"], str) or not body["model"]:
        raise InvalidRequest("model: Input should be a valid string")
    max_tokens = body["max_tokens"]
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidRequest("max_tokens: Input should be a valid integer greater than or equal to 1")
    messages = body["messages"]
    if not isinstance(messages, list):
        raise InvalidRequest("messages: Input should be a valid list")
    if not messages:
        raise InvalidRequest("messages: at least one message is required")
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in ROLES:
            raise InvalidRequest(f"messages.{index}.role: Input should be 'user' or 'assistant'")
        if "content" not in message:
            raise InvalidRequest(f"messages.{index}.content: Field required")
    check_stream_flag(body, "stream: Input should be a valid boolean")


def messages_usage(turn: Turn, *, output_tokens: int | None = None) -> dict[str, Any]:
    """The `usage` block of a message; `input_tokens` is the uncached part, as the real API reports it."""
    return {
        "input_tokens": turn.uncached_input_tokens,
        "cache_creation_input_tokens": turn.cache_creation_tokens,
        "cache_read_input_tokens": turn.cached_tokens,
        "output_tokens": turn.output_tokens if output_tokens is None else output_tokens,
        "service_tier": "standard",
    }


def _stop_reason(turn: Turn) -> str:
    """Why the fake model stopped."""
    return "max_tokens" if turn.truncated else "end_turn"


def message_object(body: Mapping[str, Any], turn: Turn, *, message_id: str | None = None,
                   final: bool = True) -> dict[str, Any]:
    """The `message` object: complete or, `final=False`, as `message_start` announces it."""
    return {
        "id": message_id or new_id("msg_01"),
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": [{"type": "text", "text": turn.reply}] if final else [],
        "stop_reason": _stop_reason(turn) if final else None,
        "stop_sequence": None,
        "usage": messages_usage(turn, output_tokens=None if final else 1),
    }


def messages_stream(body: Mapping[str, Any], turn: Turn) -> list[bytes]:
    """The SSE events of a streamed message, from `message_start` to `message_stop`."""
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"message": message_object(body, turn, final=False)}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("ping", {}),
    ]
    events += [("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": piece}})
               for piece in reply_pieces(turn.reply)]
    events += [
        ("content_block_stop", {"index": 0}),
        ("message_delta", {"delta": {"stop_reason": _stop_reason(turn), "stop_sequence": None},
                           "usage": {"output_tokens": turn.output_tokens}}),
        ("message_stop", {}),
    ]
    return [sse_event(kind, {"type": kind, **data}) for kind, data in events]
