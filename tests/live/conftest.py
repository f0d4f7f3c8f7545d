"""Real `relay api` replicas for the live path's guarantees: a catalog on a fake upstream process, relay keys, and
short server deadlines (1 s) so slow connections are dropped within the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from devtools.fake_upstream.harness import FakeUpstream, start_fake_upstream
from devtools.processes import RelayProcess, start_api
from devtools.waiting import until
from tests.databases import database_fixtures
from tests.pipeline.conftest import pipeline_catalog

# A database and vhost of this folder's own: its catalog replaces no other folder's (tests/databases.py).
services, settings, settings_env, runtime, app, admin, relay_api = database_fixtures("live")

DEADLINES = {"RELAY_API_HEADER_TIMEOUT_S": "1", "RELAY_API_IO_TIMEOUT_S": "1"}
# The `leased` and `leased-killed` policies' requests per 12 s window (one policy for each test that drives one past
# its limit, so that what a test leaves running does not count in the next one's window)
LEASED = 200
BIG_KEY = "sk-big"  # the fake upstream streams one 8 MB delta on this key: more than the sockets' buffers hold


def live_catalog(upstream_url: str) -> dict[str, Any]:
    doc = pipeline_catalog(upstream_url)
    doc["hosts"][0]["keys"].append({"name": "big", "value": BIG_KEY})
    doc["policies"] += [
        {"name": "breaker", "models": ["*"], "key_pool": ["oa-2", "oa-3"],
         "circuit_breaker": {"failures": 1, "cooldown": "1h"}},
        {"name": "limited-20", "models": ["*"], "key_pool": ["oa-1"], "rate_limits": [{"requests": 20, "per": "1h"}]},
        {"name": "big", "models": ["*"], "key_pool": ["big"]},
        {"name": "leased", "models": ["*"], "key_pool": ["oa-1"], "rate_limits": [{"requests": LEASED, "per": "12s"}]},
        {"name": "leased-killed", "models": ["*"], "key_pool": ["oa-1"],
         "rate_limits": [{"requests": LEASED, "per": "12s"}]},
        {"name": "wide", "models": ["*"], "key_pool": ["oa-1"],
         "rate_limits": [{"requests": 1_000_000, "tokens": 1_000_000_000, "per": "60s"}]},
    ]
    return doc


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = start_fake_upstream(process=True)
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def live_env(settings_env: dict[str, str], admin: Any, upstream: FakeUpstream) -> dict[str, str]:
    res = admin("PUT", "/admin/catalog", json=live_catalog(upstream.url))
    assert res.status_code == 200, res.get_data(as_text=True)
    return {**settings_env, **DEADLINES}


@pytest.fixture(scope="module")
def replicas(live_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RelayProcess]]:
    """Two `relay api` replicas (two gevent workers each) on the same database."""
    apis = [start_api(live_env, tmp_path_factory.mktemp("replica"), workers=2) for _ in range(2)]
    yield apis
    for api in apis:
        api.stop()


@pytest.fixture(scope="module")
def new_key(admin: Any, replicas: list[RelayProcess]) -> Callable[[str], str]:
    """A relay key under POLICY, once every replica accepts it."""

    def make(policy: str) -> str:
        res = admin("POST", "/admin/relay-keys", json={"principal_kind": "service_account",
                                                       "principal": "pipeline-svc", "policy": policy})
        assert res.status_code == 201, res.get_data(as_text=True)
        key = str(res.json["key"])
        for api in replicas:
            until(lambda api=api: all(requests.get(f"{api.url}/v1/models", headers=bearer(key), timeout=10)
                                         .status_code == 200 for _ in range(4)), what="the key on every worker")
        return key

    return make


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
