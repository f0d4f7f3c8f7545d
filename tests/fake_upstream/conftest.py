"""One fake upstream (background thread) for the whole module tree, reset before every test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devtools.fake_upstream.harness import FakeUpstream, start_fake_upstream


@pytest.fixture(scope="session")
def upstream() -> Iterator[FakeUpstream]:
    server = start_fake_upstream()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def fresh_upstream(upstream: FakeUpstream) -> None:
    upstream.reset()
