"""The suite's tiers and its parallel groups, assigned by folder and fixture here (never by hand per test).

Tiers (pytest markers, registered in pyproject.toml):
- `unit`: no service at all (pure functions, schemas, adapters, docs);
- `engine`: the real Postgres and RabbitMQ in this process (the Flask app, a Runtime, the group writer);
- `process`: starts Relay's own processes (`relay api`, `relay worker`, whole stacks, the browser);
- `slow`: the process tests that take minutes (fault injection, the cluster, the console, fuzzing, benchmarks), and
  any file that took SLOW_SHARE or more of the recorded run (below). The default local `scripts/test.sh` deselects
  it; `CI=true` runs everything.

Parallel groups (pytest-xdist, `--dist loadgroup`): every file is one group, the cluster's and the console's folders
one each, so a module's processes start once, one run starts one local cluster, and the console has one browser
and one screenshots folder. The group reaches the scheduler in the test's node id (`schedule_by_group`; under
pytest 9.2 pytest-xdist 3.8's own way no longer does, and every test was scheduled alone). A worker then runs
several folders' files in turn, so a folder that applies catalogs has a database of its own (tests/databases.py,
docs/development.md). A test using one of SPREAD_FIXTURES is a group of its own, so the bench's scenarios and the fuzz
tests spread over the processes (each builds that session fixture once for those it runs).

Record (tests/timings.json, written by `python -m devtools.test_timings` from a run's JUnit report): the seconds
each file took. A file that took SLOW_SHARE of the recorded run or more is `slow`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _pytest.nodeid import NodeId

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
SPREAD_FIXTURES = {"bench_env", "fuzz_stack"}
TIMINGS = ROOT / "timings.json"
# A file that took this share of the recorded run or more is slow too, wherever it is (a CLI file whose tests each
# start processes, the slow clients' deadlines): the default local run stays short.
SLOW_SHARE = 0.015


def _folder(item: pytest.Item) -> str:
    try:
        parts = item.path.resolve().relative_to(ROOT).parts
    except ValueError:
        return ""
    return parts[0] if len(parts) > 1 else ""


def tiers(item: pytest.Item, slow_files: frozenset[str] = frozenset()) -> list[str]:
    """The tier of ITEM (`unit`, `engine` or `process`), plus `slow`: its folder, its marks and the fixtures it uses
    decide, and so does its file's share of the recorded run (SLOW_FILES: recorded_slow's)."""
    folder = _folder(item)
    slow = folder in SLOW_DIRS or any(item.get_closest_marker(mark) for mark in SLOW_MARKS)
    fixtures = set(getattr(item, "fixturenames", ()))
    if slow or folder in PROCESS_DIRS or fixtures & PROCESS_FIXTURES:
        tier = "process"
    else:
        tier = "engine" if "services" in fixtures else "unit"
    return [tier, "slow"] if slow or _file(item) in slow_files else [tier]


def recorded_slow(seconds: dict[str, float]) -> frozenset[str]:
    """The files that took SLOW_SHARE or more of the recorded run (SECONDS: file → seconds)."""
    total = sum(seconds.values())
    return frozenset(name for name, took in seconds.items() if total > 0 and took >= SLOW_SHARE * total)


def group(item: pytest.Item) -> str:
    """The xdist group of ITEM: its folder for SHARED_GROUPS, itself if it uses one of SPREAD_FIXTURES, else its
    file."""
    folder = _folder(item)
    if folder in SHARED_GROUPS:
        return folder
    if SPREAD_FIXTURES & set(getattr(item, "fixturenames", ())):
        return item.nodeid.replace("[", "(").replace("]", ")")  # no "]": xdist reads a group after the last one
    return _file(item)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("relay_test_timings", "the recorded seconds per test file that tier the files (default: "
                  "tests/timings.json; a relative path is from the rootdir)", default="")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    named = str(config.getini("relay_test_timings"))
    slow_files = recorded_slow(recorded_seconds(config.rootpath / named if named else TIMINGS))
    for item in items:
        for name in tiers(item, slow_files):
            item.add_marker(getattr(pytest.mark, name))
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group(item)))
        if getattr(config.option, "loadgroup", False):  # set on an xdist worker under --dist loadgroup
            schedule_by_group(item)


def recorded_seconds(path: Path = TIMINGS) -> dict[str, float]:
    """The seconds each test file took in the recorded run (file path from the checkout's root → seconds)."""
    try:
        return {str(name): float(seconds) for name, seconds in json.loads(path.read_text())["files"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def schedule_by_group(item: pytest.Item) -> None:
    """Give ITEM the node id `<id>@<group>` that --dist loadgroup schedules by, as pytest-xdist means to: its 3.8
    sets the `_nodeid` attribute pytest 9.2 no longer reads, so without this every test was scheduled on its own (a
    file's module fixtures, and the cluster, started on several workers at once)."""
    if "@" in item.nodeid.rsplit("]", 1)[-1]:  # already grouped (an xdist that works)
        return
    item._id = NodeId.parse(f"{item.nodeid}@{group_name(item)}")  # pytest has no public setter


def group_name(item: pytest.Item) -> str:
    """The name --dist loadgroup schedules ITEM by: its xdist_group marks' names, sorted, joined by "_"."""
    return "_".join(sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                            for mark in item.iter_markers("xdist_group")}))
