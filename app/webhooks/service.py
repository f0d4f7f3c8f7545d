"""What the operator's webhook routes call: deliveries newest first, one delivery with its attempts and event, and
"send again". No Flask."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from app.cursors import decode_cursor, encode_cursor
from app.errors import NotFound
from app.runtime import Runtime
from app.webhooks import store
from app.webhooks.events import CALLBACK, event_name

MAX_BATCH_DELIVERIES = 200  # a batch has an event or two, each delivered to a few destinations


class DeliveryNotFound(NotFound):
    code = "delivery_not_found"


def list_deliveries(runtime: Runtime, *, state: str | None = None, batch_id: UUID | None = None, limit: int = 50,
                    cursor: str | None = None) -> dict[str, Any]:
    """A page of deliveries, newest first, optionally of one STATE or one batch."""
    with runtime.pool.connection() as conn:
        before = decode_cursor(cursor) if cursor else None
        rows = store.list_deliveries(conn, state=state, batch_id=batch_id, before=before, limit=limit)
    last = rows[-1] if len(rows) == limit else None
    return {"data": [delivery_view(r) for r in rows],
            "next_cursor": encode_cursor(last["created_at"], last["id"]) if last else None}


def get_delivery(runtime: Runtime, delivery_id: str) -> dict[str, Any]:
    """The delivery with every attempt (oldest first) and the event body it sends."""
    found = _parse(delivery_id)
    with runtime.pool.connection() as conn:
        return _delivery_detail(conn, found)


def resend(runtime: Runtime, delivery_id: str) -> dict[str, Any]:
    """Send the delivery again now: the same event and webhook-id, a new give-up window, its attempts kept. The
    answer is the delivery as this call left it (pending), read before a webhook worker can take it."""
    found = _parse(delivery_id)
    with runtime.pool.connection() as conn, conn.transaction():
        if found is None or not store.resend(conn, found):
            raise DeliveryNotFound(message="webhook delivery not found")
        detail = _delivery_detail(conn, found)
        store.notify(conn)
    return detail


def _delivery_detail(conn: store.Conn, found: UUID | None) -> dict[str, Any]:
    row = store.get_delivery(conn, found) if found else None
    if row is None or found is None:
        raise DeliveryNotFound(message="webhook delivery not found")
    return {**delivery_view(row), "attempt_log": store.attempts_of(conn, found), "event": json.loads(row["body"])}


def batch_deliveries(runtime: Runtime, batch_id: UUID) -> dict[str, Any]:
    """Every delivery of one batch's events, newest first, each with its attempts: what its submitter sees (the
    caller checked it owns the batch). A project's or team's endpoint is shown by its origin only: its path and
    query are the operator's configuration."""
    with runtime.pool.connection() as conn:
        rows = store.list_deliveries(conn, state=None, batch_id=batch_id, before=None, limit=MAX_BATCH_DELIVERIES)
        attempts = {r["id"]: store.attempts_of(conn, r["id"]) for r in rows}
    return {"data": [{**delivery_view(r), "url": _shown_url(r), "attempt_log": attempts[r["id"]]} for r in rows]}


def _shown_url(row: dict[str, Any]) -> str:
    if row["destination"] == CALLBACK:
        return str(row["url"])
    parts = urlsplit(row["url"])
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def delivery_view(row: dict[str, Any]) -> dict[str, Any]:
    """A delivery as the routes answer it (the event named as it is sent)."""
    view = {name: row[name] for name in ("id", "event_type", "batch_id", "destination", "url", "state", "attempts",
                                         "next_attempt_at", "last_status", "last_error", "created_at", "finished_at")}
    return {**view, "event_id": event_name(row["event_id"])}


def _parse(text: str) -> UUID | None:
    try:
        return UUID(text)
    except (ValueError, TypeError):
        return None
