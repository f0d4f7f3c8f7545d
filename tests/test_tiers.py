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
