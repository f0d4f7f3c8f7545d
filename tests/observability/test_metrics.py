"""/metrics on the API (single process here): request counters, recorded metrics, and state read at scrape time."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pika
import pytest
import requests

from app.observability.metrics import (
    count_rate_limited,
    observe_item,
    observe_upstream,
    scrape_registry,
    start_worker_metrics_server,
    worker_metrics_app,
)
from app.observability.metrics_access import serve_in_thread
from app.runtime import Runtime
from devtools.cluster.ports import reserve
from devtools.processes import free_port
from devtools.waiting import until
from tests.observability.helpers import Samples, parse, scrape, value
from tests.usage.conftest import CATALOG as USAGE_CATALOG

pytestmark = pytest.mark.integration
OBS_HOST = {"name": "obs-host", "base_url": "http://127.0.0.1:9",
            "keys": [{"name": "obs-key-ok", "value": "sk-obs-1"}, {"name": "obs-key-broken", "value": "sk-obs-2"},
                     {"name": "obs-key-resting", "value": "sk-obs-3"}]}
# The usage tests' catalog plus one host: applying a catalog replaces the whole of it.
CATALOG = {**USAGE_CATALOG, "hosts": [*USAGE_CATALOG["hosts"], OBS_HOST]}


def test_requests_are_counted_by_route_template_and_status(client) -> None:
    before = scrape(client)
    for _ in range(3):
        assert client.get("/healthz").status_code == 200
    assert client.get("/no/such/route").status_code == 404
    assert client.get(f"/v1/usage/events?credential={uuid.uuid4()}").status_code == 401
    after = scrape(client)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("relay_http_requests_total", method="GET", route="/healthz", status="200") == 3
    assert moved("relay_http_requests_total", method="GET", route="unmatched", status="404") == 1
    assert moved("relay_http_requests_total", method="GET", route="/v1/usage/events", status="401") == 1
    assert moved("relay_http_request_duration_seconds_count", method="GET", route="/healthz") == 3


def test_upstream_latency_rate_limits_and_item_durations_are_exposed(client) -> None:
    before = scrape(client)
    observe_upstream("obs-host", 200, 0.2)
    observe_upstream("obs-host", "error", 1.5)
    count_rate_limited("p-main")
    count_rate_limited("p-main")
    observe_item("completed", 3.0)
    observe_item("discarded", 0.01)
    after = scrape(client)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("relay_upstream_request_duration_seconds_count", host="obs-host", status="200") == 1
    assert moved("relay_upstream_request_duration_seconds_bucket", host="obs-host", status="error", le="2.5") == 1
    assert moved("relay_upstream_request_duration_seconds_bucket", host="obs-host", status="error", le="1.0") == 0
    assert moved("relay_rate_limited_total", policy="p-main") == 2
    assert moved("relay_batch_item_duration_seconds_sum", state="completed") == pytest.approx(3.0)
    assert moved("relay_batch_item_duration_seconds_count", state="discarded") == 1


def test_batch_items_are_counted_by_state_from_the_progress_counters(client, runtime) -> None:
    # Each worker process counts in its own batch_progress row and the API in '' (cancels); queued is the
    # batch's total less everything counted. The gauge sums every counter of every batch.
    before = scrape(client)
    batch_id = uuid.uuid4()
    counters = [("worker-a", 1, 2, 1, 0), ("worker-b", 1, 1, 0, 0), ("", 0, 0, 0, 1)]
    with runtime.pool.connection() as conn:
        conn.execute("INSERT INTO batches (id, shape, total, owner, policy_id, credential_kind, credential_id)"
                     " VALUES (%s, 'openai', 8, 'key:00', %s, 'relay_key', %s)",
                     (batch_id, uuid.uuid4(), uuid.uuid4()))
        for counter, running, completed, discarded, cancelled in counters:
            conn.execute("INSERT INTO batch_progress (batch_id, counter, running, completed, discarded, cancelled)"
                         " VALUES (%s, %s, %s, %s, %s, %s)",
                         (batch_id, counter, running, completed, discarded, cancelled))
    after = scrape(client)
    moved = {s: value(after, "relay_batch_items", state=s) - value(before, "relay_batch_items", state=s)
             for s in ("queued", "running", "completed", "discarded", "cancelled")}
    assert moved == {"queued": 1, "running": 2, "completed": 3, "discarded": 1, "cancelled": 1}
    assert value(after, "relay_metrics_database_up") == 1


def test_breaker_state_is_shown_per_host_key_by_name(client, runtime, settings) -> None:
    res = client.put("/admin/catalog", headers={"Authorization": f"Bearer {settings.admin_token}"},
                     json=CATALOG)
    assert res.status_code == 200, res.json
    with runtime.pool.connection() as conn:
        keys = {r["name"]: r["id"] for r in conn.execute("SELECT id, name FROM host_keys").fetchall()}
        conn.execute("INSERT INTO key_health (host_key_id, consecutive_failures, opened_until) VALUES"
                     " (%s, 4, now() + interval '1 hour'), (%s, 2, now() - interval '1 second')"
                     " ON CONFLICT (host_key_id) DO UPDATE SET consecutive_failures = excluded.consecutive_failures,"
                     " opened_until = excluded.opened_until", (keys["obs-key-broken"], keys["obs-key-resting"]))
    samples = scrape(client)

    def state(key: str) -> str:
        [current] = [s for s in ("closed", "open", "half_open")
                     if value(samples, "relay_host_key_breaker_state", host="obs-host", host_key=key, state=s) == 1]
        return current

    assert (state("obs-key-ok"), state("obs-key-broken"), state("obs-key-resting")) == ("closed", "open", "half_open")
    assert value(samples, "relay_host_key_consecutive_failures", host="obs-host", host_key="obs-key-broken") == 4


def test_queue_depth_is_read_with_a_passive_declare(runtime, settings) -> None:
    queue = f"relay.metrics-test.{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(pika.URLParameters(settings.broker_url))
    try:
        channel = conn.channel()
        channel.confirm_delivery()  # each publish returns once the broker has queued it
        channel.queue_declare(queue=queue, durable=False, auto_delete=False)
        for i in range(3):
            channel.basic_publish(exchange="", routing_key=queue, body=str(i).encode())
        view = Runtime(settings=dataclasses.replace(settings, queue_name=queue), pool=runtime.pool)
        samples = _reachable_scrape(view)
        assert value(samples, "relay_queue_messages", queue=queue) == 3
        assert value(samples, "relay_queue_consumers", queue=queue) == 0
        assert value(samples, "relay_metrics_broker_up") == 1
    finally:
        conn.channel().queue_delete(queue=queue)
        conn.close()


def _reachable_scrape(view: Runtime) -> Samples:
    """The first scrape of VIEW that read the queue: a depth read gives up after DEPTH_TIMEOUT_S (1 s), which a
    loaded test machine can exceed."""
    return until(lambda: parse(_render(view)), lambda samples: value(samples, "relay_metrics_broker_up") == 1,
                 what="a scrape that reached RabbitMQ", timeout=30, every=0.2)


def test_a_queue_nobody_declared_yet_is_empty(runtime, settings) -> None:
    view = Runtime(settings=dataclasses.replace(settings, queue_name="relay.never-declared"), pool=runtime.pool)
    samples = _reachable_scrape(view)
    assert value(samples, "relay_queue_messages", queue="relay.never-declared") == 0
    assert value(samples, "relay_metrics_broker_up") == 1


def test_a_scrape_still_answers_when_rabbitmq_and_postgres_are_down(runtime, settings) -> None:
    closed = f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F"
    view = Runtime(settings=dataclasses.replace(settings, broker_url=closed), pool=_BrokenPool())  # type: ignore[arg-type]
    samples = parse(_render(view))
    assert value(samples, "relay_metrics_broker_up") == 0
    assert value(samples, "relay_metrics_database_up") == 0
    assert not any(name == "relay_batch_items" or name == "relay_queue_messages" for name, _ in samples)


def test_the_worker_metrics_server_serves_on_loopback_once_per_port(runtime, tmp_path) -> None:
    [port] = reserve(1, tmp_path)  # the server takes a port number (0 is off): one outside the ephemeral range
    assert start_worker_metrics_server(runtime, port=port) is True
    assert start_worker_metrics_server(runtime, port=port) is False  # another process already serves it
    assert start_worker_metrics_server(runtime, port=0) is False  # 0 = off
    observe_item("completed", 0.5)
    body = requests.get(f"http://127.0.0.1:{port}/metrics", headers=_admin(runtime), timeout=10).text
    samples = parse(body)
    assert value(samples, "relay_batch_item_duration_seconds_count", state="completed") >= 1
    assert ("relay_batch_items", frozenset({("state", "queued")})) in samples


def test_the_worker_metrics_server_listens_beyond_loopback_only_when_told(runtime, tmp_path) -> None:
    """In a Kubernetes pod Prometheus scrapes the pod's address: RELAY_WORKER_METRICS_HOST=0.0.0.0 (the chart)."""
    default_port, open_port = reserve(2, tmp_path)
    assert start_worker_metrics_server(runtime, port=default_port) is True
    with pytest.raises(requests.ConnectionError):  # 127.0.0.2 is another address: 127.0.0.1 alone does not answer
        requests.get(f"http://127.0.0.2:{default_port}/metrics", timeout=10)
    pod = dataclasses.replace(runtime, settings=dataclasses.replace(runtime.settings, worker_metrics_host="0.0.0.0"))
    assert start_worker_metrics_server(pod, port=open_port) is True
    assert requests.get(f"http://127.0.0.2:{open_port}/metrics", headers=_admin(runtime), timeout=10).status_code == 200


def test_the_worker_metrics_port_answers_only_the_metrics_or_admin_token(runtime) -> None:
    metrics_token = "metrics-" + uuid.uuid4().hex
    view = dataclasses.replace(runtime, settings=dataclasses.replace(runtime.settings, metrics_token=metrics_token))
    url = f"http://127.0.0.1:{serve_in_thread(worker_metrics_app(view), '127.0.0.1', 0)}/metrics"
    for headers, code in (({}, "missing_credential"), ({"Authorization": "Bearer rk_not-a-metrics-token"},
                                                         "invalid_credential"),
                          ({"Authorization": f"Bearer {metrics_token}x"}, "invalid_credential")):
        res = requests.get(url, headers=headers, timeout=10)
        assert res.status_code == 401 and res.json()["error"]["code"] == code, res.text[:200]
        assert res.headers["WWW-Authenticate"].startswith("Bearer") and "relay_" not in res.text
    for token in (metrics_token, runtime.settings.admin_token):
        res = requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert res.status_code == 200 and "relay_batch_items" in res.text


def _admin(runtime: Runtime) -> dict[str, str]:
    return {"Authorization": f"Bearer {runtime.settings.admin_token}"}


class _BrokenPool:
    def connection(self, timeout: float | None = None) -> Any:
        raise ConnectionError("postgres is down")


def _render(runtime: Runtime) -> str:
    from prometheus_client import generate_latest

    return generate_latest(scrape_registry(runtime)).decode()


def test_metrics_are_served_only_for_the_metrics_token_or_the_admin_token(client, runtime, monkeypatch) -> None:
    metrics_token = "metrics-" + uuid.uuid4().hex
    monkeypatch.setattr(runtime, "settings", dataclasses.replace(runtime.settings, metrics_token=metrics_token))
    for headers, code in (({}, "missing_credential"), ({"Authorization": "Bearer rk_not-a-metrics-token"},
                                                         "invalid_credential"),
                          ({"Authorization": f"Bearer {metrics_token}x"}, "invalid_credential"),
                          ({"x-api-key": runtime.settings.secret_key}, "invalid_credential")):
        res = client.get("/metrics", headers=headers)
        assert res.status_code == 401 and res.json["error"]["code"] == code, res.get_data(as_text=True)[:200]
        assert res.headers["WWW-Authenticate"].startswith("Bearer") and b"relay_" not in res.get_data()
    for token in (metrics_token, runtime.settings.admin_token):
        res = client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        assert res.status_code == 200 and b"relay_http_requests" in res.get_data()
