"""OpenAI Embeddings (request shape `embeddings`, POST /v1/embeddings, OpenAI auth); never streamed, never batched."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from adapters import fields as f
from adapters.base import EMBEDDINGS, FieldError, ShapeAdapter, Usage, count, dig
from adapters.openai import bearer_headers, openai_error_body

_OPTIONAL: dict[str, f.Check] = {
    "encoding_format": f.one_of("float", "base64"), "dimensions": f.positive_integer, "user": f.string,
}


def _is_token_list(value: Any) -> bool:
    """A non-empty list of integer token ids."""
    return isinstance(value, list) and bool(value) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in value)


def _input(value: Any) -> str | None:
    """A string, a non-empty list of strings, a token list, or a non-empty list of token lists."""
    if isinstance(value, str):
        return None if value else "must not be empty"
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value) or _is_token_list(value) or all(_is_token_list(v) for v in value):
            return None
    return "must be a string, an array of strings, an array of token ids, or an array of token-id arrays"


def embeddings_usage(usage: Any) -> Usage:
    """Usage from an embeddings `usage` object: prompt_tokens in, nothing out."""
    return Usage(input_tokens=count(dig(usage, "prompt_tokens")))


class WholeBodyUsageReader:
    """For answers that are one JSON document: buffers it and reads the usage at the end."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def feed(self, chunk: bytes) -> None:
        """Keep CHUNK."""
        self._chunks.append(chunk)

    def _document(self) -> Any:
        """The body parsed as JSON, or None."""
        try:
            return json.loads(b"".join(self._chunks))
        except (ValueError, RecursionError):
            return None

    def usage(self) -> Usage:
        """The `usage` of the whole body."""
        return embeddings_usage(dig(self._document(), "usage"))

    def completed(self) -> bool:
        """True once the body is a whole JSON document."""
        return self._document() is not None


class EmbeddingsAdapter:
    """The `embeddings` request shape."""

    shape = EMBEDDINGS
    title = "OpenAI Embeddings"
    provider = "openai"
    batch_item_type = None  # embeddings are never batched
    upstream_path = "/v1/embeddings"
    output_limit_fields: tuple[str, ...] = ()  # no output tokens
    choices_field: str | None = None
    canonical_markers: tuple[str, ...] = ()
    bare_input = True

    def validate_request(self, body: Any) -> list[FieldError]:
        """`model` and a non-empty `input`; `stream` is not an embeddings option."""
        errors = f.check_body(body, {"model": f.non_empty_string, "input": _input}, _OPTIONAL)
        if isinstance(body, dict) and body.get("stream") is True:
            errors.append(FieldError("stream", "embeddings cannot be streamed"))
        return errors

    def auth_headers(self, secret: str) -> dict[str, str]:
        """Authorization: Bearer."""
        return bearer_headers(secret)

    def extract_usage(self, body: Any) -> Usage:
        """usage.prompt_tokens as input; embeddings have no output or cached tokens."""
        return embeddings_usage(dig(body, "usage"))

    def stream_usage_reader(self) -> WholeBodyUsageReader:
        """Embeddings never stream: this reader takes the whole JSON body."""
        return WholeBodyUsageReader()

    def error_body(self, status: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
        """OpenAI's error envelope."""
        return openai_error_body(status, code, message, param)

    def caller_headers(self, headers: dict[str, str], now: datetime) -> dict[str, str]:
        """Relay's names are OpenAI's (`x-ratelimit-*`)."""
        return headers

    def prepare_body(self, body: dict[str, Any], upstream_model: str) -> dict[str, Any]:
        """Pass-through with `model` rewritten."""
        return {**body, "model": upstream_model}

    def is_stream(self, body: Any) -> bool:
        """Never."""
        return False


ADAPTER: ShapeAdapter = EmbeddingsAdapter()
