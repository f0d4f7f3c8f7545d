"""Wire samples in the real upstream formats (bodies and SSE streams) shared by the adapter tests."""

from __future__ import annotations

import json
from typing import Any


def sse(*events: dict[str, Any], named: bool = False, done: bool = False) -> bytes:
    """Frame EVENTS as SSE (`event:` lines from their `type` when NAMED; a final `[DONE]` when DONE)."""
    frames = []
    for event in events:
        head = f"event: {event['type']}\n" if named else ""
        frames.append(f"{head}data: {json.dumps(event, ensure_ascii=False)}\n\n")
    if done:
        frames.append("data: [DONE]\n\n")
    return "".join(frames).encode()


CHAT_USAGE = {
    "prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
    "prompt_tokens_details": {"cached_tokens": 4, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
}

CHAT_RESPONSE = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1730000000, "model": "gpt-4o-mini-2024-07-18",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello ✓", "refusal": None},
                 "logprobs": None, "finish_reason": "stop"}],
    "usage": CHAT_USAGE, "system_fingerprint": "fp_1",
}


def _chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1730000000,
            "model": "gpt-4o-mini-2024-07-18", "system_fingerprint": "fp_1", "choices": choices, "usage": usage}


def _delta(delta: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
    return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]


CHAT_STREAM = sse(
    _chunk(_delta({"role": "assistant", "content": "", "refusal": None})),
    _chunk(_delta({"content": "Hel"})),
    _chunk(_delta({"content": "lo ✓"})),
    _chunk(_delta({}, "stop")),
    _chunk([], CHAT_USAGE),
    done=True,
)

RESPONSES_USAGE = {
    "input_tokens": 20, "input_tokens_details": {"cached_tokens": 8},
    "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 25,
}

_MESSAGE_ITEM = {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
                 "content": [{"type": "output_text", "annotations": [], "text": "Hello ✓"}]}

RESPONSES_RESPONSE = {
    "id": "resp_1", "object": "response", "created_at": 1730000000, "status": "completed", "model": "gpt-5",
    "output": [{"id": "rs_1", "type": "reasoning", "summary": []}, _MESSAGE_ITEM],
    "incomplete_details": None, "error": None, "usage": RESPONSES_USAGE,
}

_IN_PROGRESS = {**RESPONSES_RESPONSE, "status": "in_progress", "output": [], "usage": None}
_TEXT_EVENT = {"item_id": "msg_1", "output_index": 1, "content_index": 0}

RESPONSES_STREAM = sse(
    {"type": "response.created", "sequence_number": 0, "response": _IN_PROGRESS},
    {"type": "response.in_progress", "sequence_number": 1, "response": _IN_PROGRESS},
    {"type": "response.output_item.added", "sequence_number": 2, "output_index": 1,
     "item": {**_MESSAGE_ITEM, "status": "in_progress", "content": []}},
    {"type": "response.content_part.added", "sequence_number": 3, **_TEXT_EVENT,
     "part": {"type": "output_text", "annotations": [], "text": ""}},
    {"type": "response.output_text.delta", "sequence_number": 4, **_TEXT_EVENT, "delta": "Hel", "logprobs": []},
    {"type": "response.output_text.delta", "sequence_number": 5, **_TEXT_EVENT, "delta": "lo ✓", "logprobs": []},
    {"type": "response.output_text.done", "sequence_number": 6, **_TEXT_EVENT, "text": "Hello ✓", "logprobs": []},
    {"type": "response.output_item.done", "sequence_number": 7, "output_index": 1, "item": _MESSAGE_ITEM},
    {"type": "response.completed", "sequence_number": 8, "response": RESPONSES_RESPONSE},
    named=True,
)

MESSAGES_RESPONSE = {
    "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
    "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"}, {"type": "text", "text": "Hello ✓"}],
    "stop_reason": "end_turn", "stop_sequence": None,
    "usage": {"input_tokens": 25, "cache_creation_input_tokens": 10, "cache_read_input_tokens": 100,
              "output_tokens": 15, "service_tier": "standard"},
}

MESSAGES_STREAM = sse(
    {"type": "message_start", "message": {**MESSAGES_RESPONSE, "content": [], "stop_reason": None,
                                          "usage": {**MESSAGES_RESPONSE["usage"], "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo ✓"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
     "usage": {"output_tokens": 15}},
    {"type": "message_stop"},
    named=True,
)

EMBEDDINGS_RESPONSE = {
    "object": "list", "model": "text-embedding-3-small",
    "data": [{"object": "embedding", "index": 0, "embedding": [0.1, -0.2]}],
    "usage": {"prompt_tokens": 8, "total_tokens": 8},
}


def splits(data: bytes) -> list[list[bytes]]:
    """DATA cut in two at every point, plus one byte at a time."""
    cuts = [[data[:i], data[i:]] for i in range(len(data) + 1)]
    return [*cuts, [data[i:i + 1] for i in range(len(data))]]
