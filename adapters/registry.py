"""Shape name → adapter."""

from __future__ import annotations

from adapters import anthropic, embeddings, openai, openai_responses
from adapters.base import ShapeAdapter
from adapters.errors import UnknownShape

ADAPTERS: dict[str, ShapeAdapter] = {
    adapter.shape: adapter
    for adapter in (openai.ADAPTER, anthropic.ADAPTER, openai_responses.ADAPTER, embeddings.ADAPTER)
}


def get_adapter(shape: str) -> ShapeAdapter:
    """The adapter of SHAPE (`openai`, `anthropic`, `openai_responses`, `embeddings`); UnknownShape otherwise."""
    adapter = ADAPTERS.get(shape) if isinstance(shape, str) else None
    if adapter is None:
        raise UnknownShape(f"unknown shape: {shape!r}")
    return adapter
