"""RabbitMQ and Postgres restarted mid-batch (private instances): workers, dispatcher and pools recover by
themselves, every item ends final with one usage event, and none is sent upstream twice."""

from __future__ import annotations

import time

import pytest

from devtools.stack import Stack, upstream_key
from tests.reliability.private_services import PrivateServices

pytestmark = [pytest.mark.faults, pytest.mark.integration]

ITEMS = 600
# RabbitMQ's stop takes seconds on a loaded machine (it once outlasted a 600-item batch): about 12 s of items
RESTART_ITEMS = 2000
THREADS = 8
WINDOW = 100  # the dispatcher publishes in steps all through the run, so it too meets the fault


def test_a_rabbitmq_restart_mid_batch_loses_nothing_and_runs_nothing_twice(
        private: Stack, private_services: PrivateServices) -> None:
    stack = private
    key = stack.new_key("rabbitmq")
    stack.upstream.control(upstream_key("rabbitmq"), latency_ms=100)
    stack.start_worker(threads=THREADS, dispatch_window=WINDOW)
    stack.start_worker(threads=THREADS, dispatch_window=WINDOW)
    batch_id = stack.submit(key, "rabbitmq", RESTART_ITEMS)
    stack.wait_items(batch_id, ("completed",), 100)

    private_services.stop_rabbitmq()
    stopped = stack.count_items(batch_id, "completed", "discarded")
    time.sleep(1)  # items already held keep running while the broker is away
    private_services.start_rabbitmq()

    accounting = stack.account(key, batch_id, "rabbitmq", RESTART_ITEMS, timeout=180)
    assert accounting.states() == {"completed": RESTART_ITEMS}
    assert stopped < RESTART_ITEMS  # the restart really happened mid-batch
    assert all(proc.proc.poll() is None for proc in stack.processes)  # the workers reconnected, none died
    assert stack.app.test_client().get("/readyz").status_code == 200


def test_a_postgres_restart_mid_batch_leaves_every_item_final_and_accounted_for(
        private: Stack, private_services: PrivateServices) -> None:
    stack = private
    key = stack.new_key("postgres")
    stack.upstream.control(upstream_key("postgres"), latency_ms=100)
    stack.start_worker(threads=THREADS, dispatch_window=WINDOW)
    stack.start_worker(threads=THREADS, dispatch_window=WINDOW)
    batch_id = stack.submit(key, "postgres", ITEMS)
    stack.wait_items(batch_id, ("completed",), 100)

    before = stack.count_items(batch_id, "completed", "discarded")
    private_services.stop_postgres()
    time.sleep(8)  # longer than RELAY_WORKER_LOST_AFTER_S: every heartbeat goes stale meanwhile
    private_services.start_postgres()

    accounting = stack.account(key, batch_id, "postgres", ITEMS, timeout=180)
    assert before < ITEMS
    states = accounting.states()
    assert states["completed"] + states["discarded"] == ITEMS
    assert states["completed"] >= ITEMS - 2 * THREADS  # only items in flight at the restart may be discarded
    assert "worker_lost" not in accounting.error_codes()  # both workers lived: stale heartbeats were the outage
    assert all(proc.proc.poll() is None for proc in stack.processes)
    assert stack.app.test_client().get("/readyz").status_code == 200  # this process's pool recovered too
