"""OpenAI embeddings (`POST /v1/embeddings`) and the model list (`GET /v1/models`)."""

from __future__ import annotations

import base64
import functools
import hashlib
import math
import random
import struct
import time
from collections.abc import Mapping
from typing import Any

from devtools.fake_upstream.content import count_tokens, embedding_inputs
from devtools.fake_upstream.errors import InvalidRequest
from devtools.fake_upstream.wire import missing_parameter, require_openai_model

DEFAULT_DIMENSIONS = 1536
MAX_DIMENSIONS = 3072
MODELS = ("gpt-4o-mini", "gpt-4o", "gpt-5", "gpt-5-mini", "text-embedding-3-small", "claude-sonnet-4-5",
          "claude-sonnet-4-6", "claude-haiku-4-5")


def validate_embeddings(body: Mapping[str, Any]) -> None:
    """Refuse what the real endpoint refuses: no model, no/empty input, bad encoding_format or dimensions."""
    require_openai_model(body)
    if "input" not in body:
        raise missing_parameter("input")
    value = body["input"]
    valid = (isinstance(value, str) and value) or (
        isinstance(value, list) and value and all(
            (isinstance(v, str) and v) or isinstance(v, int) or (isinstance(v, list) and v) for v in value))
    if not valid:
        raise InvalidRequest("'$.input' is invalid. Please check the API reference: "
                             "https://platform.openai.com/docs/api-reference.", param="input", code="invalid_value")
    if body.get("encoding_format", "float") not in ("float", "base64"):
        raise InvalidRequest("Invalid value for 'encoding_format': expected 'float' or 'base64'.",
                             param="encoding_format", code="invalid_value")
    dimensions = body.get("dimensions", DEFAULT_DIMENSIONS)
    if isinstance(dimensions, bool) or not isinstance(dimensions, int) or not 1 <= dimensions <= MAX_DIMENSIONS:
        raise InvalidRequest(f"Invalid value for 'dimensions': expected an integer from 1 to {MAX_DIMENSIONS}.",
                             param="dimensions", code="invalid_value")


@functools.lru_cache(maxsize=1024)
def embedding_vector(text: str, dimensions: int = DEFAULT_DIMENSIONS) -> tuple[float, ...]:
    """A deterministic unit vector for `text` (same text, same vector)."""
    rng = random.Random(hashlib.sha256(text.encode()).digest())
    raw = [rng.uniform(-1.0, 1.0) for _ in range(dimensions)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return tuple(struct.unpack(f"<{dimensions}f", struct.pack(f"<{dimensions}f", *(x / norm for x in raw))))


def _encode(vector: tuple[float, ...], encoding_format: str) -> list[float] | str:
    """The vector as JSON floats or as base64 of little-endian float32 (what the SDK asks for by default)."""
    if encoding_format == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return list(vector)


def embeddings_body(body: Mapping[str, Any], usage: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The embeddings answer; `prompt_tokens` is the sum of count_tokens over the inputs (unless overridden)."""
    texts = embedding_inputs(body)
    dimensions = body.get("dimensions", DEFAULT_DIMENSIONS)
    encoding_format = body.get("encoding_format", "float")
    data = [{"object": "embedding", "index": i, "embedding": _encode(embedding_vector(t, dimensions), encoding_format)}
            for i, t in enumerate(texts)]
    tokens = (usage or {}).get("input_tokens", sum(count_tokens(t) for t in texts))
    return {"object": "list", "data": data, "model": body["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def models_body(anthropic: bool) -> dict[str, Any]:
    """`GET /v1/models` in the OpenAI list shape, or Anthropic's when the caller sent `anthropic-version`."""
    if anthropic:
        data = [{"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"} for m in MODELS]
        return {"data": data, "has_more": False, "first_id": MODELS[0], "last_id": MODELS[-1]}
    created = int(time.time())
    return {"object": "list",
            "data": [{"id": m, "object": "model", "created": created, "owned_by": "relay-fake"} for m in MODELS]}
