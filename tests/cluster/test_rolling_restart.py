"""A rolling restart of every `relay api` and `relay worker` replica on the cluster during a batch: each is stopped
gracefully (SIGTERM to its main process) and started again before the next goes, and nothing is lost."""

from __future__ import annotations

import signal

import pytest

from tests.cluster.harness import Cluster, ClusterStack, db_now, finish_times, longest_gap
from tests.reliability.stack import upstream_key

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

THREADS = 8


def test_a_rolling_restart_of_every_api_and_worker_during_a_batch_loses_nothing(
        clustered: ClusterStack, cluster: Cluster) -> None:
    stack, items = clustered, 1200
    key = stack.new_key("rolling")
    stack.upstream.control(upstream_key("rolling"), latency_ms=500)  # slow while the replicas restart
    apis = stack.start_apis(2)
    workers = {2: stack.start_worker(THREADS, **cluster.broker_settings(2)),
               3: stack.start_worker(THREADS, **cluster.broker_settings(3))}
    batch_id = stack.submit(key, "rolling", items)
    stack.wait_items(batch_id, ("completed",), 100)
    started_at = db_now(stack)

    for i, old in enumerate(apis):  # the other replica serves meanwhile
        old.stop(signal.SIGTERM)
        stack.processes.remove(old)
        stack.api_urls[i] = stack.start_api().url
    for node, old in workers.items():  # the other worker group runs the batch meanwhile
        old.stop(signal.SIGTERM)
        stack.processes.remove(old)
        assert old.proc.returncode == 0, old.log()[-2000:]  # a graceful stop: its items finished
        stack.start_worker(THREADS, **cluster.broker_settings(node))
    restarted = stack.count_items(batch_id, "completed", "discarded", "cancelled")
    stack.upstream.control(upstream_key("rolling"), latency_ms=20)  # then the rest quickly

    accounting = stack.account(key, batch_id, "rolling", items, timeout=180)
    assert restarted < items  # the batch ran all through the restarts
    assert accounting.states() == {"completed": items}
    print(f"rolling restart: longest pause in the drain {longest_gap(finish_times(stack, batch_id), started_at):.2f} s")
