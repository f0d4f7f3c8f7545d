"""RELAY_QUEUE_TYPE=quorum on the local RabbitMQ node: the item queue, its delay queue (.DQ) and its dead-letter
queue (.XQ) are quorum queues, a batch runs on them end to end, and a queue of the other type stops the worker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pika
import pytest
import requests

from devtools.processes import RelayProcess, start_relay, start_workers
from tests.batches.conftest import WORKER_SETTINGS
from tests.batches.helpers import CHAT, results, submit, usage_events, wait_finished
from tests.conftest import TEST_DB

QUORUM_QUEUE = f"relay.batch_items.{TEST_DB}.quorum"


def rabbitmq_queue(services: Any, name: str) -> dict[str, Any]:
    """The management API's view of queue NAME in the test vhost."""
    res = requests.get(f"{services.mq_api}/queues/{quote(services.vhost, safe='')}/{quote(name, safe='')}",
                       auth=("guest", "guest"), timeout=10)
    res.raise_for_status()
    return res.json()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def quorum_workers(settings_env, runtime, catalog, tmp_path_factory) -> Iterator[RelayProcess]:  # type: ignore[no-untyped-def]
    proc = start_workers(settings_env, tmp_path_factory.mktemp("quorum-workers"), runtime, processes=2, threads=4,
                         queue_name=QUORUM_QUEUE, queue_type="quorum", **WORKER_SETTINGS)
    yield proc
    proc.stop()


def test_a_batch_runs_end_to_end_on_a_quorum_queue(client, key, runtime, upstream, services, quorum_workers) -> None:
    upstream.reset()
    batch = wait_finished(client, key, submit(client, key, [CHAT] * 30).json["id"])
    assert batch["counts"]["completed"] == 30
    assert all(r["response"]["object"] == "chat.completion" for r in results(client, key, batch["id"]))
    assert [e["status"] for e in usage_events(runtime, batch["id"])] == [200] * 30
    assert upstream.stats()["total"] == 30
    main = rabbitmq_queue(services, QUORUM_QUEUE)
    assert main["type"] == "quorum" and main["durable"]
    assert main["arguments"]["x-dead-letter-routing-key"] == f"{QUORUM_QUEUE}.XQ"
    assert rabbitmq_queue(services, f"{QUORUM_QUEUE}.DQ")["type"] == "quorum"
    dead_letters = rabbitmq_queue(services, f"{QUORUM_QUEUE}.XQ")
    assert dead_letters["type"] == "quorum" and dead_letters["arguments"]["x-message-ttl"] > 0


def test_a_worker_asked_for_quorum_on_an_existing_classic_queue_stops_at_start_and_says_why(
        settings_env, services, tmp_path) -> None:  # type: ignore[no-untyped-def]
    queue = f"relay.batch_items.{TEST_DB}.was-classic"
    conn = pika.BlockingConnection(pika.URLParameters(services.broker_url))
    try:
        conn.channel().queue_declare(queue=queue, durable=True, arguments={  # as a classic worker declared it
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": f"{queue}.XQ"})
    finally:
        conn.close()
    env = {**settings_env, "RELAY_QUEUE_NAME": queue, "RELAY_QUEUE_TYPE": "quorum"}
    worker = start_relay(["worker", "-p", "1", "-t", "1"], env, tmp_path / "worker.log")
    try:
        code = worker.proc.wait(timeout=90)
    finally:
        worker.stop()
    assert code != 0
    log = worker.log()
    assert "QueueTypeMismatch" in log and "inequivalent arg 'x-queue-type'" in log
    assert "cannot change in place" in log
    assert rabbitmq_queue(services, queue)["type"] == "classic"
