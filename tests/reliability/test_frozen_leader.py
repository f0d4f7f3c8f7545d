"""A worker process frozen (SIGSTOP: a paused VM or container, a publish blocked by a broker alarm) while it holds
the dispatcher's leadership: its transaction is ended by Postgres after a few seconds, and a healthy worker keeps
the batch draining."""

from __future__ import annotations

import os
import signal
import time

import psycopg
import pytest

from app.batches.dispatch import DISPATCH_LOCK
from devtools.processes import tcp_sockets
from devtools.stack import Stack, upstream_key

pytestmark = [pytest.mark.faults, pytest.mark.integration]

ITEMS = 1500
THREADS = 8
FROZEN_S = 15.0


def ports_of(pids: list[int]) -> dict[int, int]:
    """The local port of every TCP socket of PIDS, and whose it is."""
    return {local: pid for pid in pids for local, _ in tcp_sockets(pid)}


def leader_port(conn: psycopg.Connection) -> int | None:
    """The client port of the session holding the dispatcher's advisory lock, if one holds it now."""
    row = conn.execute("SELECT a.client_port FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                       " WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 0 AND l.objid = %s",
                       (DISPATCH_LOCK,)).fetchone()
    return int(row[0]) if row and row[0] is not None else None


def freeze_the_leader(conn: psycopg.Connection, pids: list[int], timeout: float = 60) -> int:
    """SIGSTOP the worker process caught holding the dispatcher's lock; its pid. A pass holds the lock for a few
    milliseconds, on one of its process's pooled connections: their ports are read from /proc once (again for a
    port not seen yet), so that the stop follows the sighting at once, not after a read of /proc (on a loaded
    machine, long enough for every pass to have let go: a run once never caught one in 60 s)."""
    deadline = time.monotonic() + timeout
    owners: dict[int, int] = {}
    while time.monotonic() < deadline:
        port = leader_port(conn)
        if port is None:
            continue
        if port not in owners:
            owners = ports_of(pids)
            continue
        os.kill(owners[port], signal.SIGSTOP)
        if leader_port(conn) == port:
            return owners[port]
        os.kill(owners[port], signal.SIGCONT)  # it let go before it stopped: try again
    raise AssertionError("never caught a worker holding the dispatcher's lock")


def test_a_worker_frozen_while_it_leads_the_dispatcher_does_not_stall_the_others(shared: Stack) -> None:
    stack = shared
    key = stack.new_key("freeze")
    stack.upstream.control(upstream_key("freeze"), latency_ms=20)
    first, second = stack.start_worker(threads=THREADS, dispatch_window=40), \
        stack.start_worker(threads=THREADS, dispatch_window=40)
    pids = [stack.worker_process(first)[0], stack.worker_process(second)[0]]
    batch_id = stack.submit(key, "freeze", ITEMS)
    stack.wait_items(batch_id, ("completed",), 20)
    with psycopg.connect(stack.settings.database_url, autocommit=True) as conn:
        frozen = freeze_the_leader(conn, pids)
    try:
        before = stack.count_items(batch_id, "completed", "discarded")
        time.sleep(FROZEN_S)
        during = stack.count_items(batch_id, "completed", "discarded") - before
    finally:
        os.kill(frozen, signal.SIGCONT)
    assert during >= 200, f"only {during} items became final in {FROZEN_S:.0f}s while one worker was frozen"
    accounting = stack.account(key, batch_id, "freeze", ITEMS, timeout=180)
    # It keeps its running items while its session lives (a pause is not a death), and the item time limit (10 s
    # here) counts the time it runs, not the 15 s pause: their answers, there when it resumes, are kept (they ended
    # `time_limit_exceeded` before). Only should Postgres end its session meanwhile would they be `worker_lost`.
    codes = accounting.error_codes()
    assert set(codes) <= {"worker_lost"} and sum(codes.values()) <= THREADS, codes
