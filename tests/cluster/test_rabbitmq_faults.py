"""RabbitMQ faults on the three-node cluster with quorum queues: the node leading the item queue killed and
restarted, and a worker cut from its node for longer than the heartbeat while its items run."""

from __future__ import annotations

import time

import pytest

from tests.cluster.harness import Cluster, ClusterStack, TcpProxy, db_now, finish_times, resume_after
from tests.reliability.stack import upstream_key

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

THREADS = 8


def test_killing_the_node_that_leads_the_item_queue_loses_nothing_and_runs_nothing_twice(
        clustered: ClusterStack, cluster: Cluster) -> None:
    stack, items = clustered, 1000
    key = stack.new_key("leader")
    stack.upstream.control(upstream_key("leader"), latency_ms=200)
    leader = cluster.leader()
    # Worker A lists the leader first: it must move to another node. B's dispatcher (which publishes only through
    # its first node) keeps publishing.
    a = stack.start_worker(THREADS, **cluster.broker_settings(leader))
    stack.start_worker(THREADS, **cluster.broker_settings(leader % 3 + 1))
    _, a_id = stack.worker_process(a)
    batch_id = stack.submit(key, "leader", items)
    stack.wait_items(batch_id, ("completed",), 100)

    cluster.kill(f"rabbit{leader}")
    killed_at = db_now(stack)
    time.sleep(7)
    new_leader = cluster.leader()
    moved = stack.item_rows(batch_id, "worker_id = %s AND started_at > to_timestamp(%s)", a_id, killed_at + 2)
    cluster.start(f"rabbit{leader}")
    stack.upstream.control(upstream_key("leader"), latency_ms=20)  # the rest quickly

    accounting = stack.account(key, batch_id, "leader", items, timeout=180)
    assert accounting.states() == {"completed": items}
    assert new_leader != leader  # the quorum queue elected another leader
    assert len(moved) >= 2 * THREADS  # A took new items through another node while its first one was down
    assert all(proc.proc.poll() is None for proc in stack.processes)  # no worker died or was restarted
    print(f"leader kill: drain back at half rate {resume_after(finish_times(stack, batch_id), killed_at):.1f} s"
          f" after the kill")


def test_a_worker_cut_from_rabbitmq_past_the_heartbeat_while_its_items_run_runs_nothing_twice(
        clustered: ClusterStack, cluster: Cluster) -> None:
    stack, items = clustered, 200
    key = stack.new_key("mqcut")
    stack.upstream.control(upstream_key("mqcut"), latency_ms=2000)
    proxy = TcpProxy(cluster.mq_port(1))
    try:
        # Only through the proxy, with a 2 s heartbeat: RabbitMQ drops the connection after two silent beats.
        broker_url = proxy.url_for(cluster.broker_settings(1)["broker_url"]) + "?heartbeat=2"
        cut = stack.start_worker(THREADS, broker_url=broker_url, broker_failover_urls="")
        stack.start_worker(THREADS, **cluster.broker_settings(2))
        _, cut_id = stack.worker_process(cut)
        batch_id = stack.submit(key, "mqcut", items)
        stack.wait_for_running(batch_id, cut_id)

        proxy.cut()
        cut_at = db_now(stack)
        time.sleep(10)
        healed_at = db_now(stack)
        proxy.heal()
        stack.upstream.control(upstream_key("mqcut"), latency_ms=50)  # the rest quickly

        accounting = stack.account(key, batch_id, "mqcut", items, timeout=240)
    finally:
        proxy.close()
    assert accounting.states() == {"completed": items}
    finished_while_cut = stack.item_rows(batch_id, "worker_id = %s AND finished_at BETWEEN to_timestamp(%s) AND"
                                         " to_timestamp(%s)", cut_id, cut_at, healed_at)
    assert finished_while_cut  # its items ran on while it was cut off
    assert "connection" in cut.log().lower()  # and it really lost its broker connection
    assert all(proc.proc.poll() is None for proc in stack.processes)
    print(f"broker cut: drain back at half rate {resume_after(finish_times(stack, batch_id), cut_at):.1f} s"
          f" after the cut")
