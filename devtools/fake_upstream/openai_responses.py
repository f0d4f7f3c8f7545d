"""OpenAI Responses (`POST /v1/responses`): validation, the `response` object and its SSE events."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from devtools.fake_upstream.content import Turn
from devtools.fake_upstream.errors import InvalidRequest
from devtools.fake_upstream.wire import (
    check_stream_flag,
    missing_parameter,
    new_id,
    reply_pieces,
    require_openai_model,
    sse_event,
)

CHAT_ONLY_FIELDS = ("messages", "max_tokens", "max_completion_tokens", "stream_options", "n")


def validate_responses(body: Mapping[str, Any]) -> None:
    """Refuse what the real endpoint refuses: no model, Chat-only fields, no/invalid `input`."""
    require_openai_model(body)
    for name in CHAT_ONLY_FIELDS:
        if name in body:
            raise InvalidRequest(f"Unknown parameter: '{name}'.", param=name, code="unknown_parameter")
    items = body.get("input")
    if items is None and not any(body.get(name) for name in ("previous_response_id", "prompt", "conversation")):
        raise missing_parameter("input")
    if items is not None and not isinstance(items, str | list):
        raise InvalidRequest("Invalid type for 'input': expected a string or an array of input items.",
                             param="input", code="invalid_type")
    for index, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, Mapping):
            raise InvalidRequest(f"Invalid type for 'input[{index}]': expected an object.", param=f"input[{index}]",
                                 code="invalid_type")
    check_stream_flag(body)


def responses_usage(turn: Turn) -> dict[str, Any]:
    """The `usage` block of a response."""
    return {
        "input_tokens": turn.input_tokens,
        "input_tokens_details": {"cached_tokens": turn.cached_tokens, "cache_write_tokens": turn.cache_creation_tokens},
        "output_tokens": turn.output_tokens,
        "output_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
        "total_tokens": turn.total_tokens,
    }


def _message_item(item_id: str, text: str | None) -> dict[str, Any]:
    """The assistant `message` output item; `text=None` gives the empty, in-progress item."""
    content = [] if text is None else [_text_part(text)]
    return {"id": item_id, "type": "message", "status": "in_progress" if text is None else "completed",
            "role": "assistant", "content": content}


def _text_part(text: str) -> dict[str, Any]:
    """An `output_text` content part."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def response_object(body: Mapping[str, Any], turn: Turn, *, response_id: str, item_id: str,
                    final: bool = True) -> dict[str, Any]:
    """The `response` object: complete (with output and usage) or, `final=False`, as first announced."""
    status = ("incomplete" if turn.truncated else "completed") if final else "in_progress"
    return {
        "id": response_id, "object": "response", "created_at": int(time.time()), "status": status,
        "background": False, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if final and turn.truncated else None,
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": None, "model": body["model"],
        "output": [_message_item(item_id, turn.reply)] if final else [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None}, "service_tier": "default", "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0), "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools", []),
        "top_p": body.get("top_p", 1.0), "truncation": "disabled",
        "usage": responses_usage(turn) if final else None, "user": None, "metadata": body.get("metadata") or {},
    }


def responses_stream(body: Mapping[str, Any], turn: Turn) -> list[bytes]:
    """The SSE events of a streamed response, from `response.created` to `response.completed` (or `.incomplete`)."""
    response_id, item_id = new_id("resp_"), new_id("msg_")
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    pending = response_object(body, turn, response_id=response_id, item_id=item_id, final=False)
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": pending}),
        ("response.in_progress", {"response": pending}),
        ("response.output_item.added", {"output_index": 0, "item": _message_item(item_id, None)}),
        ("response.content_part.added", {**where, "part": _text_part("")}),
    ]
    events += [("response.output_text.delta", {**where, "delta": piece, "logprobs": []})
               for piece in reply_pieces(turn.reply)]
    events += [
        ("response.output_text.done", {**where, "text": turn.reply, "logprobs": []}),
        ("response.content_part.done", {**where, "part": _text_part(turn.reply)}),
        ("response.output_item.done", {"output_index": 0, "item": _message_item(item_id, turn.reply)}),
        ("response.incomplete" if turn.truncated else "response.completed",
         {"response": response_object(body, turn, response_id=response_id, item_id=item_id)}),
    ]
    return [sse_event(kind, {"type": kind, "sequence_number": seq, **data}) for seq, (kind, data) in enumerate(events)]
