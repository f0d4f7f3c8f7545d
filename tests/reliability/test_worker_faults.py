"""Worker processes dying or stopping mid-batch: nothing accepted is lost, nothing runs twice upstream."""

from __future__ import annotations

import os
import signal

import pytest

from devtools.stack import Stack, upstream_key

pytestmark = [pytest.mark.faults, pytest.mark.integration]

ITEMS = 600
THREADS = 8


def test_a_worker_killed_mid_batch_loses_only_its_running_items_and_the_rest_complete(shared: Stack) -> None:
    stack = shared
    key = stack.new_key("kill")
    stack.upstream.control(upstream_key("kill"), latency_ms=200)
    doomed = stack.start_worker(threads=THREADS)
    stack.start_worker(threads=THREADS)
    pid, doomed_id = stack.worker_process(doomed)
    batch_id = stack.submit(key, "kill", ITEMS)
    stack.wait_items(batch_id, ("completed",), 100)
    stack.wait_for_running(batch_id, doomed_id)

    os.kill(pid, signal.SIGKILL)  # the process running the items, as the OOM killer would
    doomed.proc.wait(30)  # Dramatiq's CLI exits when one of its worker processes dies

    accounting = stack.account(key, batch_id, "kill", ITEMS)
    lost = stack.item_rows(batch_id, "error_code = 'worker_lost'")
    assert 1 <= len(lost) <= THREADS
    assert {row["worker_id"] for row in lost} == {doomed_id}
    assert all(accounting.items[row["idx"]]["error"].startswith("worker lost") for row in lost)
    assert accounting.states() == {"completed": ITEMS - len(lost), "discarded": len(lost)}


def test_a_worker_stopped_with_sigterm_finishes_what_it_holds_and_the_rest_run_elsewhere(shared: Stack) -> None:
    stack = shared
    key = stack.new_key("term")
    stack.upstream.control(upstream_key("term"), latency_ms=200)
    leaving = stack.start_worker(threads=THREADS)
    stack.start_worker(threads=THREADS)
    _, leaving_id = stack.worker_process(leaving)
    batch_id = stack.submit(key, "term", ITEMS)
    stack.wait_items(batch_id, ("completed",), 100)
    stack.wait_for_running(batch_id, leaving_id)

    leaving.proc.send_signal(signal.SIGTERM)  # the main process only, as a container runtime does
    assert leaving.proc.wait(60) == 0
    exited_at = stack.db_one("SELECT now() AS t")["t"]

    accounting = stack.account(key, batch_id, "term", ITEMS)
    assert accounting.states() == {"completed": ITEMS}  # graceful: nothing discarded, nothing lost
    # Everything the leaving worker started, it finished itself (no item left running or taken over) ...
    started_there = stack.item_rows(batch_id, "worker_id = %s", leaving_id)
    assert started_there and all(row["state"] == "completed" for row in started_there)
    # ... and what it held but had not started went back to the queue and ran on the other worker.
    afterwards = stack.item_rows(batch_id, "started_at > %s", exited_at)
    assert afterwards and {row["worker_id"] for row in afterwards}.isdisjoint({leaving_id})
