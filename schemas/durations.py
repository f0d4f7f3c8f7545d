"""Durations as the catalog file and the CLI write them: `500ms`, `30s`, `1m`, `24h`, `7d`, or plain seconds."""

from __future__ import annotations

import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


class DurationError(ValueError):
    """The text is not a duration."""


def parse_duration(value: object) -> float:
    """Seconds in VALUE (a number of seconds or a string like `60s`); DurationError otherwise."""
    if isinstance(value, bool):
        raise DurationError("not a duration")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and len(value) <= 32:
        match = _PATTERN.match(value)
        if not match:
            raise DurationError("not a duration (use e.g. 30s, 1m, 24h)")
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    else:
        raise DurationError("not a duration (use e.g. 30s, 1m, 24h)")
    if seconds != seconds or seconds in (float("inf"), float("-inf")) or seconds < 0:
        raise DurationError("not a finite, non-negative duration")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest exact spelling of SECONDS in h, m or s (`86400` -> `24h`, `90` -> `90s`)."""
    if seconds == int(seconds):
        whole = int(seconds)
        for unit, size in (("h", 3600), ("m", 60)):
            if whole and whole % size == 0:
                return f"{whole // size}{unit}"
        return f"{whole}s"
    return f"{seconds:g}s"
