"""Models and policies the spend cap and estimate tests add to the batch catalog for the length of a module."""

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


UNPACED_LIMIT = 3  # requests per hour of "estimate-unpaced"
PACED_PER_MINUTE = 60  # requests per minute of "estimate-paced", half of them for batch items
EXTRA_POLICIES = [
    {"name": "estimate-unpaced", "models": ["*"], "key_pool": ["oa-ok"],
     "rate_limits": [{"requests": UNPACED_LIMIT, "per": "1h"}]},
    {"name": "estimate-paced", "models": ["*"], "key_pool": ["oa-ok"],
     "rate_limits": [{"requests": PACED_PER_MINUTE, "per": "60s"}], "batch": {"pace": True, "share": 0.5}},
]


@pytest.fixture(scope="module")
def extra_models(admin: Callable[..., Any], upstream: Any, catalog: dict[str, Any]) -> Iterator[None]:
    """The batch catalog plus EXTRA_MODELS and EXTRA_POLICIES (put back as it was afterwards)."""
    doc = batch_catalog(upstream.url)
    doc["models"] += EXTRA_MODELS
    doc["policies"] += EXTRA_POLICIES
    assert admin("PUT", "/admin/catalog", json=doc).status_code == 200
    yield
    assert admin("PUT", "/admin/catalog", json=catalog).status_code == 200
