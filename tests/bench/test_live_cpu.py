"""The in-process live CPU measure runs real live calls through the app and reports a CPU figure and a profile (no
figure is asserted beyond being one)."""

from __future__ import annotations

import os
import re

import pytest

from bench.live_cpu import measure
from devtools.services import ServiceUrls

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ and the fake upstream


@pytest.mark.timeout(600)  # a bound only a hang crosses
def test_the_live_cpu_measure_reports_cpu_per_call_and_where_it_goes(services: ServiceUrls) -> None:
    lines: list[str] = []
    cpus = measure(os.environ.get("RELAY_TEST_DB", "relay_test") + "_livecpu", "real", calls=20, rounds=2, top=10,
                   report=lines.append)
    assert len(cpus) == 2 and all(cpu > 0 for cpu in cpus)
    assert re.search(r"median: \d+\.\d+ ms of CPU per call, best \d+\.\d+ ms \(real policy", "\n".join(lines))
    assert "run_inference" in lines[-1]  # the profile names the pipeline's own functions
