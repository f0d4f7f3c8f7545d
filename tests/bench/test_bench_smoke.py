"""The benchmark code paths run end to end at tiny sizes and produce numbers (no timing is asserted)."""


from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from bench.__main__ import SCENARIOS, run
from bench.sizes import TINY
from devtools.services import ServiceUrls

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream


@pytest.mark.timeout(900)  # thirteen scenarios, each starting its processes: a bound only a hang crosses
def test_every_bench_scenario_produces_numbers(services: ServiceUrls, tmp_path: Path) -> None:
    database = os.environ.get("RELAY_TEST_DB", "relay_test") + "_bench"
    results = run(TINY, list(SCENARIOS), repeat=1, json_path=tmp_path / "latest.json",
                  database=database, log=lambda _: None)
    scenarios = {fig.scenario for fig in results.figures.values()}
    assert scenarios == {"accept", "reads", "live", "live (bare policy)", "slow clients", "drain",
                         "drain (bare policy)", "rate-limited", "slow drain", "cancel", "fair share", "pacing", "files",
                         "object store", "webhooks", "live, tracing off", "live, tracing on", "drain, tracing off",
                         "drain, tracing on", "soak"}
    for fig in results.figures.values():
        assert fig.values and all(math.isfinite(v) for v in fig.values), fig.name
    assert "| scenario |" in results.table()
    assert (tmp_path / "latest.json").exists()
