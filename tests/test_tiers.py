"""The parallel groups of tests/tiers.py reach pytest-xdist's scheduler: under --dist loadgroup a test's node id ends
with its group, and the tests of one file run on one worker."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[1]
# A file of three tests, each writing its node id and the worker that ran it to OUT/<name>.
RECORDING_TESTS = """
import json, os, pathlib

import pytest

@pytest.mark.parametrize("n", range(3))
def test_records(request, n):
    out = pathlib.Path(os.environ["TIERS_OUT"]) / f"{request.node.name}-{__name__}.json"
    out.write_text(json.dumps({"file": __name__, "nodeid": request.node.nodeid,
                               "worker": os.environ["PYTEST_XDIST_WORKER"]}))
"""


def test_under_loadgroup_the_tests_of_a_file_run_on_one_worker_with_the_group_in_their_node_id(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytester.makepyfile(test_first=RECORDING_TESTS, test_second=RECORDING_TESTS, test_third=RECORDING_TESTS)
    monkeypatch.setenv("TIERS_OUT", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    result = pytester.runpytest_subprocess("-p", "tests.tiers", "-n", "2", "--dist", "loadgroup", "-q",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=9)
    runs = [json.loads(path.read_text()) for path in tmp_path.glob("*.json")]
    assert len(runs) == 9
    for run in runs:
        assert run["nodeid"].endswith(f"@{run['file']}.py"), run
    workers = {name: {run["worker"] for run in runs if run["file"] == name} for name in {r["file"] for r in runs}}
    assert all(len(found) == 1 for found in workers.values()), workers


# A file of two tests, each appending its file's name to OUT/order.txt as it runs.
ORDER_TESTS = """
import os, pathlib

def test_a():
    with open(pathlib.Path(os.environ["TIERS_OUT"]) / "order.txt", "a") as out:
        out.write(__name__ + "\\n")

def test_b():
    test_a()
"""


def test_under_loadgroup_the_groups_recorded_longest_run_first(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # test_first has the most tests: the order pytest-xdist would pick itself.
    pytester.makepyfile(test_first=ORDER_TESTS + "\ndef test_c():\n    test_a()\n", test_second=ORDER_TESTS,
                        test_third=ORDER_TESTS)
    pytester.makefile(".json", timings=json.dumps({"files": {"test_first.py": 1.0, "test_third.py": 30.0}}))
    monkeypatch.setenv("TIERS_OUT", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    result = pytester.runpytest_subprocess("-p", "tests.tiers", "-n", "1", "--dist", "loadgroup",
                                           "--no-loadscope-reorder", "-o", "relay_test_timings=timings.json",
                                           "-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=7)
    # test_third recorded longest; test_second unknown: UNKNOWN_TEST_S a test (2 s); test_first 1 s.
    order = (tmp_path / "order.txt").read_text().split()
    assert order == ["test_third"] * 2 + ["test_second"] * 2 + ["test_first"] * 3, order


def test_a_file_that_took_a_large_share_of_the_recorded_run_is_slow(pytester: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_long="def test_long():\n    pass\n", test_short="def test_short():\n    pass\n")
    # test_short's share, 1 of 1,000 s, is below SLOW_SHARE.
    pytester.makefile(".json", timings=json.dumps({"files": {"test_long.py": 999.0, "test_short.py": 1.0}}))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    result = pytester.runpytest_subprocess("-p", "tests.tiers", "-o", "relay_test_timings=timings.json",
                                           "-m", "not slow", "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["*test_short.py::test_short PASSED*"])
