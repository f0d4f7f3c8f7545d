"""The suite's tiers and its parallel groups, assigned by folder and fixture here (never by hand per test).

Tiers (pytest markers, registered in pyproject.toml):
- `unit`: no service at all (pure functions, schemas, adapters, docs);
- `engine`: the real Postgres and RabbitMQ in this process (the Flask app, a Runtime, the group writer);
- `process`: starts Relay's own processes (`relay api`, `relay worker`, whole stacks, the browser);
- `slow`: the process tests that take minutes (fault injection, the cluster, the console, fuzzing, benchmarks).
  The default local `scripts/test.sh` deselects it; `CI=true` runs everything.

Parallel groups (pytest-xdist, `--dist loadgroup`): every file is marked one group, the cluster's and the console's
folders one each; under pytest 9.2 the scheduler does not read the marks, so each test is scheduled on its own (see
docs/development.md, `scripts/test.sh`: scheduling by file replaces a folder's session catalog under it). A test
using one of SPREAD_FIXTURES is a group of its own, so the bench's scenarios would spread over the processes (each
builds that session fixture once for those it runs).
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
# Folders whose tests start Relay's processes by their fixtures or helpers.
PROCESS_DIRS = {"batches", "bench", "cluster", "console", "fuzz", "live", "pipeline", "reliability", "security",
                "webhooks", "deploy"}
# Folders that take minutes: skipped by the default local run.
SLOW_DIRS = {"bench", "cluster", "console", "fuzz", "reliability"}
SLOW_MARKS = {"faults", "cluster"}
# Fixtures that start Relay's processes, wherever a test uses them.
PROCESS_FIXTURES = {"relay_api", "workers", "stack", "private_stack", "replicas", "cluster_stack", "console",
                    "fuzz_stack", "security_stack", "seaweedfs"}
# Folders whose tests share one expensive session fixture, or a fixed folder: one xdist group each (the cluster;
# the console's browser, its stack and its screenshots folder, test-artifacts/console).
SHARED_GROUPS = {"cluster", "console"}
# Session fixtures every process may build once for itself: the tests using one spread (a group each).
SPREAD_FIXTURES = {"bench_env"}


def _folder(item: pytest.Item) -> str:
    try:
        parts = item.path.resolve().relative_to(ROOT).parts
    except ValueError:
        return ""
    return parts[0] if len(parts) > 1 else ""


def tiers(item: pytest.Item) -> list[str]:
    """The tier of ITEM (`unit`, `engine` or `process`), plus `slow`: its folder and the fixtures it uses decide."""
    folder = _folder(item)
    slow = folder in SLOW_DIRS or any(item.get_closest_marker(mark) for mark in SLOW_MARKS)
    fixtures = set(getattr(item, "fixturenames", ()))
    if slow or folder in PROCESS_DIRS or fixtures & PROCESS_FIXTURES:
        return ["process", "slow"] if slow else ["process"]
    return ["engine"] if "services" in fixtures else ["unit"]


def group(item: pytest.Item) -> str:
    """The xdist group of ITEM: its folder for SHARED_GROUPS, itself if it uses one of SPREAD_FIXTURES, else its
    file."""
    folder = _folder(item)
    if folder in SHARED_GROUPS:
        return folder
    if SPREAD_FIXTURES & set(getattr(item, "fixturenames", ())):
        return item.nodeid.replace("[", "(").replace("]", ")")  # no "]": xdist reads a group after the last one
    return str(item.path.resolve().relative_to(ROOT.parent)) if item.path.is_relative_to(ROOT.parent) else item.nodeid


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for name in tiers(item):
            item.add_marker(getattr(pytest.mark, name))
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group(item)))
