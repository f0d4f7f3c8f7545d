"""An upstream that hangs or resets connections mid-batch: the affected items are discarded with a clear error
after one attempt each, the worker threads are freed, and the rest of the batch completes."""

from __future__ import annotations

import pytest

from devtools.stack import Stack, upstream_key

pytestmark = [pytest.mark.faults, pytest.mark.integration]

ITEMS = 600
TIME_LIMIT_S = 3
FAULTY_CALLS = 24


def test_items_on_a_hanging_upstream_are_stopped_at_the_time_limit_and_the_rest_complete(shared: Stack) -> None:
    stack = shared
    key = stack.new_key("hang")
    stack.upstream.control(upstream_key("hang"), latency_ms=100)
    stack.start_worker(batch_item_time_limit_s=TIME_LIMIT_S)
    stack.start_worker(batch_item_time_limit_s=TIME_LIMIT_S)
    batch_id = stack.submit(key, "hang", ITEMS)
    stack.wait_items(batch_id, ("completed",), 100)

    stack.upstream.control(upstream_key("hang"), mode="hang", times=FAULTY_CALLS)  # the next calls never answer

    accounting = stack.account(key, batch_id, "hang", ITEMS)
    assert accounting.states() == {"completed": ITEMS - FAULTY_CALLS, "discarded": FAULTY_CALLS}
    assert accounting.error_codes() == {"time_limit_exceeded": FAULTY_CALLS}
    stopped = [i for i in accounting.items.values() if i["state"] == "discarded"]
    assert all(i["error"] == "time limit exceeded" and accounting.calls[i["idx"]] == 1 for i in stopped)
    assert stack.upstream.stats()["in_flight"] == 0  # every hanging call was cut, none left open


def test_items_on_an_upstream_that_resets_connections_fail_once_each_and_the_rest_complete(shared: Stack) -> None:
    stack = shared
    key = stack.new_key("reset")
    stack.upstream.control(upstream_key("reset"), latency_ms=100)
    stack.start_worker()
    stack.start_worker()
    batch_id = stack.submit(key, "reset", ITEMS)
    stack.wait_items(batch_id, ("completed",), 100)

    stack.upstream.control(upstream_key("reset"), mode="reset", times=FAULTY_CALLS)

    accounting = stack.account(key, batch_id, "reset", ITEMS)
    assert accounting.states() == {"completed": ITEMS - FAULTY_CALLS, "discarded": FAULTY_CALLS}
    failed = [i for i in accounting.items.values() if i["state"] == "discarded"]
    assert {i["error_code"] for i in failed} == {"all_keys_failed"}
    assert all(accounting.calls[i["idx"]] == 1 for i in failed)  # one attempt: the pool has one key
