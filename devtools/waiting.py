"""The one poll helper of the tests and the bench: read again until a condition holds, within a bound only a hang
crosses (a deadline is never what a test asserts: durations and rates belong in bench/)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
HANG_S = 120.0  # the default bound: far past any honest wait, even on a machine shared by parallel runs


def until(read: Callable[[], T], done: Callable[[T], Any] = bool, *, what: str = "the condition",
          timeout: float = HANG_S, every: float = 0.1) -> T:
    """READ() every EVERY seconds until DONE(value) is true (the value's truth by default); that last value.

    Past TIMEOUT seconds an AssertionError names WHAT and the last value read."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value):
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what} after {timeout:g}s: last {value!r}"[:2000])
        time.sleep(every)
