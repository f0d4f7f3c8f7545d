"""Postgres faults on the cluster: the primary killed mid-batch and its synchronous standby promoted, and a worker cut
from Postgres while its items run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from devtools.cluster.faults import Pace, cut_from_database, fail_over_postgres
from devtools.cluster.harness import Cluster, ClusterStack, finish_times, resume_after

pytestmark = [pytest.mark.cluster, pytest.mark.integration]


@pytest.fixture()
def failing_over(clustered: ClusterStack, cluster: Cluster) -> Iterator[ClusterStack]:
    """The cluster stack; afterwards the killed primary comes back as the new primary's synchronous standby."""
    before = cluster.primary()
    assert cluster.synchronous_standbys() == 1
    yield clustered
    if cluster.primary() != before:
        clustered.stop_processes()
        cluster.rejoin(before)


def test_the_primary_killed_mid_batch_fails_over_to_the_standby_without_losing_a_committed_outcome(
        failing_over: ClusterStack, cluster: Cluster) -> None:
    stack, pace = failing_over, Pace("failover", items=1000, during_ms=100, after_ms=20, warmup=150)
    fault = fail_over_postgres(stack, cluster, pace)

    accounting = stack.account(fault.key, fault.batch_id, pace.scenario, pace.items, timeout=180)
    committed: dict[int, str] = fault.notes["committed"]
    lost = {idx: state for idx, state in committed.items() if accounting.items[idx]["state"] != state}
    assert not lost, f"outcomes committed before the failover and gone after it: {lost}"
    states = accounting.states()
    assert states["completed"] + states["discarded"] == pace.items
    assert states["discarded"] <= 2 * pace.threads  # only items in flight at the kill may be discarded
    assert "worker_lost" not in accounting.error_codes()
    assert cluster.primary() == fault.notes["new_primary"]
    assert all(proc.proc.poll() is None for proc in stack.processes)  # nothing was restarted to follow it
    for api in fault.notes["apis"]:
        assert requests.get(api.url + "/readyz", timeout=10).status_code == 200
    print(f"failover: drain back at half rate {resume_after(finish_times(stack, fault.batch_id), fault.began):.1f} s"
          f" after the kill; states {dict(states)}")


def test_a_worker_cut_from_postgres_while_its_items_run_ends_each_with_one_final_state_and_one_usage_event(
        clustered: ClusterStack, cluster: Cluster) -> None:
    # A cut past RELAY_WORKER_LOST_AFTER_S (5 s): the cut worker's heartbeat is stale, but its session (through the
    # proxy) still holds its lock, so the reaper keeps its items. And past the server's
    # idle_in_transaction_session_timeout (10 s), should the cut catch the worker inside a transaction holding the
    # reaper's lock.
    pace = Pace("pgcut", items=200, during_ms=1500, after_ms=50, warmup=0)  # cut as soon as it runs items
    fault = cut_from_database(clustered, cluster, pace, cut_s=15)

    accounting = clustered.account(fault.key, fault.batch_id, pace.scenario, pace.items, timeout=60)
    # Each item the cut worker was running, its request already upstream, ended once: completed by the worker when
    # the link came back, its answer kept (account() counted one usage event per item and no second upstream
    # call). An item whose session the server ended (idle in transaction past 10 s) may still be reaped.
    items = accounting.items
    outcomes = {idx: items[idx]["error_code"] or items[idx]["state"] for idx in fault.notes["sent"]}
    assert set(outcomes.values()) <= {"worker_lost", "completed"}, outcomes
    assert "completed" in outcomes.values(), f"none of the cut worker's answers was kept: {outcomes}"
    assert set(accounting.error_codes()) <= {"worker_lost"}
    late = clustered.item_rows(fault.batch_id, "error_code = 'worker_lost' AND started_at >= to_timestamp(%s)",
                               fault.ended)
    assert not late, f"items claimed after the link came back were judged lost: {late}"  # its claims say it lives
    print(f"database cut: {list(outcomes.values()).count('worker_lost')} of {len(outcomes)} items in flight reaped;"
          f" drain back at half rate {resume_after(finish_times(clustered, fault.batch_id), fault.began):.1f} s")
