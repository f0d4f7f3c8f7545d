"""Items run on real worker processes through the live pipeline against the fake upstream."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import dramatiq
import pika
import pytest
import requests

from devtools.services import MQ_UI_PORT
from devtools.waiting import until
from tests.batches.conftest import WORKER_SETTINGS
from tests.batches.helpers import CHAT, get, results, submit, usage_events, wait_finished

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream


@pytest.fixture(autouse=True)
def _fresh_upstream(upstream, workers) -> None:  # type: ignore[no-untyped-def]
    upstream.reset()


def _item(batch: dict[str, Any], idx: int = 0) -> dict[str, Any]:
    return next(i for i in batch["items"] if i["idx"] == idx)


def test_items_complete_with_the_response_stored_and_one_priced_usage_event_each(client, key, runtime,
                                                                                 upstream) -> None:
    items = [{**CHAT, "messages": [{"role": "user", "content": f"item {i}"}]} for i in range(6)]
    batch = wait_finished(client, key, submit(client, key, items).json["id"])
    assert batch["counts"]["completed"] == 6 and batch["finished_at"] is not None
    assert batch["status"] == "queued"  # status only changes on cancel
    found = results(client, key, batch["id"])
    assert [r["idx"] for r in found] == list(range(6))
    assert all(r["state"] == "completed" and r["response"]["object"] == "chat.completion" for r in found)
    events = usage_events(runtime, batch["id"])
    assert [e["batch_idx"] for e in events] == list(range(6))
    for event, result in zip(events, found, strict=True):
        usage = result["response"]["usage"]
        assert event["source"] == "batch" and event["status"] == 200
        assert (event["input_tokens"], event["output_tokens"]) == (usage["prompt_tokens"],
                                                                  usage["completion_tokens"])
        expected = (Decimal(usage["prompt_tokens"]) * Decimal("0.15")
                    + Decimal(usage["completion_tokens"]) * Decimal("0.60")) * 1000
        assert event["cost_nanos"] == int(expected.to_integral_value())
        assert str(event["policy_id"]) == batch["policy_id"] and str(event["team_id"]) == batch["team_id"]
    assert upstream.stats()["total"] == 6


def test_an_upstream_error_discards_the_item_without_keeping_its_body(client, key, upstream) -> None:
    upstream.control("sk-batch-ok", mode="fail", fail_status=400, times=1)
    batch = wait_finished(client, key, submit(client, key, [CHAT]).json["id"])
    item = _item(batch)
    assert item["state"] == "discarded" and item["error"] == "upstream returned status 400"
    (result,) = results(client, key, batch["id"])
    assert "response" not in result and result["error"] == "upstream returned status 400"


def test_responses_items_on_the_openai_hosts_chat_binding_go_to_chat_completions(client, key, upstream) -> None:
    item = {"model": "gpt-4o-mini", "input": "hello"}
    batch = wait_finished(client, key, submit(client, key, [item], shape="openai_responses").json["id"])
    assert upstream.requests(path="/v1/chat/completions")
    assert not upstream.requests(path="/v1/responses")
    got = _item(batch)
    assert got["state"] == "discarded" and got["error"].startswith("upstream returned status 4")


def test_every_key_failing_discards_the_item(client, make_key, upstream) -> None:
    key = make_key("failing")["key"]
    upstream.control("sk-batch-fail", mode="fail", fail_status=503)
    item = _item(wait_finished(client, key, submit(client, key, [CHAT]).json["id"]))
    assert item["state"] == "discarded" and item["error_code"] == "all_keys_failed"


def test_a_cross_shape_item_is_discarded_naming_both_shapes(client, key, upstream) -> None:
    item = {"model": "claude-sonnet", "messages": [{"role": "user", "content": "hi"}]}
    got = _item(wait_finished(client, key, submit(client, key, [item]).json["id"]))
    assert got["state"] == "discarded" and got["error_code"] == "cross_shape_dispatch"
    assert "openai" in got["error"] and "anthropic" in got["error"]
    assert upstream.stats()["total"] == 0


@pytest.mark.parametrize(("policy", "model", "code"), [
    ("main", "no-such-model", "model_not_found"),
    ("narrow", "claude-sonnet", "model_not_allowed"),
    ("main", "retired", "no_binding"),
])
def test_routing_rejections_discard_the_item(client, make_key, upstream, policy, model, code) -> None:
    key = make_key(policy)["key"]
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    got = _item(wait_finished(client, key, submit(client, key, [body]).json["id"]))
    assert got["state"] == "discarded" and got["error_code"] == code


def test_a_spent_rate_limit_discards_items_at_once(client, make_key, runtime) -> None:
    key = make_key("limited")["key"]
    batch = wait_finished(client, key, submit(client, key, [CHAT] * 3).json["id"])
    assert batch["counts"]["completed"] == 1 and batch["counts"]["discarded"] == 2
    assert {i["error_code"] for i in batch["items"] if i["state"] == "discarded"} == {"rate_limited"}
    assert len(usage_events(runtime, batch["id"])) == 3


def test_an_item_past_the_time_limit_is_stopped_and_discarded(client, make_key, upstream) -> None:
    key = make_key("hanging")["key"]
    upstream.control("sk-batch-hang", mode="hang")
    started = time.monotonic()
    batch = wait_finished(client, key, submit(client, key, [CHAT]).json["id"], timeout=20)
    assert time.monotonic() - started < WORKER_SETTINGS["batch_item_time_limit_s"] + 5
    got = _item(batch)
    assert got["state"] == "discarded" and got["error"] == "time limit exceeded"


def test_cancel_stops_running_items_on_every_worker_and_queued_items_never_run(client, make_key, upstream,
                                                                               runtime, settings) -> None:
    key = make_key("slow")["key"]
    upstream.control("sk-batch-slow", latency_ms=60_000)
    batch = submit(client, key, [CHAT] * 30).json
    running = until(lambda: _running_workers(runtime, batch["id"]), what="items running on both workers")
    assert len(running) == 2
    until(lambda: upstream.stats()["in_flight"] == 8, what="every worker thread calling the upstream")
    res = client.post(f"/v1/batches/{batch['id']}/cancel", headers={"Authorization": f"Bearer {key}"})
    assert res.status_code == 200
    cancelled_at = time.monotonic()
    done = wait_finished(client, key, batch["id"], timeout=5)
    assert time.monotonic() - cancelled_at < 2
    assert done["counts"] == {"queued": 0, "running": 0, "completed": 0, "discarded": 0, "cancelled": 30}
    until(lambda: queue_is_settled(settings), what="every message of the batch consumed and acked")
    assert upstream.stats()["total"] == 8  # one per worker thread; the 22 queued items never reached it
    assert len(usage_events(runtime, batch["id"])) == 30


def test_a_duplicate_message_never_runs_an_item_twice(client, key, upstream, runtime, settings) -> None:
    batch = wait_finished(client, key, submit(client, key, [CHAT]).json["id"])
    message = dramatiq.Message(queue_name=settings.queue_name, actor_name="run_batch_item",
                               args=(batch["id"], 0), kwargs={}, options={})
    conn = pika.BlockingConnection(pika.URLParameters(settings.broker_url))
    try:
        for _ in range(2):
            conn.channel().basic_publish("", settings.queue_name, message.encode(),
                                         pika.BasicProperties(delivery_mode=2))
    finally:
        conn.close()
    until(lambda: queue_is_settled(settings), what="the duplicates consumed and acked")
    assert upstream.stats()["total"] == 1
    assert len(usage_events(runtime, batch["id"])) == 1
    assert get(client, key, f"/v1/batches/{batch['id']}").json["counts"]["completed"] == 1


def queue_is_settled(settings) -> bool:  # type: ignore[no-untyped-def]
    """No message ready or unacknowledged (delivered to a worker and not yet done) in the item queue, as the
    management API reports it (its figures lag a few seconds, so this is waited for, never assumed)."""
    vhost = settings.broker_url.rsplit("/", 1)[1]
    url = f"http://127.0.0.1:{MQ_UI_PORT}/api/queues/{vhost}/{settings.queue_name}"
    stats = requests.get(url, auth=("guest", "guest"), timeout=10).json()
    return stats.get("messages_ready") == 0 and stats.get("messages_unacknowledged") == 0


def _running_workers(runtime, batch_id: str) -> set[str]:  # type: ignore[no-untyped-def]
    with runtime.pool.connection() as conn:
        rows = conn.execute("SELECT DISTINCT worker_id FROM batch_items WHERE batch_id = %s AND state = 'running'",
                            (batch_id,)).fetchall()
    found = {r["worker_id"] for r in rows}
    return found if len(found) >= 2 else set()


