"""Every Postgres connection of the workers killed again and again mid-batch (`pg_terminate_backend`, as a
failover or a pooler restart does): an item that had not reached the upstream when its connection dropped is
claimed or tried again, never discarded, so every item completes once."""

from __future__ import annotations

import time

import psycopg
import pytest

from devtools.stack import Stack, upstream_key

pytestmark = [pytest.mark.faults, pytest.mark.integration]

ITEMS = 1200
THREADS = 8


def kill_connections(stack: Stack) -> int:
    """Terminate every session of the stack's database but this one; how many."""
    with psycopg.connect(stack.settings.database_url, autocommit=True) as conn:
        row = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                           " WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()
    return int(row[0]) if row else 0


def test_connections_killed_mid_batch_discard_no_item_that_never_reached_the_upstream(shared: Stack) -> None:
    stack = shared
    key = stack.new_key("dbdrop")
    stack.upstream.control(upstream_key("dbdrop"), latency_ms=100)
    stack.start_worker(threads=THREADS, dispatch_window=100)
    stack.start_worker(threads=THREADS, dispatch_window=100)
    batch_id = stack.submit(key, "dbdrop", ITEMS)
    stack.wait_items(batch_id, ("completed",), 50)

    killed, mid_batch = [], 0
    for _ in range(8):
        mid_batch += stack.count_items(batch_id, "completed", "discarded") < ITEMS
        killed.append(kill_connections(stack))
        time.sleep(0.4)
    assert mid_batch >= 3  # the kills really were mid-batch (a fast machine may finish before the last ones)

    accounting = stack.account(key, batch_id, "dbdrop", ITEMS, timeout=180)
    assert killed[0] > 0 and sum(1 for n in killed if n) >= len(killed) // 2  # (a round may find them all gone)
    discarded = [idx for idx, item in accounting.items.items() if item["state"] != "completed"]
    unsent = [idx for idx in discarded if accounting.calls[idx] == 0]
    assert not unsent, f"items discarded without reaching the upstream: {[accounting.items[i] for i in unsent]}"
