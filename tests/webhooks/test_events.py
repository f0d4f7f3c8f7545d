"""Every batch that ends sends its event to a real receiver process: OpenAI-compatible batches exactly OpenAI's events
(the official SDK's `webhooks.unwrap` returns the typed event), Relay's own and Anthropic-compatible batches Relay's
event with the counts (the `standardwebhooks` package verifies it); endpoints get only the types they ask for."""

from __future__ import annotations

import json
import time
from typing import Any
from unittest import mock

import openai
import pytest
import standardwebhooks
from openai.types.webhooks import BatchCancelledWebhookEvent, BatchCompletedWebhookEvent, BatchExpiredWebhookEvent

from devtools.processes import RelayProcess
from devtools.stack import Stack
from devtools.webhook_receiver import Receiver
from tests.webhooks.helpers import (
    PROJECT_SECRET,
    SLOW_KEY,
    TEAM_SECRET,
    batch_uuid,
    create_openai,
    for_batch,
    submit,
    submit_anthropic,
)

pytestmark = pytest.mark.integration


def _sdk(api: RelayProcess, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=api.url + "/v1", api_key=key, webhook_secret=PROJECT_SECRET, max_retries=0)


def _unwrap(client: openai.OpenAI, received: Any) -> Any:
    return client.webhooks.unwrap(received.body, received.headers)


def test_an_openai_batch_run_to_the_end_sends_batch_completed_that_the_sdk_unwraps(
        stack: Stack, worker: RelayProcess, hooks_api: RelayProcess, receiver: Receiver) -> None:
    client = _sdk(hooks_api, stack.new_key("hooks"))
    batch = create_openai(client, 3)
    [received] = for_batch(receiver, "/project", batch.id)
    event = _unwrap(client, received)
    assert isinstance(event, BatchCompletedWebhookEvent)
    assert event.type == "batch.completed" and event.object == "event" and event.id.startswith("evt_")
    assert received.header("webhook-id") == event.id
    retrieved = client.batches.retrieve(event.data.id)  # the id the event names is the SDK's batch
    assert retrieved.id == batch.id and retrieved.status == "completed"
    assert event.created_at == retrieved.completed_at
    assert json.loads(received.body) == {"id": event.id, "object": "event", "created_at": event.created_at,
                                         "type": "batch.completed", "data": {"id": batch.id}}


def test_the_sdk_refuses_a_body_changed_by_one_byte_and_a_replay_after_five_minutes(
        stack: Stack, worker: RelayProcess, hooks_api: RelayProcess, receiver: Receiver) -> None:
    client = _sdk(hooks_api, stack.new_key("hooks"))
    batch = create_openai(client, 1)
    [received] = for_batch(receiver, "/project", batch.id)
    changed = bytearray(received.body)
    changed[-2] = ord("X") if changed[-2] != ord("X") else ord("Y")
    with pytest.raises(openai.InvalidWebhookSignatureError):
        client.webhooks.unwrap(bytes(changed), received.headers)
    with pytest.raises(openai.InvalidWebhookSignatureError):
        client.webhooks.unwrap(received.body, received.headers, secret=TEAM_SECRET)  # another secret
    sent = int(received.header("webhook-timestamp"))
    with mock.patch("time.time", return_value=sent + 301), pytest.raises(openai.InvalidWebhookSignatureError):
        client.webhooks.unwrap(received.body, received.headers)
    assert _unwrap(client, received).data.id == batch.id  # the very same delivery, in time and whole


def test_a_cancelled_openai_batch_sends_batch_cancelled(stack: Stack, worker: RelayProcess,
                                                        hooks_api: RelayProcess, receiver: Receiver) -> None:
    stack.upstream.control(SLOW_KEY, latency_ms=1500)
    client = _sdk(hooks_api, stack.new_key("slow"))
    batch = create_openai(client, 6)
    client.batches.cancel(batch.id)
    [received] = for_batch(receiver, "/project", batch.id)
    event = _unwrap(client, received)
    assert isinstance(event, BatchCancelledWebhookEvent)
    retrieved = client.batches.retrieve(batch.id)
    assert retrieved.status == "cancelled" and event.created_at == retrieved.cancelled_at


def test_an_openai_batch_stopped_by_its_expiry_sends_batch_expired(stack: Stack, worker: RelayProcess,
                                                                   hooks_api: RelayProcess, receiver: Receiver) -> None:
    stack.upstream.control(SLOW_KEY, latency_ms=1000)
    client = _sdk(hooks_api, stack.new_key("slow"))
    batch = create_openai(client, 12)
    with stack.runtime.pool.connection() as conn:  # its 24 h window, run out now: the reaper expires what is queued
        conn.execute("UPDATE batches SET expires_at = now() WHERE id = %s", (batch_uuid(batch.id),))
    [received] = for_batch(receiver, "/project", batch.id)
    event = _unwrap(client, received)
    assert isinstance(event, BatchExpiredWebhookEvent)
    retrieved = client.batches.retrieve(batch.id)
    assert retrieved.status == "expired" and event.created_at == retrieved.expired_at


def test_a_relay_batch_sends_batch_finished_with_its_counts_verified_by_standardwebhooks(
        stack: Stack, worker: RelayProcess, receiver: Receiver) -> None:
    key = stack.new_key("hooks")
    batch_id = submit(stack, key, 3, metadata={"run": "nightly"})
    [received] = for_batch(receiver, "/project", batch_id)
    event = standardwebhooks.Webhook(PROJECT_SECRET).verify(received.body, received.headers)
    batch = stack.read(key, batch_id, limit=0)
    data = event["data"]
    assert event == {"id": received.header("webhook-id"), "object": "event", "type": "batch.finished",
                     "created_at": int(_unix(batch["finished_at"])), "data": {
                         "id": batch_id, "object": "batch", "api": "relay", "status": "queued", "total": 3,
                         "counts": {"completed": 3, "discarded": 0, "cancelled": 0}, "created_at": data["created_at"],
                         "finished_at": data["finished_at"], "metadata": {"run": "nightly"}}}
    assert _unix(event["data"]["finished_at"]) == pytest.approx(_unix(batch["finished_at"]), abs=1e-3)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(TEAM_SECRET).verify(received.body, received.headers)


def test_a_cancelled_relay_batch_and_an_anthropic_batch_send_relay_events(stack: Stack, worker: RelayProcess,
                                                                           receiver: Receiver) -> None:
    stack.upstream.control(SLOW_KEY, latency_ms=1500)
    slow = stack.new_key("slow")
    cancelled = submit(stack, slow, 6)
    assert stack.call(slow, "POST", f"/v1/batches/{cancelled}/cancel").status_code == 200
    anthropic = submit_anthropic(stack, stack.new_key("hooks"), 2)
    verify = standardwebhooks.Webhook(PROJECT_SECRET).verify
    [first] = for_batch(receiver, "/project", cancelled)
    event = verify(first.body, first.headers)
    assert event["type"] == "batch.cancelled" and event["data"]["status"] == "cancelled"
    assert event["data"]["counts"]["cancelled"] >= 1 and sum(event["data"]["counts"].values()) == 6
    [second] = for_batch(receiver, "/project", anthropic)
    event = verify(second.body, second.headers)
    assert event["type"] == "batch.finished" and event["data"]["api"] == "anthropic"
    assert event["data"]["id"] == anthropic and event["data"]["counts"]["completed"] == 2


def test_endpoints_get_only_the_event_types_they_subscribed_and_each_its_own_signature(
        stack: Stack, worker: RelayProcess, receiver: Receiver, apply_catalog: Any) -> None:
    apply_catalog(project=[{"url": f"{receiver.url}/project/all", "secret": PROJECT_SECRET},
                           {"url": f"{receiver.url}/project/cancels", "secret": PROJECT_SECRET,
                            "events": ["batch.cancelled"]}],
                  team=[{"url": f"{receiver.url}/team", "secret": TEAM_SECRET, "events": ["batch.finished"]}])
    stack.upstream.control(SLOW_KEY, latency_ms=1500)
    finished = submit(stack, stack.new_key("hooks"), 1)
    slow = stack.new_key("slow")
    cancelled = submit(stack, slow, 4)
    stack.call(slow, "POST", f"/v1/batches/{cancelled}/cancel")
    for_batch(receiver, "/project/all", finished)
    for_batch(receiver, "/project/all", cancelled)
    for_batch(receiver, "/project/cancels", cancelled)
    [team] = for_batch(receiver, "/team", finished)
    assert standardwebhooks.Webhook(TEAM_SECRET).verify(team.body, team.headers)["type"] == "batch.finished"
    time.sleep(1.0)  # what should not come has had time to
    assert [json.loads(r.body)["data"]["id"] for r in receiver.received("/project/cancels")] == [cancelled]
    assert [json.loads(r.body)["data"]["id"] for r in receiver.received("/team")] == [finished]


def _unix(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
