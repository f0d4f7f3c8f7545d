"""Backing off a host key's own rate limit, for batch calls only (live calls are never slowed by it).

Per host key and per worker process: once the upstream answers 429 on a key, batch calls on it are paced at a
rate that starts just under what the key let through in the last second and creeps up again (additive increase,
multiplicative decrease); a `Retry-After` (or `retry-after-ms`), or `x-ratelimit-remaining-*` headers that say the
key's window is about spent, hold further batch calls until then. The call that got the 429 still fails as the
product page says; the ones after it are not sent into the wall. A key free of 429s for RECOVER_S is unpaced again.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

from app.observability.metrics import count_key_backoff

if TYPE_CHECKING:
    from app.runtime import Runtime

DECREASE = 0.9  # after a 429: this share of the rate the key let through in the last second ...
FIRST_DECREASE = 0.6  # ... or this share on a key not paced yet: a sliding second right after an unpaced burst
# can hold two of the upstream's windows' worth, and other processes send on the key too
INCREASE_PER_S = 0.02  # then the rate grows by this share of itself each second (at least MIN_INCREASE calls/s)
MIN_INCREASE = 1.0
MIN_RATE = 0.5  # calls per second at least
CUT_EVERY_S = 1.0  # one decrease per this long: the 429s of calls already in flight do not cut it again
MAX_HOLD_S = 60.0  # a Retry-After or reset longer than this is cut to it
LOW_REMAINING = 2  # x-ratelimit-remaining-* at or below this holds calls until the reset
RECOVER_S = 60.0
SERVICE = "key_backoff"


class Headers(Protocol):
    """An answer's headers, looked up without regard to case (http.client's message, a dict of lower-case)."""

    def get(self, name: str, default: None = None) -> str | None: ...
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass
class KeyPace:
    """One key's pacing in this process."""

    rate: float | None = None  # calls per second allowed; None: not paced
    next_at: float = 0.0  # the next call's earliest start (monotonic)
    hold_until: float = 0.0
    last_cut: float = -1e9
    last_update: float = 0.0
    successes: deque[float] = field(default_factory=deque)  # when calls answered 2xx in the last second


def get_backoff(runtime: Runtime) -> KeyBackoff:
    return runtime.service(SERVICE, KeyBackoff)


class KeyBackoff:
    """Every host key's pacing for this process's batch calls."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._mono = monotonic
        self._lock = threading.Lock()
        self._keys: dict[UUID, KeyPace] = {}

    def wait_turn(self, key_id: UUID, deadline: float | None, sleep: Callable[[float], object]) -> None:
        """Wait (with SLEEP, which may wake early) until a batch call on KEY_ID may start; at most until DEADLINE."""
        with self._lock:
            pace = self._keys.get(key_id)
            now = self._mono()
            if pace is None or (pace.rate is None and pace.hold_until <= now):
                return
            self._grow(pace, now)
            start = max(now, pace.hold_until, pace.next_at if pace.rate else now)
            if pace.rate:
                pace.next_at = start + 1.0 / pace.rate
        if deadline is not None:
            start = min(start, deadline)
        if start > now:
            sleep(start - now)

    def observe(self, key_id: UUID, status: int, headers: Headers) -> None:
        """A batch call on KEY_ID answered STATUS with HEADERS."""
        now = self._mono()
        with self._lock:
            pace = self._keys.get(key_id)
            if pace is None:
                pace = self._keys[key_id] = KeyPace(last_update=now)
            if 200 <= status < 300:
                pace.successes.append(now)
                while pace.successes[0] < now - 1.0:
                    pace.successes.popleft()
            hold = retry_after_s(headers) if status == 429 or status >= 500 else None
            if hold is None and _spent(headers):
                hold = _reset_s(headers)
            if hold:
                pace.hold_until = max(pace.hold_until, now + min(hold, MAX_HOLD_S))
                pace.last_update = max(pace.last_update, pace.hold_until)  # at the key's edge: no increase meanwhile
            if status == 429 and now - pace.last_cut >= CUT_EVERY_S:
                let_through = sum(1 for t in pace.successes if t >= now - 1.0)
                pace.rate = max(MIN_RATE, (DECREASE if pace.rate else FIRST_DECREASE) * let_through)
                pace.last_cut = pace.last_update = now
                count_key_backoff()

    def rate(self, key_id: UUID) -> float | None:
        """The batch call rate KEY_ID is paced at here (None: not paced)."""
        with self._lock:
            pace = self._keys.get(key_id)
            return pace.rate if pace else None

    def _grow(self, pace: KeyPace, now: float) -> None:
        if pace.rate is None:
            return
        if now - pace.last_cut >= RECOVER_S and now >= pace.hold_until:
            pace.rate = None
            return
        elapsed = now - pace.last_update
        if elapsed > 0:
            pace.rate += elapsed * max(MIN_INCREASE, pace.rate * INCREASE_PER_S)
            pace.last_update = now


def retry_after_s(headers: Headers) -> float | None:
    """Seconds a Retry-After (OpenAI's `retry-after-ms` first) asks to wait."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue
    return None


def _spent(headers: Headers) -> bool:
    """x-ratelimit-remaining-requests or -tokens says the key's window is about used up."""
    for name in ("x-ratelimit-remaining-requests", "x-ratelimit-remaining-tokens"):
        value = headers.get(name)
        if value is not None and value.isdigit() and int(value) <= LOW_REMAINING:
            return True
    return False


def _reset_s(headers: Headers) -> float | None:
    """OpenAI's x-ratelimit-reset-* durations (`1s`, `20ms`, `6m0s`) as seconds: the longest."""
    found = []
    for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"):
        value = headers.get(name)
        if value:
            parts = _DURATION.findall(value)
            if parts:
                found.append(sum(float(n) * _UNIT_S[unit] for n, unit in parts))
    return max(found) if found else None
