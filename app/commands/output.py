"""What the `relay` command prints: an error's field messages (the API's per-field messages, or a rejected batch's
items, by file line when the command knows it), tables for people, and JSON for scripts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

MAX_DETAIL_LINES = 20
SHOWN_PLACES = 5  # the lines (or indexes) named on a problem several items share


def detail_lines(details: Any) -> list[str]:
    """DETAILS as `field: message` lines: {field: [messages]} (nested for query/json locations), or a batch's
    [{idx | index | line, custom_id?, field, message}], one line per problem (items with the same field and message
    share it: `lines 1, 2, 3 and 47 more (50 items), custom_id: ...`), at most MAX_DETAIL_LINES of them plus a count
    of the rest."""
    lines = list(_walk(details, ""))
    if len(lines) > MAX_DETAIL_LINES:
        return [*lines[:MAX_DETAIL_LINES], f"... and {len(lines) - MAX_DETAIL_LINES} more"]
    return lines


def _walk(details: Any, where: str) -> Any:
    if isinstance(details, dict):
        for name, value in details.items():
            yield from _walk(value, f"{where}.{name}" if where else str(name))
    elif isinstance(details, list):
        problems: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for entry in details:
            if isinstance(entry, dict) and "message" in entry:
                problems.setdefault((str(entry.get("field") or ""), str(entry["message"])), []).append(entry)
            else:
                yield from _walk(entry, where)
        for (field, message), entries in problems.items():
            yield f"{_item_field(entries[0]) if len(entries) == 1 else _items_field(entries, field)}: {message}"
    elif details is not None:
        yield f"{where}: {details}" if where else str(details)


def _item_field(entry: dict[str, Any]) -> str:
    """Where a batch item's error is: `line 7, requests[3].messages` (the file's line when known), `line 4
    (custom_id q-1), body.messages` for a provider's input, the field alone for the envelope's."""
    field = entry.get("field") or ""
    position = entry["idx"] if entry.get("idx") is not None else entry.get("index")
    place = f"requests[{position}]" + (f".{field}" if field else "") if position is not None else field or "body"
    if entry.get("line") is None:
        return place
    custom_id = f" (custom_id {entry['custom_id']})" if entry.get("custom_id") else ""
    return f"line {entry['line']}{custom_id}, {place}" if position is not None or field else \
        f"line {entry['line']}{custom_id}"


def _items_field(entries: list[dict[str, Any]], field: str) -> str:
    """Where several items share one problem: `lines 1, 2, 3, 4, 5 and 45 more (50 items), messages`."""
    lines = [e.get("line") for e in entries]
    if all(line is not None for line in lines):
        label, places = "lines", [str(line) for line in lines]
    else:
        label, places = "requests", [str(e["idx"] if e.get("idx") is not None else e.get("index")) for e in entries]
    shown = ", ".join(places[:SHOWN_PLACES]) + (f" and {len(places) - SHOWN_PLACES} more"
                                                if len(places) > SHOWN_PLACES else "")
    return f"{label} {shown} ({len(entries)} items), {field or 'body'}"


def usd(value: Any) -> str:
    """An exact decimal of dollars for people, never in exponent notation: `$0.00000075`, `$0.000123`, `$12.50`."""
    amount = Decimal(str(value))
    return f"${amount:.2f}" if amount >= 1 else f"${amount.normalize():f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """ROWS under HEADERS in left-aligned columns two spaces apart (the last column is not padded)."""
    cells = [[str(h) for h in headers], *[["—" if v is None else str(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))
