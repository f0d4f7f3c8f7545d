"""At-least-once, never silently dropped: a worker SIGKILLed mid-delivery, and a RabbitMQ restart (private
instances) while deliveries wait for a retry and while an event is recorded with no broker to publish it."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from app.webhooks.store import INTERRUPTED
from devtools.fake_upstream.harness import FakeUpstream
from devtools.stack import Stack
from devtools.waiting import until
from devtools.webhook_receiver import Receiver
from tests.reliability.private_services import PrivateServices
from tests.webhooks.helpers import HOOK_SETTINGS, SLOW_KEY, for_batch, hooks_catalog, submit, wait_delivery

pytestmark = [pytest.mark.faults, pytest.mark.integration]


def test_a_worker_killed_mid_delivery_leaves_it_to_be_delivered_again_with_the_same_webhook_id(
        stack: Stack, receiver: Receiver) -> None:
    settings = {"webhook_timeout_s": 3.0}
    workers = stack.start_worker(threads=4, **settings)
    receiver.behave("/project", delay_s=2.5, times=1)  # the first attempt hangs: the worker dies meanwhile
    batch_id = submit(stack, stack.new_key("hooks"), 1)
    [first] = for_batch(receiver, "/project", batch_id)
    pid, _ = stack.worker_process(workers)
    os.kill(pid, signal.SIGKILL)
    workers.proc.wait(30)  # Dramatiq's CLI stops when one of its processes dies
    stack.start_worker(threads=4, **settings)
    received = for_batch(receiver, "/project", batch_id, count=2, timeout=30)
    assert {r.header("webhook-id") for r in received} == {first.header("webhook-id")}
    detail = wait_delivery(stack, batch_id, "delivered")
    assert detail["attempts"] == 2
    assert detail["attempt_log"][0]["error"] == INTERRUPTED and detail["attempt_log"][1]["status"] == 200


@pytest.fixture()
def private(private_services: PrivateServices, hooks_upstream: FakeUpstream, receiver: Receiver,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A webhook stack on the private Postgres and RabbitMQ, which the test may stop and start."""
    url = private_services.create_database("relay_webhook_faults")
    built = Stack.build(database_url=url, broker_url=private_services.broker_url, upstream=hooks_upstream,
                        workdir=tmp_path_factory.mktemp("private-webhooks"), queue_name="relay.batch_items",
                        catalog=hooks_catalog(hooks_upstream.url, receiver.url), **HOOK_SETTINGS)
    if receiver.proc is None:
        receiver.start()
    receiver.reset()
    yield built
    built.close()


def test_a_rabbitmq_restart_loses_no_delivery_waiting_for_a_retry_or_recorded_meanwhile(
        private: Stack, private_services: PrivateServices, receiver: Receiver) -> None:
    stack = private
    # The slow batch's items run until its cancel stops them, past a broker stop however slow (the faults' 10 s item
    # limit ended them first once, and the cancel found nothing to cancel).
    stack.start_worker(threads=4, batch_item_time_limit_s=600)
    receiver.behave("/project", status=503)
    waiting = submit(stack, stack.new_key("hooks"), 1)
    for_batch(receiver, "/project", waiting, count=2)  # failing: its retry waits in RabbitMQ
    stack.upstream.control(SLOW_KEY, latency_ms=300_000)
    slow = stack.new_key("slow")
    cancelled = submit(stack, slow, 2)
    stack.wait_items(cancelled, ("running",), 2)

    private_services.stop_rabbitmq()
    assert stack.call(slow, "POST", f"/v1/batches/{cancelled}/cancel").status_code == 200
    until(lambda: _events(stack, cancelled) == 1, what="the cancelled batch's event is recorded without a broker")
    receiver.behave("/project", status=200)
    time.sleep(2)  # the outbox and the retries meet the missing broker
    private_services.start_rabbitmq()

    for batch_id in (waiting, cancelled):
        wait_delivery(stack, batch_id, "delivered", timeout=90)
        assert len({r.header("webhook-id") for r in for_batch(receiver, "/project", batch_id)}) == 1
    assert all(proc.proc.poll() is None for proc in stack.processes)  # the worker reconnected, it did not die


def _events(stack: Stack, batch_id: str) -> int:
    return int(stack.db_one("SELECT count(*) AS n FROM webhook_events WHERE batch_id = %s", batch_id)["n"])
