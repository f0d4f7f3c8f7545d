"""OpenAI Chat Completions (`POST /v1/chat/completions`): validation, answer body and SSE chunks."""

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
    sse_data,
)

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
FINGERPRINT = "fp_fake_relay"


def validate_chat(body: Mapping[str, Any]) -> None:
    """Refuse what the real endpoint refuses: no model, no/empty `messages`, bad roles, non-boolean stream."""
    require_openai_model(body)
    messages = body.get("messages")
    if messages is None:
        raise missing_parameter("messages")
    if not isinstance(messages, list):
        raise InvalidRequest("Invalid type for 'messages': expected an array.", param="messages", code="invalid_type")
    if not messages:
        raise InvalidRequest("Invalid 'messages': empty array. Expected an array with minimum length 1, "
                             "but got an empty array instead.", param="messages", code="empty_array")
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in ROLES:
            raise InvalidRequest(f"Invalid value for 'messages[{index}].role': expected one of {', '.join(ROLES)}.",
                                 param=f"messages[{index}].role", code="invalid_value")
    check_stream_flag(body)


def chat_usage(turn: Turn) -> dict[str, Any]:
    """The `usage` block of a chat completion."""
    return {
        "prompt_tokens": turn.input_tokens,
        "completion_tokens": turn.output_tokens,
        "total_tokens": turn.total_tokens,
        "prompt_tokens_details": {"cached_tokens": turn.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": turn.reasoning_tokens, "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
    }


def chat_completion(body: Mapping[str, Any], turn: Turn) -> dict[str, Any]:
    """The whole (non-streamed) `chat.completion` object."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.reply, "refusal": None, "annotations": []}
    return {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body["model"],
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "length" if turn.truncated else "stop"}],
        "usage": chat_usage(turn),
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
    }


def chat_stream(body: Mapping[str, Any], turn: Turn) -> list[bytes]:
    """The SSE frames of a streamed completion, with a usage chunk when `stream_options.include_usage`."""
    options = body.get("stream_options")
    include_usage = isinstance(options, Mapping) and options.get("include_usage") is True
    head: dict[str, Any] = {"id": new_id("chatcmpl-"), "object": "chat.completion.chunk", "created": int(time.time()),
                            "model": body["model"], "service_tier": "default", "system_fingerprint": FINGERPRINT}
    if include_usage:
        head["usage"] = None

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return sse_data({**head, "choices": [choice]})

    frames = [chunk({"role": "assistant", "content": "", "refusal": None})]
    frames += [chunk({"content": piece}) for piece in reply_pieces(turn.reply)]
    frames.append(chunk({}, "length" if turn.truncated else "stop"))
    if include_usage:
        frames.append(sse_data({**head, "choices": [], "usage": chat_usage(turn)}))
    frames.append(sse_data("[DONE]"))
    return frames
