"""A small batch on real workers and a live request, against the fake upstream: each shows up in the usage API
with the right source, and /metrics shows the batch's items move to `completed`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devtools.fake_upstream.harness import FakeUpstream, start_fake_upstream
from devtools.processes import RelayProcess, start_workers
from devtools.waiting import until
from tests.batches.helpers import submit, wait_finished
from tests.observability.helpers import scrape, value
from tests.usage.conftest import CATALOG as USAGE_CATALOG
from tests.usage.conftest import admin_headers, new_key

pytestmark = pytest.mark.integration
PRICING = {"input_per_mtok": 0.15, "output_per_mtok": 0.60}
CHAT = {"model": "e2e-gpt", "messages": [{"role": "user", "content": "hello from the usage tests"}]}


def e2e_catalog(upstream_url: str) -> dict[str, Any]:
    """The usage tests' catalog plus a host on the fake upstream, a model, a policy and a service account."""
    doc = {k: list(v) for k, v in USAGE_CATALOG.items()}
    doc["hosts"].append({"name": "e2e-openai", "base_url": upstream_url,
                         "keys": [{"name": "e2e-key", "value": "sk-e2e-ok"}]})
    doc["models"].append({"name": "e2e-gpt", "bindings": [{"host": "e2e-openai", "adapter": "openai",
                                                           "upstream_model": "gpt-4o-mini", "pricing": PRICING}]})
    doc["policies"].append({"name": "e2e-main", "models": ["*"], "key_pool": ["e2e-key"]})
    doc["service_accounts"].append({"name": "e2e-svc", "policy": "e2e-main"})
    return doc


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = start_fake_upstream()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def e2e_key(app, settings, upstream) -> str:  # type: ignore[no-untyped-def]
    client = app.test_client()
    res = client.put("/admin/catalog", headers=admin_headers(settings), json=e2e_catalog(upstream.url))
    assert res.status_code == 200, res.json
    return new_key(client, settings, "service_account", "e2e-svc", "e2e-main")


@pytest.fixture(scope="module")
def workers(settings_env, runtime, e2e_key, tmp_path_factory) -> Iterator[RelayProcess]:  # type: ignore[no-untyped-def]
    proc = start_workers(settings_env, tmp_path_factory.mktemp("workers"), runtime, processes=1, threads=2)
    yield proc
    proc.stop()


def usage(client: Any, key: str, path: str = "/v1/usage/events", **params: Any) -> Any:
    res = client.get(path, headers={"Authorization": f"Bearer {key}"}, query_string=params)
    assert res.status_code == 200, res.json
    return res.json


def test_a_small_batch_moves_the_item_gauge_and_shows_as_batch_usage(client, e2e_key, workers) -> None:
    before = scrape(client)
    res = submit(client, e2e_key, [{**CHAT, "messages": [{"role": "user", "content": f"item {i}"}]}
                                   for i in range(3)])
    assert res.status_code == 202, res.json
    batch = wait_finished(client, e2e_key, res.json["id"])
    assert batch["counts"]["completed"] == 3
    after = scrape(client)
    assert value(after, "relay_batch_items", state="completed") - value(
        before, "relay_batch_items", state="completed") == 3
    assert value(after, "relay_http_requests_total", method="POST", route="/v1/batches", status="202") >= 1

    events = usage(client, e2e_key, batch_id=batch["id"])["events"]
    assert sorted(e["batch_idx"] for e in events) == [0, 1, 2]
    assert all(e["source"] == "batch" and e["status"] == 200 and e["cost_nanos"] for e in events)
    summary = usage(client, e2e_key, "/v1/usage/summary", group_by="source,batch")
    [row] = [r for r in summary["rows"] if r["batch_id"] == batch["id"]]
    assert row["source"] == "batch" and row["requests"] == 3
    assert row["cost_nanos"] == sum(e["cost_nanos"] for e in events)


def test_a_live_request_shows_as_live_usage(client, e2e_key) -> None:
    res = client.post("/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {e2e_key}"})
    assert res.status_code == 200, res.get_data(as_text=True)
    [event] = until(lambda: usage(client, e2e_key, source="live")["events"], what="the live call's usage event")
    assert event["source"] == "live" and event["request_id"] == res.headers["x-request-id"]
    assert event["model_requested"] == "e2e-gpt" and event["host_name"] == "e2e-openai"
    assert event["input_tokens"] == res.json["usage"]["prompt_tokens"] and event["cost_nanos"] > 0
