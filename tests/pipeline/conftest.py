"""Fixtures for live-pipeline tests: the fake upstream, a catalog pointing at it, and relay keys."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.pipeline.keyhealth import get_key_health
from devtools.fake_upstream.harness import start_fake_upstream
from tests.databases import database_fixtures
from tests.pipeline.helpers import settle

# A database and vhost of this folder's own: its catalog replaces no other folder's (tests/databases.py).
services, settings, settings_env, runtime, app, admin, relay_api = database_fixtures("pipeline")

PRICED = {"input_per_mtok": 0.15, "output_per_mtok": 0.60, "cached_input_per_mtok": 0.075}


def pipeline_catalog(upstream_url: str) -> dict[str, Any]:
    """Hosts on the fake upstream, one model per adapter, and a policy per behaviour under test."""
    pool = ["oa-1", "oa-2", "oa-3", "an-1", "ot-1"]
    return {
        "hosts": [
            {"name": "openai", "base_url": upstream_url,
             "keys": [{"name": f"oa-{i}", "value": f"sk-oa-{i}"} for i in (1, 2, 3)]},
            {"name": "anthropic", "base_url": upstream_url, "keys": [{"name": "an-1", "value": "sk-an-1"}]},
            {"name": "compat", "base_url": upstream_url, "keys": [{"name": "ot-1", "value": "sk-ot-1"}]},
        ],
        "models": [
            {"name": "gpt-4o-mini", "bindings": [{"host": "openai", "adapter": "openai",
                                                  "upstream_model": "gpt-4o-mini-2024", "pricing": PRICED}]},
            {"name": "gpt-5-responses", "bindings": [{"host": "openai", "adapter": "openai_responses",
                                                      "upstream_model": "gpt-5",
                                                      "pricing": {"input_per_mtok": 1.25, "output_per_mtok": 10}}]},
            {"name": "claude-sonnet", "bindings": [{"host": "anthropic", "adapter": "anthropic",
                                                    "upstream_model": "claude-sonnet-4-5",
                                                    "pricing": {"input_per_mtok": 3, "output_per_mtok": 15}}]},
            {"name": "llama-local", "bindings": [{"host": "compat", "adapter": "openai",
                                                  "upstream_model": "meta-llama/Llama-3.1-8B-Instruct"}]},
            {"name": "text-embedding", "bindings": [{"host": "openai", "adapter": "openai",
                                                     "upstream_model": "text-embedding-3-small", "pricing": PRICED}]},
            {"name": "retired", "bindings": [{"host": "openai", "adapter": "openai", "upstream_model": "old",
                                              "enabled": False}]},
        ],
        "policies": [
            {"name": "main", "models": ["*"], "key_pool": pool, "key_selection": "prioritized",
             "circuit_breaker": {"failures": 2, "cooldown": "2s"}},
            {"name": "rr", "models": ["*"], "key_pool": pool, "key_selection": "round_robin",
             "circuit_breaker": {"failures": 100, "cooldown": "1s"}},
            {"name": "lru", "models": ["*"], "key_pool": pool, "key_selection": "least_recently_used",
             "circuit_breaker": {"failures": 100, "cooldown": "1s"}},
            {"name": "limited", "models": ["*"], "key_pool": pool, "rate_limits": [{"requests": 5, "per": "1h"}]},
            {"name": "token-limited", "models": ["*"], "key_pool": pool, "rate_limits": [{"tokens": 1, "per": "1h"}]},
            {"name": "token-roomy", "models": ["*"], "key_pool": pool,
             "rate_limits": [{"requests": 1_000_000, "tokens": 1_000_000_000, "per": "1h"}]},
            {"name": "narrow", "models": ["gpt-*"], "key_pool": pool},
            {"name": "logged", "models": ["*"], "key_pool": pool, "payload_logging": True},
            {"name": "nokeys", "models": ["*"], "key_pool": ["an-1"]},
        ],
        "teams": [{"name": "t-pipeline"}],
        "projects": [{"name": "p-pipeline", "team": "t-pipeline"}],
        "users": [{"name": "pipeline-user", "policy": "main", "project": "p-pipeline", "team": "t-pipeline"}],
        "service_accounts": [{"name": "pipeline-svc", "policy": "main", "project": "p-pipeline",
                              "team": "t-pipeline"}],
    }


@pytest.fixture(scope="module")
def upstream() -> Iterator[Any]:
    fake = start_fake_upstream()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def catalog(admin, upstream) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    doc = pipeline_catalog(upstream.url)
    res = admin("PUT", "/admin/catalog", json=doc)
    assert res.status_code == 200, res.get_data(as_text=True)
    return doc


@pytest.fixture(scope="module")
def make_key(admin, catalog) -> Callable[[str], str]:  # type: ignore[no-untyped-def]
    """Create a relay key for the pipeline service account under POLICY; return its secret."""

    def make(policy: str = "main") -> str:
        res = admin("POST", "/admin/relay-keys", json={"principal_kind": "service_account",
                                                       "principal": "pipeline-svc", "policy": policy})
        assert res.status_code == 201, res.get_data(as_text=True)
        return str(res.json["key"])

    return make


@pytest.fixture(autouse=True)
def _fresh_state(request: pytest.FixtureRequest) -> None:
    """Each test starts with a fresh fake upstream and closed breakers."""
    if "upstream" in request.fixturenames:
        request.getfixturevalue("upstream").reset()
        runtime = request.getfixturevalue("runtime")
        settle(runtime)  # the previous test's calls are committed before their state is wiped
        with runtime.pool.connection() as conn:
            conn.execute("DELETE FROM key_health")
            conn.execute("DELETE FROM rate_limit_windows")
        get_key_health(runtime).invalidate()  # its NOTIFY arrives a moment later
