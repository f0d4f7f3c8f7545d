"""A batch's event, recorded in the transaction that ends it: its type and body (OpenAI's event for OpenAI-compatible
batches, Relay's with the counts for the others) and one delivery per destination that wants that type.

Called by `app.batches.store` for every batch whose finished_at it has just set, whatever set it (the group commit
of its last item, a cancel, the reaper, a read), so no batch ends without its event, and none gets two (the
finished_at update happens once; the event's batch is unique).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

from app.webhooks import store
from schemas.batch_ids import anthropic_batch_id, openai_batch_id
from schemas.timestamps import rfc3339, unix

Row = dict[str, Any]

CALLBACK = "callback"  # the destination of a batch's own callback_url


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
        counts = store.final_counts(conn, batch["id"]) if batch["api"] != "openai" else {}
        if store.insert_event(conn, event_id, batch["id"], kind, render(event_id, kind, batch, counts)):
            store.insert_deliveries(conn, event_id, targets)
            recorded += len(targets)
    if recorded:
        store.notify(conn)
    return recorded


def event_type(batch: Row, *, expired: bool) -> str:
    """The event of an ended batch: OpenAI's for OpenAI-compatible batches (the status its batch object shows:
    cancelled, expired when its expiry stopped requests (EXPIRED), else completed; never failed, since Relay
    refuses an invalid batch at create), Relay's batch.finished or batch.cancelled for the others."""
    if batch["status"] == "cancelled":
        return "batch.cancelled"
    if batch["api"] != "openai":
        return "batch.finished"
    return "batch.expired" if expired else "batch.completed"


def expiry_passed(batch: Row) -> bool:
    """Whether an OpenAI batch ended at or after its expiry time (only then may its expiry have stopped items)."""
    expires = batch["expires_at"]
    return batch["api"] == "openai" and expires is not None and expires <= batch["finished_at"]


def wants(events: list[str], kind: str) -> bool:
    """Whether an endpoint subscribed to EVENTS (empty: all) receives KIND."""
    return not events or kind in events


def render(event_id: uuid.UUID, kind: str, batch: Row, counts: dict[str, int]) -> str:
    """The event's body, rendered once: every attempt sends (and signs) these bytes."""
    body: dict[str, Any] = {"id": event_name(event_id), "object": "event", "created_at": unix(batch["finished_at"]),
                            "type": kind}
    if batch["api"] == "openai":
        body["data"] = {"id": openai_batch_id(batch["id"])}
    else:
        name = anthropic_batch_id(batch["id"]) if batch["api"] == "anthropic" else str(batch["id"])
        body["data"] = {"id": name, "object": "batch", "api": batch["api"], "status": batch["status"],
                        "total": batch["total"], "counts": counts, "created_at": rfc3339(batch["created_at"]),
                        "finished_at": rfc3339(batch["finished_at"]), "metadata": batch["metadata"]}
    return json.dumps(body, separators=(",", ":"))


def event_name(event_id: uuid.UUID) -> str:
    """An event's id as sent: evt_<hex> (also its webhook-id header)."""
    return f"evt_{event_id.hex}"
