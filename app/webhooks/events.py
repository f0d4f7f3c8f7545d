"""A batch's event, recorded in the transaction that ends it: its type and body (in the format of the API that
created the batch: Relay's, with the counts, unless that API registered its own at boot) and one delivery per
destination that wants that type.

`record_ended` is an end-of-batch hook of `app.batches.lifecycle` (registered at boot, app/wiring.py), run for every
batch whose finished_at the lifecycle has just set, whatever set it (the group commit of its last item, a cancel, the
reaper, a read), so no batch ends without its event, and none gets two (the finished_at update happens once; the
event's batch is unique).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from app.webhooks import store
from schemas.timestamps import rfc3339, unix

Row = dict[str, Any]

CALLBACK = "callback"  # the destination of a batch's own callback_url


@dataclass(frozen=True)
class EventFormat:
    """How an API shows the end of one of its batches: the event's type (from the ended batch row and whether its
    expiry stopped items), its `data` (from the row and its final counts), whether the data needs the counts, and
    whether the type depends on the expiry (asked only when the batch ended at or after its expires_at)."""

    event_type: Callable[[Row, bool], str]
    data: Callable[[Row, dict[str, int]], dict[str, Any]]
    counts: bool = True
    expiry: bool = False


def relay_event_type(batch: Row, expired: bool) -> str:
    """Relay's event types: batch.cancelled, else batch.finished (an expiry shows in the counts)."""
    return "batch.cancelled" if batch["status"] == "cancelled" else "batch.finished"


def relay_event_data(batch: Row, counts: dict[str, int], *, batch_id: str | None = None) -> dict[str, Any]:
    """Relay's event data: the batch (named BATCH_ID, by default its own id) with its final counts."""
    return {"id": batch_id or str(batch["id"]), "object": "batch", "api": batch["api"], "status": batch["status"],
            "total": batch["total"], "counts": counts, "created_at": rfc3339(batch["created_at"]),
            "finished_at": rfc3339(batch["finished_at"]), "metadata": batch["metadata"]}


RELAY_FORMAT = EventFormat(relay_event_type, relay_event_data)
_formats: dict[str, EventFormat] = {}  # API name → its format (registered at boot by the compatible APIs)


def register_format(api: str, event_format: EventFormat) -> None:
    """Register the event format of batches created through API (registering again replaces it)."""
    _formats[api] = event_format


def format_for(api: str) -> EventFormat:
    """The event format of a batch created through API: its registered one, else Relay's."""
    return _formats.get(api, RELAY_FORMAT)


def record_ended(conn: Any, batches: Iterable[Row]) -> int:
    """The event and deliveries of each batch that has just ended (rows of store.ENDED_COLUMNS), in the caller's
    transaction; how many deliveries were recorded (the workers are woken on commit)."""
    recorded = 0
    for batch in batches:
        endpoints = store.endpoints_for(conn, batch["project_id"], batch["team_id"])
        if not endpoints and not batch["callback_url"]:
            continue
        kind = event_type(batch, expired=expiry_passed(batch) and store.any_expired(conn, batch["id"]))
        targets = [(e["id"], e["destination"], e["url"], None) for e in endpoints if wants(e["events"], kind)]
        if batch["callback_url"]:
            targets.append((None, CALLBACK, batch["callback_url"], batch["callback_secret_enc"]))
        if not targets:
            continue
        event_id = uuid.uuid4()
        counts = store.final_counts(conn, batch["id"]) if format_for(batch["api"]).counts else {}
        if store.insert_event(conn, event_id, batch["id"], kind, render(event_id, kind, batch, counts)):
            store.insert_deliveries(conn, event_id, targets)
            recorded += len(targets)
    if recorded:
        store.notify(conn)
    return recorded


def event_type(batch: Row, *, expired: bool) -> str:
    """The event of an ended batch, in its API's format (EXPIRED: its expiry stopped items)."""
    return format_for(batch["api"]).event_type(batch, expired)


def expiry_passed(batch: Row) -> bool:
    """Whether a batch whose API's event tells an expiry ended at or after its expiry time (only then may its expiry
    have stopped items)."""
    expires = batch["expires_at"]
    return format_for(batch["api"]).expiry and expires is not None and expires <= batch["finished_at"]


def wants(events: list[str], kind: str) -> bool:
    """Whether an endpoint subscribed to EVENTS (empty: all) receives KIND."""
    return not events or kind in events


def render(event_id: uuid.UUID, kind: str, batch: Row, counts: dict[str, int]) -> str:
    """The event's body in its API's format, rendered once: every attempt sends (and signs) these bytes."""
    body = {"id": event_name(event_id), "object": "event", "created_at": unix(batch["finished_at"]), "type": kind,
            "data": format_for(batch["api"]).data(batch, counts)}
    return json.dumps(body, separators=(",", ":"))


def event_name(event_id: uuid.UUID) -> str:
    """An event's id as sent: evt_<hex> (also its webhook-id header)."""
    return f"evt_{event_id.hex}"
