"""Record how long each test file took, for the suite's tiers (tests/tiers.py: a file that took a large share is slow).

    .venv/bin/pytest ... --junitxml=run.xml -o junit_family=xunit1 -o junit_duration_report=total
    .venv/bin/python -m devtools.test_timings run.xml          # writes tests/timings.json

A file's seconds are the sum of its tests' setup, call and teardown as the run's JUnit report gives them (xunit1,
for its `file` attribute). The record only tiers the files: a stale one moves a file in or out of the local run,
never changes a result.
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from datetime import date
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "timings.json"


def file_seconds(reports: list[Path]) -> dict[str, float]:
    """Seconds per test file (its path from the checkout's root) over the JUnit REPORTS."""
    seconds: dict[str, float] = defaultdict(float)
    for report in reports:
        for case in ElementTree.parse(report).iter("testcase"):  # noqa: S314 (our own pytest run's report)
            name = case.get("file") or case.get("classname", "").replace(".", "/").rsplit("/", 1)[0] + ".py"
            seconds[name] += float(case.get("time") or 0.0)
    return {name: round(total, 1) for name, total in sorted(seconds.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path, help="JUnit XML reports of a full run (xunit1)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    files = file_seconds(args.reports)
    args.out.write_text(json.dumps({"recorded": date.today().isoformat(), "files": files}, indent=1) + "\n")
    print(f"{args.out}: {len(files)} files, {sum(files.values()):.0f} s in all")


if __name__ == "__main__":
    main()
