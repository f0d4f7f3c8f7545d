"""A paced policy whose share of a rate limit is less than one request or token a window would accept batches that
never start: the catalog refuses it at apply, and a submit under such a policy (stored before this check) is a
409 paced_share_too_small that stores nothing."""

from __future__ import annotations

from typing import Any

import pytest

from app.access.cache import get_catalog
from app.catalog import store
from app.catalog.apply import apply_catalog
from app.catalog.validate import InvalidCatalog, validate_catalog
from app.credentials import keys
from tests.catalog.helpers import base_catalog


def paced(share: float, **limit: Any) -> dict[str, Any]:
    doc = base_catalog()
    doc["policies"].append({"name": "t-paced", "models": ["*"], "key_pool": ["t-openai-1"],
                            "rate_limits": [{"requests": 1000, "per": "60s"}, {**limit, "per": "60s"}],
                            "batch": {"pace": True, "share": share}})
    return doc


@pytest.mark.parametrize(("share", "limit", "said"), [
    (0.05, {"requests": 10}, "a share of 0.05 of 10 requests a window is less than one request"),
    (0.01, {"tokens": 50}, "a share of 0.01 of 50 tokens a window is less than one token"),
    (0.3, {"requests": 3}, "a share of 0.3 of 3 requests a window is less than one request"),
])
def test_a_paced_share_that_rounds_to_zero_is_refused_at_apply(share: float, limit: dict[str, int],
                                                                said: str) -> None:
    with pytest.raises(InvalidCatalog) as caught:
        validate_catalog(paced(share, **limit), {})
    assert caught.value.problems == [f"policies[2].batch.share: {said} (rate_limits[1]), so no paced batch item"
                                     " could ever start: raise the share or the limit"]


def test_a_share_of_at_least_one_and_an_unpaced_policy_pass() -> None:
    validate_catalog(paced(0.1, requests=10), {})
    validate_catalog(paced(0.34, requests=3), {})
    unpaced = paced(0.05, requests=10)
    unpaced["policies"][2]["batch"]["pace"] = False  # unpaced items past the share are discarded at once, visibly
    validate_catalog(unpaced, {})


@pytest.mark.integration
def test_a_submit_under_a_policy_stored_with_a_starved_share_is_a_409_and_stores_nothing(runtime, client) -> None:
    apply_catalog(runtime, paced(0.5, requests=10))
    secret = keys.create_key(runtime, principal_kind="user", principal="t-alice", policy="t-paced").secret
    with runtime.pool.connection() as conn, conn.transaction():  # as a catalog applied before the check left it
        conn.execute("UPDATE policies SET batch_share = 0.05 WHERE name = 't-paced' AND deleted_at IS NULL")
        version = store.bump_version(conn)
    get_catalog(runtime).ensure_version(version)
    with runtime.pool.connection() as conn:
        before = conn.execute("SELECT count(*) AS n FROM batches").fetchone()["n"]
    res = client.post("/v1/batches", headers={"Authorization": f"Bearer {secret}"},
                      json={"shape": "openai", "requests": [{"model": "gpt-4o-mini",
                                                             "messages": [{"role": "user", "content": "hi"}]}]})
    assert res.status_code == 409 and res.get_json()["error"]["code"] == "paced_share_too_small", res.get_data()
    assert "'t-paced'" in res.get_json()["error"]["message"] and "less than one request" in res.get_json()[
        "error"]["message"]
    with runtime.pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM batches").fetchone()["n"] == before
    apply_catalog(runtime, base_catalog())
