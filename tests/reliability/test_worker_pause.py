"""A worker process paused (SIGSTOP: a stopped container, a long GC) past the silence threshold, while the upstream
answers its items: it keeps its running items (its session still holds its lock, so it is not judged lost) and
records their answers with the tokens the upstream counted when it resumes; the unstarted items of the messages it
holds (several items a message: items are fast and the backlog deep) run on the other worker while it is stopped.
One whose session ends while it is paused is judged lost as before, and its answers' usage is recorded late."""

from __future__ import annotations

import os
import signal
import time

import pytest

from devtools.stack import Stack, upstream_key
from devtools.waiting import until

pytestmark = [pytest.mark.faults, pytest.mark.integration]

ITEMS = 400
THREADS = 4
PAUSE_S = 8.0  # at least: past the silence threshold (RELAY_WORKER_LOST_AFTER_S 5 s here) ...
PAUSE_MAX_S = 60.0  # ... and until the rest is final, at most this long (a bound only a stall crosses: a loaded CI
# machine once had one item left at 15 s, its message published again maybe into the stopped worker's free prefetch)
SETTINGS = {"batch_item_time_limit_s": 120}  # the pause must not be what stops its items


def test_a_paused_worker_loses_no_answered_item_and_its_prefetch_runs_elsewhere(shared: Stack) -> None:
    stack = shared
    key = stack.new_key("pause")
    stack.upstream.control(upstream_key("pause"), latency_ms=10)
    stack.start_worker(threads=THREADS, **SETTINGS)
    victim = stack.start_worker(threads=THREADS, **SETTINGS)
    pid, worker_id = stack.worker_process(victim)
    batch_id = stack.submit(key, "pause", ITEMS)
    stack.wait_items(batch_id, ("completed",), 150)  # items are known fast here now: several to a message
    stack.wait_for_running(batch_id, worker_id)
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        time.sleep(0.5)  # a claim it sent just before it stopped commits meanwhile
        held = {r["idx"] for r in stack.item_rows(batch_id, "state = 'running' AND worker_id = %s", worker_id)}
        final = 0
        while time.monotonic() - stopped < PAUSE_S or (final < ITEMS - len(held)
                                                        and time.monotonic() - stopped < PAUSE_MAX_S):
            final = stack.count_items(batch_id, "completed", "discarded")
            time.sleep(0.2)
        still = {r["idx"] for r in stack.item_rows(batch_id, "state = 'running' AND worker_id = %s", worker_id)}
        left = stack.item_rows(batch_id, "state NOT IN ('completed', 'discarded') AND NOT idx = ANY(%s)", sorted(held))
    finally:
        os.kill(pid, signal.SIGCONT)
    assert held and still == held  # not judged lost: its session (and lock) outlived the silence
    assert final == ITEMS - len(held), (f"{final} final of {ITEMS} while {len(held)} ran on the stopped worker",
                                        left, stack.db_one("SELECT now() AS now"))
    accounting = stack.account(key, batch_id, "pause", ITEMS)
    assert dict(accounting.states()) == {"completed": ITEMS}, accounting.error_codes()
    kept = stack.item_rows(batch_id, "idx = ANY(%s) AND worker_id = %s", sorted(held), worker_id)
    assert len(kept) == len(held)  # recorded by the worker that ran them, once it resumed
    usage = stack.db_one("SELECT count(*) FILTER (WHERE input_tokens > 0 AND output_tokens > 0) AS counted"
                         " FROM usage_events WHERE batch_id = %s", batch_id)
    assert usage["counted"] == ITEMS  # every answer's usage is what the upstream counted


def test_a_worker_judged_lost_while_paused_records_what_the_upstream_counted_when_it_resumes(shared: Stack) -> None:
    stack = shared
    key = stack.new_key("pause")
    stack.upstream.control(upstream_key("pause"), latency_ms=10)
    stack.start_worker(threads=THREADS, **SETTINGS)
    victim = stack.start_worker(threads=THREADS, **SETTINGS)
    pid, worker_id = stack.worker_process(victim)
    batch_id = stack.submit(key, "pause", 200)
    stack.wait_items(batch_id, ("completed",), 20)
    stack.wait_for_running(batch_id, worker_id)
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(0.5)  # a claim it sent just before it stopped commits meanwhile
        held = sorted(r["idx"] for r in stack.item_rows(batch_id, "state = 'running' AND worker_id = %s", worker_id))
        # its sessions end, as a host's that is gone would: the one holding its lock, and any stopped inside a
        # transaction (a final write it had begun), which would keep its items' rows locked from the reaper
        assert stack.end_sessions(pid) >= 1
        until(lambda: not stack.db_one("SELECT relay_worker_session(%s) AS held", worker_id)["held"],
              what="its session lock released")
        # Every held item ends: judged lost, or (a final state it sent just before it stopped, committed late on a
        # busy machine) completed.
        until(lambda: stack.item_rows(batch_id, "idx = ANY(%s) AND state = 'running'", held), lambda rows: not rows,
              what="its items judged lost")
        lost = stack.item_rows(batch_id, "idx = ANY(%s) AND error_code = 'worker_lost'", held)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert held and lost
    counted = until(lambda: stack.db_one(
        "SELECT count(*) AS n FROM usage_events WHERE batch_id = %s AND batch_idx = ANY(%s) AND input_tokens > 0"
        " AND output_tokens > 0 AND cost_nanos > 0", batch_id, held)["n"], lambda n: n == len(held),
        what="the late answers' usage")
    assert counted == len(held)  # still worker_lost (one final state), but charged what the upstream counted
    stack.account(key, batch_id, "pause", 200)  # one usage event per item, none sent twice
