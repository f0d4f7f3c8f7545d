"""The benchmark code paths run end to end at tiny sizes and produce numbers (no timing is asserted): one test per
scenario, each its own parallel group (tests/tiers.py), on one bench environment per test process; and `run`, the
command's loop, on a scenario of its own."""


from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.__main__ import SCENARIOS, run
from bench.env import BenchEnv
from bench.report import Results
from bench.sizes import TINY
from devtools.services import ServiceUrls

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream

# The rows of the table each scenario fills (a row is a figure's scenario).
ROWS: dict[str, set[str]] = {
    "accept": {"accept"}, "reads": {"reads"}, "live": {"live", "live (bare policy)"}, "slowclients": {"slow clients"},
    "drain": {"drain", "drain (bare policy)"}, "ratelimit": {"rate-limited"}, "slow": {"slow drain"},
    "cancel": {"cancel"}, "fairshare": {"fair share"}, "pacing": {"pacing"}, "pacedlive": {"pacing"},
    "files": {"files"}, "objectstore": {"object store"}, "webhooks": {"webhooks"}, "hungwebhooks": {"webhooks"},
    "pacedowners": {"fair share"}, "soak": {"soak"},
    "tracing": {"live, tracing off", "live, tracing on", "drain, tracing off", "drain, tracing on"}}


@pytest.fixture(scope="session")
def bench_env(services: ServiceUrls) -> Iterator[BenchEnv]:
    """The bench's environment at the tiny sizes (its own database and vhost, a fake upstream, `relay api`), once
    for the scenarios this test process runs: each scenario starts and stops the workers it needs."""
    env = BenchEnv.create(TINY, name=os.environ.get("RELAY_TEST_DB", "relay_test") + "_bench")
    yield env
    env.close()


def test_the_scenarios_fill_every_row_of_the_table() -> None:
    assert set(ROWS) == set(SCENARIOS)
    assert set().union(*ROWS.values()) == {
        "accept", "reads", "live", "live (bare policy)", "slow clients", "drain", "drain (bare policy)",
        "rate-limited", "slow drain", "cancel", "fair share", "pacing", "files", "object store", "webhooks",
        "live, tracing off", "live, tracing on", "drain, tracing off", "drain, tracing on", "soak"}


@pytest.mark.timeout(600)  # a scenario, its processes started on a loaded machine: a bound only a hang crosses
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_bench_scenario_produces_numbers(name: str, bench_env: BenchEnv, tmp_path: Path) -> None:
    results = Results()
    SCENARIOS[name](bench_env, TINY, 1, results)
    _assert_numbers(results, ROWS[name], tmp_path / "latest.json")


@pytest.mark.timeout(600)
def test_the_bench_command_runs_its_scenarios_on_an_environment_of_its_own(services: ServiceUrls,
                                                                           tmp_path: Path) -> None:
    database = os.environ.get("RELAY_TEST_DB", "relay_test") + "_bench_run"
    results = run(TINY, ["accept", "reads"], repeat=1, json_path=tmp_path / "latest.json", database=database,
                  log=lambda _: None)
    _assert_numbers(results, ROWS["accept"] | ROWS["reads"], None)
    assert (tmp_path / "latest.json").exists()


def _assert_numbers(results: Results, rows: set[str], json_path: Path | None) -> None:
    """RESULTS fill exactly ROWS, every figure with finite values, and make a table (and JSON at JSON_PATH)."""
    assert {fig.scenario for fig in results.figures.values()} == rows
    for fig in results.figures.values():
        assert fig.values and all(math.isfinite(v) for v in fig.values), fig.name
    assert "| scenario |" in results.table()
    if json_path is not None:
        results.write_json(json_path, "python -m bench")
        assert json_path.exists()
