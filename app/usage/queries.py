"""Reading usage events: filters, who may see what, page cursors, and the JSON/CSV/JSONL forms of events.

SQL lives in `app/usage_store.py`; this module holds the plain types and conversions around it (no Flask).
Visibility follows the product rule for batches: a relay key sees the events of its own key *value* (so a
rotated key does not see what its previous value did), an inference token sees its user's token events.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from app.auth_model import Caller

NANOS_PER_DOLLAR = Decimal(1_000_000_000)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# The columns of an event as the API shows it, in order (CSV header and JSON keys).
EVENT_FIELDS = (
    "id", "request_id", "source", "created_at", "started_at", "duration_ms", "route", "status", "upstream_status",
    "error_code", "model_requested", "model_resolved", "host_id", "host_name", "binding_id", "adapter",
    "host_key_name", "credential_kind", "credential_id", "relay_key_hash_prefix", "principal_kind", "principal_id",
    "principal", "policy_id", "policy", "project_id", "project", "team_id", "team", "input_tokens", "output_tokens",
    "cached_tokens", "cost_nanos", "cost_usd", "attempts", "streamed", "batch_id", "batch_idx",
    "custom_id",
)
KEY_HASH_PREFIX_BYTES = 4


@dataclass(frozen=True)
class UsageFilter:
    """Filters from the query string; None means "any"."""

    source: str | None = None
    from_: datetime | None = None
    to: datetime | None = None
    model: str | None = None
    host: str | None = None
    policy: str | None = None
    project: str | None = None
    team: str | None = None
    principal: str | None = None
    credential: UUID | None = None
    batch_id: UUID | None = None
    status: str | None = None
    error_code: str | None = None

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> UsageFilter:
        """The filter from loaded query arguments (other keys, such as limit, are ignored)."""
        names = cls.__dataclass_fields__.keys()
        return cls(**{k: v for k, v in args.items() if k in names})


@dataclass(frozen=True)
class Visibility:
    """The events a reader may see: all of them (admin), one relay key value's, or one user's token events."""

    admin: bool = False
    credential_id: UUID | None = None
    relay_key_hash: bytes | None = None
    user_id: UUID | None = None

    @classmethod
    def everything(cls) -> Visibility:
        return cls(admin=True)

    @classmethod
    def for_caller(cls, caller: Caller) -> Visibility:
        """A relay key sees its own value's events; an inference token sees every token event of its user."""
        if caller.credential_kind == "relay_key":
            assert caller.relay_key_hash is not None
            return cls(credential_id=caller.credential_id, relay_key_hash=caller.relay_key_hash)
        return cls(user_id=caller.principal_id)


def cost_usd(nanos: int | Decimal | None) -> str | None:
    """Nano-dollars as an exact decimal string of dollars (`1234` → `"0.000001234"`)."""
    if nanos is None:
        return None
    return f"{Decimal(nanos) / NANOS_PER_DOLLAR:.9f}"


def event_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """One usage_events row (with names joined) as JSON-ready values; the key hash only as a short prefix."""
    out: dict[str, Any] = {}
    for name in EVENT_FIELDS:
        if name == "relay_key_hash_prefix":
            key_hash = row.get("relay_key_hash")
            value: Any = bytes(key_hash[:KEY_HASH_PREFIX_BYTES]).hex() if key_hash else None
        elif name == "cost_usd":
            value = cost_usd(row.get("cost_nanos"))
        else:
            value = row.get(name)
        out[name] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else str(value)
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).hex()
    return value


def jsonl_lines(rows: Iterable[Mapping[str, Any]], chunk_rows: int = 500) -> Iterator[str]:
    """Events as JSON Lines, in chunks of CHUNK_ROWS lines."""
    chunk: list[str] = []
    for row in rows:
        chunk.append(json.dumps(event_json(row), separators=(",", ":"), ensure_ascii=False) + "\n")
        if len(chunk) == chunk_rows:
            yield "".join(chunk)
            chunk.clear()
    if chunk:
        yield "".join(chunk)


def csv_lines(rows: Iterable[Mapping[str, Any]], chunk_rows: int = 500) -> Iterator[str]:
    """Events as CSV with a header row, in chunks of CHUNK_ROWS lines (empty cells for nulls)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(EVENT_FIELDS)
    count = 0
    for row in rows:
        event = event_json(row)
        writer.writerow(["" if event[f] is None else _csv_cell(event[f]) for f in EVENT_FIELDS])
        count += 1
        if count % chunk_rows == 0:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def _csv_cell(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value  # keep spreadsheets from running a cell as a formula
    return value


SUMMARY_COUNTERS = ("requests", "errors", "cancelled", "input_tokens", "output_tokens", "cached_tokens", "cost_nanos",
                    "unpriced")


def sum_counters(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The counters of ROWS added up; cost_nanos stays NULL when no row had a priced event."""
    totals: dict[str, Any] = {c: sum(int(r[c]) for r in rows) for c in SUMMARY_COUNTERS if c != "cost_nanos"}
    costs = [int(r["cost_nanos"]) for r in rows if r["cost_nanos"] is not None]
    totals["cost_nanos"] = sum(costs) if costs else None
    return totals


def summary_json(totals: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], *, group_by: list[str],
                 bucket: str | None, max_rows: int) -> dict[str, Any]:
    """The summary answer: one row per group (its keys, names and counters), totals, and whether rows were cut."""
    return {
        "group_by": group_by,
        "bucket": bucket,
        "rows": [_summary_row(r) for r in rows[:max_rows]],
        "totals": _counters(totals),
        "truncated": len(rows) > max_rows,
    }


def _summary_row(row: Mapping[str, Any]) -> dict[str, Any]:
    keys = {k: _plain(v) for k, v in row.items() if k not in SUMMARY_COUNTERS}
    return {**keys, **_counters(row)}


def known_cost(cost_nanos: int | Decimal | None, unpriced: int) -> int | None:
    """What events cost together: the sum of the priced ones; null (unknown, never a made-up zero) when some are
    unpriced and none is priced, and 0 when nothing had a price to pay (failed or cancelled calls only)."""
    return int(cost_nanos) if cost_nanos is not None else (None if unpriced else 0)


def _counters(row: Mapping[str, Any]) -> dict[str, Any]:
    """A group's counters (its cost as known_cost says)."""
    out: dict[str, Any] = {}
    for name in SUMMARY_COUNTERS:
        if name == "cost_nanos":
            out[name] = known_cost(row[name], int(row["unpriced"]))
            out["cost_usd"] = cost_usd(out[name])
        else:
            out[name] = int(row[name])
    return out
