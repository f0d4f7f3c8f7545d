"""RabbitMQ faults on the three-node cluster with quorum queues: the node leading the item queue killed and
restarted, and a worker cut from its node for longer than the heartbeat while its items run."""

from __future__ import annotations

import pytest

from devtools.cluster.faults import Pace, cut_from_broker, kill_queue_leader
from devtools.cluster.harness import Cluster, ClusterStack, finish_times, resume_after

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.timeout(1200)]  # with the cluster's start


def test_killing_the_node_that_leads_the_item_queue_loses_nothing_and_runs_nothing_twice(
        clustered: ClusterStack, cluster: Cluster) -> None:
    # enough items that group B alone cannot finish them while group A moves (40 items/s: 37 s)
    pace = Pace("leader", items=1600, during_ms=200, after_ms=20)
    fault = kill_queue_leader(clustered, cluster, pace, moved_at_least=2 * pace.threads)

    accounting = clustered.account(fault.key, fault.batch_id, pace.scenario, pace.items, timeout=180)
    assert accounting.states() == {"completed": pace.items}
    assert fault.notes["new_leader"] != fault.notes["leader"]  # the quorum queue elected another leader
    # The group whose first node died took new items through another node while it was down.
    assert len(fault.notes["moved"]) >= 2 * pace.threads
    assert all(proc.proc.poll() is None for proc in clustered.processes)  # no worker died or was restarted
    print(f"leader kill: drain back at half rate"
          f" {resume_after(finish_times(clustered, fault.batch_id), fault.began):.1f} s after the kill")


def test_a_worker_cut_from_rabbitmq_past_the_heartbeat_while_its_items_run_runs_nothing_twice(
        clustered: ClusterStack, cluster: Cluster) -> None:
    pace = Pace("mqcut", items=200, during_ms=2000, after_ms=50, warmup=0)  # cut as soon as it runs items
    fault = cut_from_broker(clustered, cluster, pace)

    accounting = clustered.account(fault.key, fault.batch_id, pace.scenario, pace.items, timeout=60)
    assert accounting.states() == {"completed": pace.items}
    ran_while_cut = clustered.item_rows(fault.batch_id, "worker_id = %s AND finished_at BETWEEN to_timestamp(%s)"
                                        " AND to_timestamp(%s)", fault.notes["worker_id"], fault.began, fault.ended)
    assert ran_while_cut  # its items ran on while it was cut off
    assert "connection" in fault.notes["worker"].log().lower()  # and it really lost its broker connection
    assert all(proc.proc.poll() is None for proc in clustered.processes)
    print(f"broker cut: drain back at half rate"
          f" {resume_after(finish_times(clustered, fault.batch_id), fault.began):.1f} s after the cut")
