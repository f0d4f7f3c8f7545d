"""Postgres faults on the cluster, under pg_auto_failover: the primary's node killed mid-batch (the monitor promotes a
synchronous secondary, no human step), a synchronous secondary's node killed (writes go on without it), the old
primary started again (one primary at every moment, nothing of Relay on the old one), and a worker cut from Postgres
while its items run."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import requests

from devtools.cluster.faults import Pace, cut_from_database, fail_over_postgres, kill_standby, restart_old_primary
from devtools.cluster.harness import Cluster, ClusterStack, finish_times, longest_gap, resume_after

# The first test also waits for the session's cluster to start (pg_auto_failover, RabbitMQ: a minute or more).
pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.timeout(1200)]


@pytest.fixture()
def failing_over(clustered: ClusterStack, cluster: Cluster) -> Iterator[ClusterStack]:
    """The cluster stack on a primary with two synchronous secondaries; afterwards all three are back, whatever the
    test killed (a node the test left down is started, and rejoins as a secondary by itself)."""
    cluster.wait_healthy()
    yield clustered
    clustered.stop_processes()
    cluster.restore()


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
    assert cluster.primary() == fault.notes["new_primary"] != fault.notes["old_primary"]
    assert all(proc.proc.poll() is None for proc in stack.processes)  # nothing was restarted to follow it
    for api in fault.notes["apis"]:
        assert requests.get(api.url + "/readyz", timeout=10).status_code == 200
    cluster.start(f"pg-{fault.notes['old_primary']}")  # its machine is back: no other step
    cluster.wait_healthy()  # and the old primary is back as a synchronous secondary, by itself
    assert cluster.role(fault.notes["old_primary"]) == "secondary"
    times = finish_times(stack, fault.batch_id)
    print(f"failover: longest stall {longest_gap(times, fault.began):.1f} s, back at half rate"
          f" {resume_after(times, fault.began):.1f} s after the kill; states {dict(states)}")


def test_the_synchronous_standby_killed_does_not_stop_writes(failing_over: ClusterStack, cluster: Cluster) -> None:
    stack, pace = failing_over, Pace("failover", items=600, during_ms=100, after_ms=20, warmup=100)
    fault = kill_standby(stack, cluster, pace)

    # The whole batch became final while the standby was down: commits did not wait for it.
    assert fault.notes["down_until_final"], "the standby came back before the batch was final"
    accounting = stack.account(fault.key, fault.batch_id, pace.scenario, pace.items, timeout=60)
    assert accounting.states()["completed"] == pace.items  # the primary never went away: nothing discarded
    cluster.wait_healthy()  # the returning standby is synchronous again
    times = finish_times(stack, fault.batch_id)
    print(f"standby killed: longest stall {longest_gap(times, fault.began):.1f} s")


def test_readyz_answers_503_while_no_write_can_commit_and_200_once_they_can(
        failing_over: ClusterStack, cluster: Cluster) -> None:
    # The primary's keeper frozen, then both its synchronous secondaries killed: nothing applies the monitor's
    # wait_primary (synchronous replication off), so every commit waits. The keeper thawed: it applies it, and
    # commits go through.
    (api,) = failing_over.start_apis(1)
    primary = cluster.primary()
    secondaries = [node for node in cluster.members() if node != primary]
    assert requests.get(api.url + "/readyz", timeout=30).status_code == 200
    cluster.freeze_manager(primary)
    try:
        for node in secondaries:
            cluster.kill(f"pg-{node}")
        res = requests.get(api.url + "/readyz", timeout=30)
    finally:
        cluster.freeze_manager(primary, frozen=False)
    assert res.status_code == 503, res.text
    assert res.json()["checks"]["postgres"].startswith("writes stuck:"), res.text
    assert _ready_within(api.url, 60), "readyz stayed 503 after the keeper turned synchronous replication off"


def _ready_within(url: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if requests.get(url + "/readyz", timeout=30).status_code == 200:
            return True
        time.sleep(0.5)
    return False


def test_the_old_primary_started_again_rejoins_as_a_standby_and_relay_never_reaches_it(
        failing_over: ClusterStack, cluster: Cluster) -> None:
    stack, pace = failing_over, Pace("failover", items=1000, during_ms=100, after_ms=20, warmup=100)
    fault = restart_old_primary(stack, cluster, pace)

    watch, old = fault.notes["watch"], fault.notes["old_primary"]
    assert watch.samples and max(watch.primaries()) == 1, f"two primaries at once: {watch.samples}"
    assert max(watch.out_of_recovery()) == 1, f"two nodes out of recovery at once: {watch.samples}"
    after = watch.since_down(old)
    assert after and all(state != "primary" for state, _ in after), f"the old primary took writes again: {after}"
    assert sum(writes for _, writes in after) == 0
    assert cluster.role(old) == "secondary" and cluster.primary() == fault.notes["new_primary"]
    accounting = stack.account(fault.key, fault.batch_id, pace.scenario, pace.items, timeout=60)
    states = accounting.states()
    assert states["completed"] + states["discarded"] == pace.items
    assert states["discarded"] <= 2 * pace.threads  # only items in flight at the kill may be discarded
    times = finish_times(stack, fault.batch_id)
    print(f"old primary restarted: longest stall {longest_gap(times, fault.began):.1f} s (the monitor's detection"
          f" and primary_demote_timeout); {len(watch.samples)} samples, at most {max(watch.primaries())} primary")


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
