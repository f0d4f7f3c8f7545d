"""`relay worker --gevent`: items run on greenlets with the same outcomes, time limit and cancel as on threads."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from devtools.processes import RelayProcess, start_workers
from devtools.waiting import until
from tests.batches.conftest import WORKER_SETTINGS
from tests.batches.helpers import CHAT, results, submit, usage_events, wait_finished

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream


@pytest.fixture(scope="module")
def gevent_workers(settings_env, runtime, catalog, tmp_path_factory) -> Iterator[RelayProcess]:  # type: ignore[no-untyped-def]
    proc = start_workers(settings_env, tmp_path_factory.mktemp("gevent-workers"), runtime, processes=1, threads=20,
                         extra=("--gevent",), **WORKER_SETTINGS)
    yield proc
    proc.stop()


@pytest.fixture(autouse=True)
def _fresh_upstream(upstream, gevent_workers) -> None:  # type: ignore[no-untyped-def]
    upstream.reset()


def test_gevent_workers_complete_items_with_one_usage_event_each(client, key, runtime, upstream) -> None:
    batch = wait_finished(client, key, submit(client, key, [CHAT] * 12).json["id"])
    assert batch["counts"]["completed"] == 12
    assert all(r["response"]["object"] == "chat.completion" for r in results(client, key, batch["id"]))
    assert [e["status"] for e in usage_events(runtime, batch["id"])] == [200] * 12
    assert upstream.stats()["total"] == 12


def test_gevent_workers_run_slow_calls_concurrently(client, make_key, upstream) -> None:
    key = make_key("slow")["key"]
    upstream.control("sk-batch-slow", latency_ms=1000)
    started = time.monotonic()
    batch = wait_finished(client, key, submit(client, key, [CHAT] * 20).json["id"], timeout=20)
    assert batch["counts"]["completed"] == 20
    assert time.monotonic() - started < 6  # 20 greenlets: one round of 1 s calls, not 20 in a row


def test_gevent_workers_stop_an_item_at_its_time_limit(client, make_key, upstream) -> None:
    key = make_key("hanging")["key"]
    upstream.control("sk-batch-hang", mode="hang")
    started = time.monotonic()
    batch = wait_finished(client, key, submit(client, key, [CHAT]).json["id"], timeout=20)
    assert time.monotonic() - started < WORKER_SETTINGS["batch_item_time_limit_s"] + 5
    assert batch["items"][0]["state"] == "discarded" and batch["items"][0]["error"] == "time limit exceeded"


def test_gevent_workers_stop_running_items_on_cancel(client, make_key, upstream, runtime) -> None:
    key = make_key("slow")["key"]
    upstream.control("sk-batch-slow", latency_ms=60_000)
    batch = submit(client, key, [CHAT] * 5).json
    until(lambda: upstream.stats()["in_flight"] == 5, what="every item calling the upstream")
    res = client.post(f"/v1/batches/{batch['id']}/cancel", headers={"Authorization": f"Bearer {key}"})
    assert res.status_code == 200
    cancelled_at = time.monotonic()
    done = wait_finished(client, key, batch["id"], timeout=5)
    assert time.monotonic() - cancelled_at < 2
    assert done["counts"]["cancelled"] == 5
    assert len(usage_events(runtime, batch["id"])) == 5
