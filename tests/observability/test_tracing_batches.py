"""A batch's traces, exported for real by the API (in this process) and by a `relay worker` process (through the
SDK's standard environment) to the same receiver: the submit's span, its trace context stored with the batch and
carried in the RabbitMQ message's options, and one trace per item, linked to the submit, with the spans of a live
call inside it and the upstream parented on its attempt."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import dramatiq
import pika
import pytest

from actors.publisher import TRACE_OPTION, encode_items
from app.runtime import Runtime
from devtools.otlp_receiver import ReceivedSpan
from devtools.processes import RelayProcess, start_workers
from devtools.webhook_receiver import Receiver
from tests.batches.helpers import wait_finished
from tests.observability.conftest import LOOPBACK_CALLBACKS
from tests.observability.tracing_helpers import attribute_texts, by_name, one, parent_of

pytestmark = pytest.mark.integration
CALLBACK_SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
CHAT = {"model": "tr-gpt", "messages": [{"role": "user", "content": "an item"}]}


@pytest.fixture(scope="module")
def traced_workers(settings_env, runtime, relay_key, receiver, tmp_path_factory) -> Iterator[RelayProcess]:  # type: ignore[no-untyped-def]
    """One `relay worker` process, tracing on through the standard variables, exporting to the receiver."""
    env = {**settings_env, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SERVICE_NAME": "relay-worker-test",
           "OTEL_BSP_SCHEDULE_DELAY": "100",
           **{f"RELAY_{name.upper()}": value for name, value in LOOPBACK_CALLBACKS.items()}}
    proc = start_workers(env, tmp_path_factory.mktemp("traced-workers"), runtime, processes=1, threads=2)
    yield proc
    proc.stop()


def test_an_item_message_carries_the_submits_trace_context_in_its_options() -> None:
    traceparent = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
    message = dramatiq.Message.decode(encode_items("q", UUID(int=7), [0, 1], traceparent))
    assert message.options == {TRACE_OPTION: traceparent} and message.args == (str(UUID(int=7)), [0, 1])
    assert dramatiq.Message.decode(encode_items("q", UUID(int=7), [0])).options == {}


def test_each_item_of_a_batch_is_a_trace_of_its_own_linked_to_the_submit(
        traced, relay_key, receiver, traced_upstream, traced_workers, runtime) -> None:  # type: ignore[no-untyped-def]
    client, api_runtime = traced[0].test_client(), traced[1]
    caller_trace = secrets.token_hex(16)
    since = max([r["seq"] for r in traced_upstream.requests()] or [0])
    res = client.post("/v1/batches", json={"shape": "openai", "requests": [CHAT] * 3},
                      headers={"Authorization": f"Bearer {relay_key}",
                               "traceparent": f"00-{caller_trace}-{secrets.token_hex(8)}-01"})
    assert res.status_code == 202, res.json
    batch_id = res.json["id"]
    assert wait_finished(client, relay_key, batch_id)["counts"]["completed"] == 3
    assert api_runtime.services["tracing"].flush()
    spans = receiver.wait_for(lambda spans: len(_items(spans, batch_id)) == 3
                              and len({s.trace_id for s in by_name(spans, "relay.usage")
                                       if s.trace_id in {i.trace_id for i in _items(spans, batch_id)}}) == 3)

    submitted = one([s for s in spans if s.trace_id == caller_trace], "POST /v1/batches")
    assert submitted.attributes["relay.batch.id"] == batch_id and submitted.attributes["relay.batch.items"] == 3
    assert parent_of(_stored_context(runtime, batch_id)) == (caller_trace, submitted.span_id)
    items = _items(spans, batch_id)
    assert sorted(i.attributes["relay.batch.idx"] for i in items) == [0, 1, 2]
    assert len({i.trace_id for i in items}) == 3 and caller_trace not in {i.trace_id for i in items}
    calls = {c["traceparent"].split("-")[1]: c for c in traced_upstream.requests(since=since)}
    for item in items:
        assert item.parent_id == "" and item.links == ((caller_trace, submitted.span_id),)
        assert item.service == "relay-worker-test" and item.kind == "consumer"
        own = [s for s in spans if s.trace_id == item.trace_id]
        route, attempt, usage = one(own, "relay.route"), one(own, "relay.attempt"), one(own, "relay.usage")
        assert route.parent_id == attempt.parent_id == usage.parent_id == item.span_id
        assert usage.attributes["relay.usage.deferred"] is True
        upstream_call = one(own, "chat gpt-4o-mini")
        assert upstream_call.parent_id == attempt.span_id
        assert parent_of(calls[item.trace_id]["traceparent"]) == (item.trace_id, upstream_call.span_id)


def test_an_item_message_without_the_trace_context_takes_it_from_the_batch_row(
        traced, relay_key, receiver, traced_workers, settings) -> None:  # type: ignore[no-untyped-def]
    client, caller_trace = traced[0].test_client(), secrets.token_hex(16)
    res = client.post("/v1/batches", json={"shape": "openai", "requests": [CHAT]}, headers={
        "Authorization": f"Bearer {relay_key}", "traceparent": f"00-{caller_trace}-{secrets.token_hex(8)}-01"})
    assert res.status_code == 202, res.json
    batch_id = res.json["id"]
    wait_finished(client, relay_key, batch_id)
    # as the lost-message sweep publishes it: no options (its item is final already, so the claim finds nothing)
    with pika.BlockingConnection(pika.URLParameters(settings.broker_url)) as conn:
        conn.channel().basic_publish("", settings.queue_name, encode_items(settings.queue_name, UUID(batch_id), [0]),
                                     pika.BasicProperties(delivery_mode=2))
    assert traced[1].services["tracing"].flush()
    spans = receiver.wait_for(lambda spans: len(_items(spans, batch_id)) == 2)
    submitted = one([s for s in spans if s.trace_id == caller_trace], "POST /v1/batches")
    assert [i.links for i in _items(spans, batch_id)] == [((caller_trace, submitted.span_id),)] * 2


def test_a_webhook_delivery_is_a_trace_of_its_own_linked_to_the_submit(
        traced, relay_key, receiver, traced_workers, tmp_path) -> None:  # type: ignore[no-untyped-def]
    hooks = Receiver(log_path=tmp_path / "receiver.log").start()
    try:
        client, caller_trace = traced[0].test_client(), secrets.token_hex(16)
        res = client.post("/v1/batches", json={"shape": "openai", "requests": [CHAT],
                                               "callback_url": f"{hooks.url}/ended",
                                               "callback_secret": CALLBACK_SECRET},
                          headers={"Authorization": f"Bearer {relay_key}",
                                   "traceparent": f"00-{caller_trace}-{secrets.token_hex(8)}-01"})
        assert res.status_code == 202, res.json
        hooks.wait("/ended")
    finally:
        hooks.stop()
    assert traced[1].services["tracing"].flush()
    spans = receiver.wait_for(lambda spans: any(s.links and s.links[0][0] == caller_trace
                                                for s in by_name(spans, "relay.webhook.delivery")))
    submitted = one([s for s in spans if s.trace_id == caller_trace], "POST /v1/batches")
    [delivery] = [s for s in by_name(spans, "relay.webhook.delivery") if s.links[0][0] == caller_trace]
    assert delivery.links == ((caller_trace, submitted.span_id),) and delivery.parent_id == ""
    assert delivery.trace_id != caller_trace and delivery.attributes["relay.webhook.retry_in_s"] == -1


def test_no_span_of_a_batch_or_its_webhook_holds_a_secret(receiver, relay_key, settings) -> None:  # type: ignore[no-untyped-def]
    texts = attribute_texts(receiver.spans())
    assert any("relay.batch.idx" in t for t in texts) and any("relay.webhook" in t for t in texts)
    for secret in (CALLBACK_SECRET, relay_key, "sk-tr-first", "sk-tr-second", settings.admin_token,
                   settings.secret_key):
        assert not any(secret in t for t in texts), f"a span attribute holds {secret[:12]}..."


def _items(spans: list[ReceivedSpan], batch_id: str) -> list[ReceivedSpan]:
    return [s for s in by_name(spans, "relay.batch_item") if s.attributes.get("relay.batch.id") == batch_id]


def _stored_context(runtime: Runtime, batch_id: str) -> Any:
    with runtime.pool.connection() as conn:
        row = conn.execute("SELECT trace_context FROM batches WHERE id = %s", (batch_id,)).fetchone()
    return row["trace_context"]
