"""How the fake upstream treats a key (mode, latency, errors, usage) and its server-wide options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from devtools.fake_upstream.content import USAGE_FIELDS

MODES = ("ok", "invalid", "rate_limited", "fail", "hang", "reset", "stream_cut")
MAX_LATENCY_MS = 3_600_000


class InvalidControl(ValueError):
    """A control API body that does not describe a valid behaviour or option."""


def _int_field(data: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    """An integer field within [low, high], or `default` when absent."""
    value = data.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise InvalidControl(f"{name} must be an integer")
    if not low <= value <= high:
        raise InvalidControl(f"{name} must be between {low} and {high}")
    return int(value)


def _usage_field(data: Mapping[str, Any]) -> dict[str, int]:
    """The `usage` overrides: a subset of USAGE_FIELDS mapped to non-negative integers."""
    usage = data.get("usage") or {}
    if not isinstance(usage, Mapping):
        raise InvalidControl("usage must be an object")
    unknown = sorted(set(usage) - set(USAGE_FIELDS))
    if unknown:
        raise InvalidControl(f"unknown usage fields {unknown}; known: {list(USAGE_FIELDS)}")
    return {name: _int_field(usage, name, 0, 0, 10**9) for name in usage}


def _check_fields(data: Any, known: Mapping[str, Any]) -> Mapping[str, Any]:
    """`data` as a mapping, refusing unknown field names."""
    if not isinstance(data, Mapping):
        raise InvalidControl("body must be a JSON object")
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise InvalidControl(f"unknown fields {unknown}; known: {sorted(known)}")
    return data


@dataclass(frozen=True)
class Behaviour:
    """What calls with one key get; `times` limits it to the next N calls (then the key is plain `ok`)."""

    mode: str = "ok"
    latency_ms: int = 0
    chunk_delay_ms: int = 0
    retry_after: int = 1
    fail_status: int = 500
    times: int | None = None
    usage: Mapping[str, int] = field(default_factory=dict)
    reply: str | None = None
    max_rps: int = 0  # answer 429 past this many calls of the key per second (epoch-aligned); 0: no such limit

    @classmethod
    def from_json(cls, data: Any) -> Behaviour:
        """Parse a control API body; missing fields take their defaults (the body replaces, not merges)."""
        data = _check_fields(data, asdict(cls()))
        mode = data.get("mode", "ok")
        if mode not in MODES:
            raise InvalidControl(f"mode must be one of {list(MODES)}")
        reply = data.get("reply")
        if reply is not None and not isinstance(reply, str):
            raise InvalidControl("reply must be a string")
        times = data.get("times")
        return cls(
            mode=mode,
            latency_ms=_int_field(data, "latency_ms", 0, 0, MAX_LATENCY_MS),
            chunk_delay_ms=_int_field(data, "chunk_delay_ms", 0, 0, MAX_LATENCY_MS),
            retry_after=_int_field(data, "retry_after", 1, 0, 86_400),
            fail_status=_int_field(data, "fail_status", 500, 400, 599),
            times=None if times is None else _int_field(data, "times", 1, 1, 10**9),
            usage=_usage_field(data),
            reply=reply,
            max_rps=_int_field(data, "max_rps", 0, 0, 1_000_000),
        )

    def to_json(self) -> dict[str, Any]:
        """The behaviour as the control API shows it."""
        return {**asdict(self), "usage": dict(self.usage)}


@dataclass(frozen=True)
class ServerOptions:
    """Server-wide options: extra latency for every call, key strictness, request log size."""

    latency_ms: int = 0
    strict_keys: bool = False
    allow_missing_key: bool = False
    request_log_size: int = 1000

    def updated(self, data: Any) -> ServerOptions:
        """A copy with the fields present in `data` changed (a partial update)."""
        data = _check_fields(data, asdict(self))
        for name in ("strict_keys", "allow_missing_key"):
            if name in data and not isinstance(data[name], bool):
                raise InvalidControl(f"{name} must be true or false")
        return replace(
            self,
            latency_ms=_int_field(data, "latency_ms", self.latency_ms, 0, MAX_LATENCY_MS),
            strict_keys=data.get("strict_keys", self.strict_keys),
            allow_missing_key=data.get("allow_missing_key", self.allow_missing_key),
            request_log_size=_int_field(data, "request_log_size", self.request_log_size, 0, 1_000_000),
        )

    def to_json(self) -> dict[str, Any]:
        """The options as the control API shows them."""
        return asdict(self)
