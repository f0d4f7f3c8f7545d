"""A time as the wire formats spell it: Unix seconds (OpenAI's objects, event times) and RFC 3339 in UTC with `Z`
(Anthropic's objects, Relay's event data)."""

from __future__ import annotations

from datetime import UTC, datetime


def unix(value: datetime | None) -> int | None:
    return int(value.timestamp()) if value is not None else None


def rfc3339(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z") if value is not None else None
