"""The fake upstream's run-time state: behaviours per key, call counters and the recent-request log.

Only the server's event loop touches it (the control API goes through HTTP), so it needs no locks.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from time import monotonic, time
from typing import Any

from devtools.fake_upstream.behaviour import Behaviour, ServerOptions

NO_KEY = "(none)"  # how calls without a key are counted
_DEFAULT = object()  # the `times` slot of the default behaviour


@dataclass
class CallRecord:
    """One call as received: who sent what, and how it ended (`outcome`: in_flight, answered, reset, abandoned)."""

    seq: int
    time: float
    method: str
    path: str
    query: str
    peer: str
    key: str | None
    model: str | None
    stream: bool
    headers: dict[str, str]
    body: Any
    traceparent: str | None = None  # the W3C trace context the caller sent (Relay: its attempt's client span)
    status: int | None = None
    outcome: str = "in_flight"
    started: float = field(default_factory=monotonic, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The record as `GET /_control/requests` shows it."""
        data = asdict(self)
        data.pop("started")
        return data


class UpstreamState:
    """Behaviours, options, counters and the request log; `reset()` returns to the start-up configuration."""

    def __init__(self, options: ServerOptions | None = None, default: Behaviour | None = None,
                 keys: Mapping[str, Behaviour] | None = None) -> None:
        self._initial = (options or ServerOptions(), default or Behaviour(), dict(keys or {}))
        self.reset()

    def reset(self) -> None:
        """Forget counters, the log and every behaviour set at run time."""
        self.options, self.default, keys = self._initial
        self.keys: dict[str, Behaviour] = {}
        self._remaining: dict[object, int] = {}
        for key, behaviour in keys.items():
            self.set_key(key, behaviour)
        self.set_default(self.default)
        self.total = 0
        self.in_flight = 0
        self.counters: dict[str, Counter[str]] = {name: Counter() for name in
                                                  ("by_key", "by_path", "by_model", "by_status", "by_outcome")}
        self.log: deque[CallRecord] = deque(maxlen=self.options.request_log_size)
        self._seq = 0
        self._per_second: dict[str | None, tuple[int, int]] = {}  # key -> (second, calls in it)

    def count_in_second(self, key: str | None, now: float) -> tuple[int, float]:
        """Count a call of KEY in the current second: (calls in it so far, this one included; seconds left)."""
        second = int(now)
        seen, count = self._per_second.get(key, (second, 0))
        count = count + 1 if seen == second else 1
        self._per_second[key] = (second, count)
        return count, second + 1 - now

    def set_key(self, key: str, behaviour: Behaviour) -> None:
        """Give `key` its own behaviour (this also makes it a listed key for `strict_keys`)."""
        self.keys[key] = behaviour
        self._arm(key, behaviour)

    def forget_key(self, key: str) -> bool:
        """Drop the key's own behaviour; it falls back to the default (or is unknown when strict)."""
        self._remaining.pop(key, None)
        return self.keys.pop(key, None) is not None

    def set_default(self, behaviour: Behaviour) -> None:
        """The behaviour of keys that have none of their own."""
        self.default = behaviour
        self._arm(_DEFAULT, behaviour)

    def set_options(self, options: ServerOptions) -> None:
        """Change server-wide options; a new log size keeps the newest records."""
        if options.request_log_size != self.options.request_log_size:
            self.log = deque(self.log, maxlen=options.request_log_size)
        self.options = options

    def _arm(self, slot: object, behaviour: Behaviour) -> None:
        """Start counting down `times` for a behaviour that has one."""
        if behaviour.times is None:
            self._remaining.pop(slot, None)
        else:
            self._remaining[slot] = behaviour.times

    def take_behaviour(self, key: str | None) -> Behaviour:
        """The behaviour for this call of `key` (counting down `times`); unknown keys are invalid when strict."""
        if key is not None and key in self.keys:
            slot: object = key
            behaviour = self.keys[key]
        elif self.options.strict_keys and key is not None:
            return Behaviour(mode="invalid")
        else:
            slot, behaviour = _DEFAULT, self.default
        if slot in self._remaining:
            self._remaining[slot] -= 1
            if self._remaining[slot] <= 0:
                del self._remaining[slot]
                if slot is _DEFAULT:
                    self.default = Behaviour()
                else:
                    self.keys[key] = Behaviour()  # type: ignore[index]
        return behaviour

    def record_call(self, record_fields: dict[str, Any]) -> CallRecord:
        """Count a call as it arrives and keep it in the log."""
        self._seq += 1
        record = CallRecord(seq=self._seq, time=time(), **record_fields)
        self.total += 1
        self.in_flight += 1
        self.counters["by_key"][record.key if record.key is not None else NO_KEY] += 1
        self.counters["by_path"][record.path] += 1
        if record.model is not None:
            self.counters["by_model"][record.model] += 1
        self.log.append(record)
        return record

    def finish_call(self, record: CallRecord, status: int | None, outcome: str) -> None:
        """Note how a call ended (once)."""
        if record.outcome != "in_flight":
            return
        record.status, record.outcome = status, outcome
        self.in_flight -= 1
        self.counters["by_outcome"][outcome] += 1
        if status is not None:
            self.counters["by_status"][str(status)] += 1

    def stats(self) -> dict[str, Any]:
        """Counters as `GET /_control/stats` shows them."""
        return {"total": self.total, "in_flight": self.in_flight,
                **{name: dict(counter) for name, counter in self.counters.items()}}

    def requests(self, query: Mapping[str, str]) -> list[dict[str, Any]]:
        """Logged calls, oldest first, filtered by `key`, `path`, `model`, `since` (seq) and `limit`."""
        since = int(query.get("since", "0"))
        selected = [r for r in self.log if r.seq > since
                    and all(query[name] == getattr(r, name) for name in ("key", "path", "model") if name in query)]
        limit = int(query.get("limit", "0"))
        return [r.to_json() for r in (selected[-limit:] if limit > 0 else selected)]

    def behaviours(self) -> dict[str, Any]:
        """Every configured behaviour, the default and the options, with remaining `times` counts."""
        remaining = {("default" if slot is _DEFAULT else str(slot)): n for slot, n in self._remaining.items()}
        return {"options": self.options.to_json(), "default": self.default.to_json(),
                "keys": {key: b.to_json() for key, b in self.keys.items()}, "remaining_times": remaining}
