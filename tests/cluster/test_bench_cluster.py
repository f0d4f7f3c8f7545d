"""The cluster bench's code runs end to end at a tiny size on the session's cluster (no timing is asserted), and
its measures of a fault read the finish times and the watch's samples as they say."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from bench.cluster import run
from devtools.cluster.harness import Cluster, longest_gap, resume_after
from devtools.cluster.pgnodes import PrimaryWatch

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.timeout(1200)]  # with the cluster's start


def test_the_cluster_bench_drains_on_one_node_and_on_the_cluster_and_reports_both(cluster: Cluster) -> None:
    database = os.environ.get("RELAY_TEST_DB", "relay_test") + "_cluster_bench"  # this run's own, as every test's
    results = run(cluster, items=60, repeat=1, fault_names=(), fault_items=60, database=database, log=lambda _: None)
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


def test_the_watch_dates_a_promotion_by_its_first_sample_taking_writes_after_the_old_primary_was_found_down(
        tmp_path: Path) -> None:
    watch = PrimaryWatch(Cluster(tmp_path), "postgresql://postgres@127.0.0.1:1/relay")
    states = [("primary", "standby"), ("down", "standby"), ("down", "read-only"), ("down", "primary"),
              ("standby", "primary")]
    watch.samples = [{"a": (a, 0), "b": (b, 0)} for a, b in states]
    watch.times = [100.0, 100.6, 101.1, 102.8, 103.3]
    assert watch.promoted_at("a") == 102.8  # not 100.0 (a was the primary), nor 101.1 (b took no write yet)
    assert watch.promoted_at("b") is None  # b never went down
    assert watch.longest_gap() == pytest.approx(1.7)
    assert watch.primaries() == [1, 0, 0, 1, 1]
    assert watch.out_of_recovery() == [1, 0, 1, 1, 1]
