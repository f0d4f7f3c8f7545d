"""Benchmark figures: the values of every run, their median, the target and the baseline ratio; a Markdown table
and a JSON document."""

from __future__ import annotations

import json
import operator
import platform
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_OPS: dict[str, Callable[[float, float], bool]] = {"<=": operator.le, ">=": operator.ge}


@dataclass
class Figure:
    """One measured quantity over several runs, with its target (op, threshold) and baseline values."""

    scenario: str
    name: str
    unit: str
    values: list[float] = field(default_factory=list)
    target: tuple[str, float] | None = None
    baseline: list[float] = field(default_factory=list)
    baseline_name: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def baseline_median(self) -> float | None:
        return statistics.median(self.baseline) if self.baseline else None

    @property
    def ratio(self) -> float | None:
        """Median over the baseline's median (how many times the bare cost)."""
        base = self.baseline_median
        return self.median / base if base else None

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        op, threshold = self.target
        return _OPS[op](self.median, threshold)

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "name": self.name, "unit": self.unit, "values": self.values,
                "median": self.median, "target": list(self.target) if self.target else None, "met": self.met,
                "baseline": self.baseline, "baseline_median": self.baseline_median,
                "baseline_name": self.baseline_name, "ratio": self.ratio}


class Results:
    """The figures of one bench run, in the order first recorded."""

    def __init__(self) -> None:
        self.figures: dict[tuple[str, str], Figure] = {}
        self.notes: list[str] = []

    def add(self, scenario: str, name: str, value: float, unit: str, *, target: tuple[str, float] | None = None,
            baseline: float | None = None, baseline_name: str = "") -> None:
        """Record one run's VALUE (and its baseline, measured in the same run)."""
        fig = self.figures.setdefault((scenario, name), Figure(scenario, name, unit, target=target,
                                                               baseline_name=baseline_name))
        fig.values.append(value)
        if baseline is not None:
            fig.baseline.append(baseline)

    def table(self) -> str:
        """A Markdown table: every figure with its median, run count, target, baseline and ratio."""
        lines = ["| scenario | figure | median | runs | target | met | baseline (median) | ratio |",
                 "|---|---|---|---|---|---|---|---|"]
        for fig in self.figures.values():
            target = f"{fig.target[0]} {_num(fig.target[1])} {fig.unit}" if fig.target else ""
            met = {True: "yes", False: "**no**", None: ""}[fig.met]
            base = fig.baseline_median
            base_text = f"{_num(base)} {fig.unit} ({fig.baseline_name})" if base is not None else ""
            ratio = f"{fig.ratio:.2f}x" if fig.ratio is not None else ""
            lines.append(f"| {fig.scenario} | {fig.name} | {_num(fig.median)} {fig.unit} | {len(fig.values)} "
                         f"| {target} | {met} | {base_text} | {ratio} |")
        return "\n".join(lines)

    def write_json(self, path: Path, command: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "command": command,
               "machine": machine(), "figures": [f.as_dict() for f in self.figures.values()], "notes": self.notes}
        path.write_text(json.dumps(doc, indent=2) + "\n")


def machine() -> str:
    """Cores, memory, OS and Python of this machine, in one line."""
    import os

    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    os_name = "unknown OS"
    release = Path("/etc/os-release")
    if release.exists():
        for line in release.read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    return (f"{os.cpu_count()} cores, {mem_kb / 1024 / 1024:.0f} GiB, {os_name}, "
            f"Python {platform.python_version()}")


def _num(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"
