"""Models the re-run, spend cap and estimate tests add to the batch catalog for the length of a module."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.batches.helpers import PRICED, batch_catalog

DEFAULT_LIMIT = 64  # max_output_tokens of "gpt-default-limit"
EXTRA_MODELS = [
    {"name": "unpriced-chat", "bindings": [{"host": "openai", "adapter": "openai", "upstream_model": "free"}]},
    {"name": "gpt-default-limit", "max_output_tokens": DEFAULT_LIMIT,
     "bindings": [{"host": "openai", "adapter": "openai", "upstream_model": "gpt-capped", "pricing": PRICED}]},
]


@pytest.fixture(scope="module")
def extra_models(admin: Callable[..., Any], upstream: Any, catalog: dict[str, Any]) -> Iterator[None]:
    """The batch catalog plus EXTRA_MODELS (put back as it was afterwards)."""
    doc = batch_catalog(upstream.url)
    doc["models"] += EXTRA_MODELS
    assert admin("PUT", "/admin/catalog", json=doc).status_code == 200
    yield
    assert admin("PUT", "/admin/catalog", json=catalog).status_code == 200
