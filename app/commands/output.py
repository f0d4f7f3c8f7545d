"""What the `relay` command prints for an error: the code and message, then every field message of `details`
(the API's per-field messages, or a rejected batch's items), one per line."""

from __future__ import annotations

from typing import Any

MAX_DETAIL_LINES = 20


def detail_lines(details: Any) -> list[str]:
    """DETAILS as `field: message` lines: {field: [messages]} (nested for query/json locations), or a batch's
    [{idx, field, message}], at most MAX_DETAIL_LINES of them plus a count of the rest."""
    lines = list(_walk(details, ""))
    if len(lines) > MAX_DETAIL_LINES:
        return [*lines[:MAX_DETAIL_LINES], f"... and {len(lines) - MAX_DETAIL_LINES} more"]
    return lines


def _walk(details: Any, where: str) -> Any:
    if isinstance(details, dict):
        for name, value in details.items():
            yield from _walk(value, f"{where}.{name}" if where else str(name))
    elif isinstance(details, list):
        for entry in details:
            if isinstance(entry, dict) and "message" in entry:
                yield f"{_item_field(entry)}: {entry['message']}"
            else:
                yield from _walk(entry, where)
    elif details is not None:
        yield f"{where}: {details}" if where else str(details)


def _item_field(entry: dict[str, Any]) -> str:
    """`requests[3].messages` for a batch item's error, the field alone for the envelope's."""
    field = entry.get("field") or ""
    if entry.get("idx") is None:
        return field or "body"
    return f"requests[{entry['idx']}]" + (f".{field}" if field else "")
