"""Shape name → adapter: the one list of the wire shapes Relay speaks.

A new shape is its adapter module, one `register()` line below and, for batches and bindings, the migration that
lets the database's CHECK constraints accept its name. Registration checks that the adapter carries everything the
engine asks of a shape (ShapeAdapter), so a missing member fails at import, not as a 500 on a request.
"""

from __future__ import annotations

import re
from typing import Any

from adapters import anthropic, embeddings, openai, openai_responses
from adapters.base import CANONICAL, ShapeAdapter
from adapters.errors import UnknownShape

ADAPTERS: dict[str, ShapeAdapter] = {}
_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
_TEXTS = ("title", "provider", "upstream_path")
_NAME_TUPLES = ("output_limit_fields", "canonical_markers")
CANONICAL_WIRE = "openai"  # the wire format of /v1/generate's answers and errors


class ShapeRegistrationError(Exception):
    """An adapter that cannot be registered: a member missing or of the wrong type, or its name taken."""


def register(adapter: ShapeAdapter) -> ShapeAdapter:
    """Add ADAPTER under its shape name; ShapeRegistrationError when it lacks a member or the name is taken."""
    problems = _problems(adapter)
    if problems:
        raise ShapeRegistrationError(f"shape adapter {adapter!r} cannot be registered: {'; '.join(problems)}")
    ADAPTERS[adapter.shape] = adapter
    return adapter


def _problems(adapter: Any) -> list[str]:
    """What is wrong with ADAPTER as a ShapeAdapter (the members the engine reads as data; methods are typed)."""
    shape = getattr(adapter, "shape", None)
    if not isinstance(shape, str) or not _NAME.match(shape) or shape == CANONICAL:
        return [f"shape must be a lowercase name other than {CANONICAL!r}, not {shape!r}"]
    problems = [f"shape {shape!r} is already registered"] if shape in ADAPTERS else []
    problems += [f"{name} must be a non-empty string" for name in _TEXTS
                 if not isinstance(getattr(adapter, name, None), str) or not getattr(adapter, name)]
    problems += [f"{name} must be a tuple of member names" for name in _NAME_TUPLES
                 if not _names(getattr(adapter, name, None))]
    if not isinstance(getattr(adapter, "choices_field", False), str | None):
        problems.append("choices_field must be a member name or None")
    if not isinstance(getattr(adapter, "bare_input", None), bool):
        problems.append("bare_input must be a bool")
    if not hasattr(adapter, "batch_item_type"):
        problems.append("batch_item_type is missing (None for a shape that is never batched)")
    return problems


def _names(value: Any) -> bool:
    return isinstance(value, tuple) and all(isinstance(name, str) and name for name in value)


def get_adapter(shape: str) -> ShapeAdapter:
    """The adapter of SHAPE (`openai`, `anthropic`, `openai_responses`, `embeddings`); UnknownShape otherwise."""
    adapter = ADAPTERS.get(shape) if isinstance(shape, str) else None
    if adapter is None:
        raise UnknownShape(f"unknown shape: {shape!r}")
    return adapter


def wire_adapter(shape: str) -> ShapeAdapter:
    """The adapter of the wire format SHAPE's callers speak (its error objects, its header names): SHAPE's own;
    OpenAI's for the canonical /v1/generate, which has none of its own."""
    return get_adapter(CANONICAL_WIRE if shape == CANONICAL else shape)


def batch_shapes() -> tuple[str, ...]:
    """The shapes a batch may have and a binding may speak: every registered adapter that takes batch items."""
    return tuple(shape for shape, adapter in ADAPTERS.items() if adapter.batch_item_type is not None)


def openai_batch_endpoints() -> dict[str, str]:
    """The `url` (endpoint) of an OpenAI batch input line → the shape of its bodies: the OpenAI shapes' paths."""
    return {ADAPTERS[shape].upstream_path: shape for shape in batch_shapes() if ADAPTERS[shape].provider == "openai"}


for _adapter in (openai.ADAPTER, anthropic.ADAPTER, openai_responses.ADAPTER, embeddings.ADAPTER):
    register(_adapter)

SHAPES = batch_shapes()  # the built-in batch shapes, as registered at import (the CLI's choices, the tests' lists)
