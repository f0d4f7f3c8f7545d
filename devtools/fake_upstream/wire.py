"""Wire helpers shared by the fake APIs: ids, SSE framing, reply chunking and common body checks."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

from devtools.fake_upstream.errors import InvalidRequest

_PIECE = re.compile(r"\s*\S+\s*|\s+")
WORDS_PER_CHUNK = 2


def new_id(prefix: str) -> str:
    """A provider-looking id: `prefix` followed by 24 hex characters."""
    return prefix + uuid.uuid4().hex[:24]


def sse_data(payload: Mapping[str, Any] | str) -> bytes:
    """One data-only SSE frame (OpenAI Chat Completions style)."""
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n".encode()


def sse_event(event: str, payload: Mapping[str, Any]) -> bytes:
    """One named SSE frame (Responses and Anthropic style)."""
    return f"event: {event}\ndata: {json.dumps(payload)}\n\n".encode()


def reply_pieces(text: str) -> list[str]:
    """The reply split into streamed deltas of a couple of words each; joined they give `text` back."""
    words = _PIECE.findall(text)
    return ["".join(words[i:i + WORDS_PER_CHUNK]) for i in range(0, len(words), WORDS_PER_CHUNK)] or [text]


def require_openai_model(body: Mapping[str, Any]) -> str:
    """The request's `model`, or OpenAI's 400 when it is missing."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("you must provide a model parameter", param="model",
                             code=None if model is None else "invalid_type")
    return model


def check_stream_flag(body: Mapping[str, Any], message: str = "Invalid type for 'stream': expected a boolean.") -> bool:
    """The `stream` flag (false when absent), or a 400 when it is not a boolean."""
    stream = body.get("stream", False)
    if stream is None:
        return False
    if not isinstance(stream, bool):
        raise InvalidRequest(message, param="stream", code="invalid_type")
    return stream


def missing_parameter(name: str) -> InvalidRequest:
    """OpenAI's 400 for a missing required parameter."""
    return InvalidRequest(f"Missing required parameter: '{name}'.", param=name, code="missing_required_parameter")
