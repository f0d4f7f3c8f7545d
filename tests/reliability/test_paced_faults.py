"""The fault suite on a paced batch: a worker killed, RabbitMQ restarted while items wait for their limits' budget.
Nothing accepted is lost, nothing runs twice, and no item is discarded rate_limited."""

from __future__ import annotations

import os
import signal
import time

import pytest

from devtools.stack import Stack, upstream_key
from tests.reliability.private_services import PrivateServices

pytestmark = [pytest.mark.faults, pytest.mark.integration]

ITEMS = 500  # at 100 items/s (the paced policy's batch share), about 5 s: the fault meets items still waiting
THREADS = 8
# RabbitMQ's stop takes seconds on a loaded machine (it once outlasted a 500-item batch): 15 s of paced items
RESTART_ITEMS = 1500


def test_a_worker_killed_mid_paced_batch_loses_only_its_running_items(shared: Stack) -> None:
    stack = shared
    key = stack.new_key("paced-kill")
    stack.upstream.control(upstream_key("paced-kill"), latency_ms=50)
    doomed = stack.start_worker(threads=THREADS)
    stack.start_worker(threads=THREADS)
    pid, doomed_id = stack.worker_process(doomed)
    batch_id = stack.submit(key, "paced-kill", ITEMS)
    stack.wait_items(batch_id, ("completed",), 100)
    stack.wait_for_running(batch_id, doomed_id)

    os.kill(pid, signal.SIGKILL)
    doomed.proc.wait(30)

    accounting = stack.account(key, batch_id, "paced-kill", ITEMS)
    codes = accounting.error_codes()
    assert "rate_limited" not in codes
    assert set(codes) <= {"worker_lost"} and codes["worker_lost"] <= THREADS
    assert accounting.states()["completed"] >= ITEMS - THREADS


def test_a_rabbitmq_restart_mid_paced_batch_loses_nothing_and_runs_nothing_twice(
        private: Stack, private_services: PrivateServices) -> None:
    stack = private
    key = stack.new_key("paced-rabbitmq")
    stack.upstream.control(upstream_key("paced-rabbitmq"), latency_ms=50)
    stack.start_worker(threads=THREADS)
    stack.start_worker(threads=THREADS)
    batch_id = stack.submit(key, "paced-rabbitmq", RESTART_ITEMS)
    stack.wait_items(batch_id, ("completed",), 100)

    private_services.stop_rabbitmq()
    stopped = stack.count_items(batch_id, "completed", "discarded")
    time.sleep(1)
    private_services.start_rabbitmq()

    accounting = stack.account(key, batch_id, "paced-rabbitmq", RESTART_ITEMS, timeout=180)
    assert accounting.states() == {"completed": RESTART_ITEMS}  # none discarded: not rate_limited, not lost
    assert stopped < RESTART_ITEMS
    assert all(proc.proc.poll() is None for proc in stack.processes)
