"""The cluster bench's code runs end to end at a tiny size on the session's cluster (no timing is asserted), and
its two measures of a fault read the finish times as they say."""

from __future__ import annotations

import math

import pytest

from bench.cluster import run
from devtools.cluster.harness import Cluster, longest_gap, resume_after

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.timeout(1200)]  # with the cluster's start


def test_the_cluster_bench_drains_on_one_node_and_on_the_cluster_and_reports_both(cluster: Cluster) -> None:
    results = run(cluster, items=60, repeat=1, fault_names=(), fault_items=60, log=lambda _: None)
    names = [fig.name for fig in results.figures.values()]
    assert any(n.endswith("one node: items/s") for n in names)
    cluster_rate = next(fig for fig in results.figures.values() if fig.name.endswith("cluster: items/s"))
    assert cluster_rate.ratio is not None  # against the one-node drain of the same run
    assert {n.rsplit(", ", 1)[1] for n in names if "CPU" in n} == {"relay", "postgres", "rabbitmq"}
    assert all(fig.values and all(math.isfinite(v) for v in fig.values) for fig in results.figures.values())


def test_a_drain_that_pauses_is_back_once_items_finish_at_half_the_earlier_rate_again() -> None:
    before = [i * 0.1 for i in range(100)]  # 10 items/s up to the fault at t = 10
    after = [14.0 + i * 0.2 for i in range(20)]  # nothing for 4 s, then 5 items/s: half the rate
    assert longest_gap(before + after, 10.0) == pytest.approx(4.0)
    assert resume_after(before + after, 10.0) == pytest.approx(4.8)  # the 5th item of the first full second
    assert resume_after(before, 10.0) == math.inf
