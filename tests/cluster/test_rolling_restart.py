"""A rolling restart of every `relay api` and `relay worker` replica on the cluster during a batch: each is stopped
gracefully (SIGTERM to its main process) and started again before the next goes, and nothing is lost."""

from __future__ import annotations

import pytest

from devtools.cluster.faults import Pace, rolling_restart
from devtools.cluster.harness import Cluster, ClusterStack, finish_times, longest_gap

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.timeout(1200)]  # with the cluster's start


def test_a_rolling_restart_of_every_api_and_worker_during_a_batch_loses_nothing(
        clustered: ClusterStack, cluster: Cluster) -> None:
    pace = Pace("rolling", items=1000, during_ms=2000, after_ms=20)  # slow while the replicas restart
    fault = rolling_restart(clustered, cluster, pace)

    accounting = clustered.account(fault.key, fault.batch_id, pace.scenario, pace.items, timeout=180)
    assert fault.notes["final_when_back"] < pace.items  # the batch ran all through the restarts
    assert fault.notes["exits"] == [0, 0]  # each worker group stopped gracefully: its items finished
    assert accounting.states() == {"completed": pace.items}
    print(f"rolling restart: longest pause in the drain"
          f" {longest_gap(finish_times(clustered, fault.batch_id), fault.began):.2f} s")
