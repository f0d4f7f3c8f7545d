"""Postgres faults on the cluster: the primary killed mid-batch and its synchronous standby promoted, and a worker cut
from Postgres while its items run."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import requests

from tests.cluster.harness import Cluster, ClusterStack, TcpProxy, db_now, finish_times, resume_after
from tests.reliability.stack import upstream_key

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

THREADS = 8


@pytest.fixture()
def failing_over(clustered: ClusterStack, cluster: Cluster) -> Iterator[ClusterStack]:
    """The cluster stack; afterwards the killed primary comes back as the new primary's synchronous standby."""
    before = cluster.primary()
    yield clustered
    if cluster.primary() != before:
        clustered.stop_processes()
        cluster.rejoin(before)


def test_the_primary_killed_mid_batch_fails_over_to_the_standby_without_losing_a_committed_outcome(
        failing_over: ClusterStack, cluster: Cluster) -> None:
    stack, items = failing_over, 1000
    key = stack.new_key("failover")
    stack.upstream.control(upstream_key("failover"), latency_ms=100)
    apis = stack.start_apis(2)
    stack.start_worker(THREADS, **cluster.broker_settings(2))
    stack.start_worker(THREADS, **cluster.broker_settings(3))
    assert cluster.synchronous_standbys() == 1
    batch_id = stack.submit(key, "failover", items)
    stack.wait_items(batch_id, ("completed",), 150)

    committed = _final_states(stack, batch_id)  # read from the primary a moment before it dies
    _, new = cluster.fail_over()
    failed_at = db_now(stack)

    accounting = stack.account(key, batch_id, "failover", items, timeout=180)
    lost = {idx: state for idx, state in committed.items() if accounting.items[idx]["state"] != state}
    assert not lost, f"outcomes committed before the failover and gone after it: {lost}"
    states = accounting.states()
    assert states["completed"] + states["discarded"] == items
    assert states["discarded"] <= 2 * THREADS  # only items in flight at the kill may be discarded
    assert "worker_lost" not in accounting.error_codes()
    assert cluster.primary() == new
    assert all(proc.proc.poll() is None for proc in stack.processes)  # nothing was restarted to follow it
    for api in apis:
        assert requests.get(api.url + "/readyz", timeout=10).status_code == 200
    print(f"failover: drain back at half rate {resume_after(finish_times(stack, batch_id), failed_at):.1f} s"
          f" after the kill; states {dict(states)}")


def _final_states(stack: ClusterStack, batch_id: str) -> dict[int, str]:
    rows = stack.item_rows(batch_id, "state IN ('completed', 'discarded', 'cancelled')")
    with stack.runtime.pool.connection() as conn:
        charged = {r["batch_idx"] for r in conn.execute(
            "SELECT batch_idx FROM usage_events WHERE batch_id = %s", (batch_id,)).fetchall()}
    assert {r["idx"] for r in rows} <= charged  # a final state is committed with its usage event
    return {int(r["idx"]): str(r["state"]) for r in rows}


def test_a_worker_cut_from_postgres_while_its_items_run_ends_each_with_one_final_state_and_one_usage_event(
        clustered: ClusterStack, cluster: Cluster) -> None:
    stack, items = clustered, 200
    key = stack.new_key("pgcut")
    stack.upstream.control(upstream_key("pgcut"), latency_ms=1500)
    proxy = TcpProxy(cluster.pg_port(cluster.primary()))
    try:
        cut = stack.start_worker(THREADS, database_url=proxy.url_for(cluster.node_url(cluster.primary())),
                                 **cluster.broker_settings(2))
        stack.start_worker(THREADS, **cluster.broker_settings(3))
        _, cut_id = stack.worker_process(cut)
        batch_id = stack.submit(key, "pgcut", items)
        sent = _running_and_sent(stack, batch_id, cut_id, "pgcut", at_least=THREADS // 2)

        proxy.cut()
        cut_at = db_now(stack)
        # Past RELAY_WORKER_LOST_AFTER_S (5 s), and past the server's idle_in_transaction_session_timeout (10 s)
        # should the cut have caught the worker inside a transaction holding the reaper's lock.
        time.sleep(15)
        healed_at = db_now(stack)
        proxy.heal()
        stack.upstream.control(upstream_key("pgcut"), latency_ms=50)  # the rest quickly

        accounting = stack.account(key, batch_id, "pgcut", items, timeout=180)
    finally:
        proxy.close()
    # Each item the cut worker was running, its request already upstream, ended once: discarded by the reaper
    # (the upstream answered, and may charge for it, but the answer is dropped) or completed by the worker when
    # the link came back, never both (account() counted one usage event per item and no second upstream call).
    outcomes = {idx: accounting.items[idx]["error_code"] or accounting.items[idx]["state"] for idx in sent}
    assert set(outcomes.values()) <= {"worker_lost", "completed"}, outcomes
    assert "worker_lost" in outcomes.values(), f"none of the cut worker's items was reaped: {outcomes}"
    assert set(accounting.error_codes()) <= {"worker_lost"}
    late = stack.item_rows(batch_id, "error_code = 'worker_lost' AND started_at >= to_timestamp(%s)", healed_at)
    assert not late, f"items claimed after the link came back were judged lost: {late}"  # its claims say it lives
    print(f"database cut: {list(outcomes.values()).count('worker_lost')} of {len(sent)} items in flight reaped;"
          f" drain back at half rate {resume_after(finish_times(stack, batch_id), cut_at):.1f} s after the cut")


def _running_and_sent(stack: ClusterStack, batch_id: str, worker_id: str, tag: str, at_least: int,
                      timeout: float = 30) -> list[int]:
    """Wait until WORKER_ID runs AT_LEAST items of the batch whose requests the upstream has received; their idxs."""
    deadline = time.monotonic() + timeout
    while True:
        running = {r["idx"] for r in stack.item_rows(batch_id, "state = 'running' AND worker_id = %s", worker_id)}
        sent = sorted(running & set(stack.upstream_calls(tag)))
        if len(sent) >= at_least:
            return sent
        if time.monotonic() > deadline:
            raise AssertionError(f"worker {worker_id} has {len(sent)} items upstream, wanted {at_least}")
        time.sleep(0.05)
