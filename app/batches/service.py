"""The batch service the API calls: submit, read, list, results and cancel. No Flask, no RabbitMQ."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

import psycopg

from app.auth_model import ATTRIBUTION, Caller
from app.batches import store
from app.batches.errors import BatchBodyTooLarge, BatchNotFound
from app.batches.finals import cancel_queued
from app.batches.intake import ParsedBatch, parse_batch
from app.blocking import off_the_hub
from app.errors import BadRequest, ServiceUnavailable
from app.payloads import PayloadStore
from app.runtime import Runtime

RESULTS_CHUNK = 2000
_STATES = ("queued", "running", "completed", "discarded", "cancelled")
_payloads_lock = threading.Lock()


class InvalidCursor(BadRequest):
    code = "invalid_cursor"


def payload_store(runtime: Runtime) -> PayloadStore:
    """This process's PayloadStore (one per runtime)."""
    with _payloads_lock:
        found = runtime.services.get("payloads")
        if found is None:
            found = runtime.services["payloads"] = PayloadStore(runtime.settings.batch_payload_dir)
    return found  # type: ignore[no-any-return]


def submit_batch(runtime: Runtime, caller: Caller, raw: bytes) -> dict[str, Any]:
    """Validate the whole body, write every item's request file, commit batch + items; the new batch object."""
    settings = runtime.settings
    if len(raw) > settings.batch_max_bytes:
        raise BatchBodyTooLarge(message=f"a batch body holds at most {settings.batch_max_bytes} bytes")
    parsed = parse_batch(raw, max_items=settings.batch_max_items)
    batch_id = uuid4()
    payloads = payload_store(runtime)
    try:
        with runtime.pool.connection() as conn, conn.transaction():
            row = _store_batch(conn, caller, batch_id, parsed, payloads)
            store.notify(conn, store.SUBMIT_CHANNEL, str(batch_id))
    except BaseException as exc:
        payloads.remove_batch(batch_id)
        if isinstance(exc, psycopg.OperationalError):
            raise ServiceUnavailable("database_unavailable", "cannot store the batch: database unavailable") from exc
        raise
    return batch_view(row, {"queued": parsed.count}, items=[], next_after=-1)


def _store_batch(conn: psycopg.Connection[Any], caller: Caller, batch_id: UUID, parsed: ParsedBatch,
                 payloads: PayloadStore) -> dict[str, Any]:
    """Insert the batch and COPY its items on a helper thread while this one writes the request files; the
    caller commits only after both are done (the files durable first)."""
    batch = {
        "id": batch_id, "shape": parsed.shape, "metadata": _jsonb(parsed.metadata), "total": parsed.count,
        "owner": caller.owner, **caller.attribution(),
    }

    def insert() -> dict[str, Any]:
        row = store.insert_batch(conn, batch)
        store.copy_items(conn, batch_id, parsed.models)
        return row

    with ThreadPoolExecutor(1, thread_name_prefix="relay-batch-copy") as pool:
        inserted = pool.submit(insert)
        try:
            off_the_hub(payloads.write_requests, batch_id, parsed.item_bodies())  # the COPY runs meanwhile
        finally:
            row = inserted.result()  # the connection is ours again before the transaction ends
    return row


def get_batch(runtime: Runtime, caller: Caller, batch_id: str, *, state: str | None = None, after: int = -1,
              limit: int = 100) -> dict[str, Any]:
    """The batch object with counts and one page of items (optionally of one state)."""
    with runtime.pool.connection() as conn:
        row = _owned(conn, caller, batch_id)
        counts = store.item_counts(conn, row["id"], row["total"])
        if row["finished_at"] is None and not counts.get("queued") and not counts.get("running"):
            row["finished_at"] = store.finish_batch(conn, row["id"])
        items = store.list_items(conn, row["id"], state=state, after=after, limit=limit) if limit else []
    next_after = items[-1]["idx"] if len(items) == limit and items else None
    return batch_view(row, counts, items=items, next_after=next_after)


def list_batches(runtime: Runtime, caller: Caller, *, limit: int = 20, cursor: str | None = None) -> dict[str, Any]:
    """The caller's own batches, newest first, with a cursor for the next page."""
    before = _decode_cursor(cursor) if cursor else None
    with runtime.pool.connection() as conn:
        rows = store.list_batches(conn, caller.owner, before=before, limit=limit)
    next_cursor = _encode_cursor(rows[-1]["created_at"], rows[-1]["id"]) if len(rows) == limit else None
    return {"data": [summary_view(r) for r in rows], "next_cursor": next_cursor}


def cancel_batch(runtime: Runtime, caller: Caller, batch_id: str) -> dict[str, Any]:
    """Cancel the batch (idempotent): queued items cancelled now, running ones stopped by every worker."""
    with runtime.pool.connection() as conn:
        with conn.transaction():
            row = _owned(conn, caller, batch_id)
            store.mark_cancelled(conn, row["id"])
            cancel_queued(conn, row)
            store.notify(conn, store.CANCEL_CHANNEL, str(row["id"]))
        with conn.transaction():
            store.finish_batch(conn, row["id"])
        fresh = store.get_batch(conn, row["id"]) or row
        counts = store.item_counts(conn, row["id"], row["total"])
    return batch_view(fresh, counts, items=[], next_after=-1)


def open_results(runtime: Runtime, caller: Caller, batch_id: str, *, jsonl: bool) -> Iterator[bytes]:
    """Check access now (404 before streaming starts), then stream the results in idx order."""
    with runtime.pool.connection() as conn:
        row = _owned(conn, caller, batch_id)
    return _stream_results(runtime, row["id"], jsonl=jsonl)


def _stream_results(runtime: Runtime, batch_id: UUID, *, jsonl: bool) -> Iterator[bytes]:
    """`{"results": [...]}` or JSON Lines, chunk by chunk; completed items splice their response file raw."""
    payloads = payload_store(runtime)
    sep = b"\n" if jsonl else b","
    yield b"" if jsonl else b'{"results":['
    after, first = -1, True
    while True:
        with runtime.pool.connection() as conn:
            rows = store.result_rows(conn, batch_id, after=after, limit=RESULTS_CHUNK)
        if not rows:
            break
        entries = [_result_entry(payloads, batch_id, idx, state, error) for idx, state, error in rows]
        chunk = sep.join(entries)
        yield chunk + b"\n" if jsonl else (chunk if first else b"," + chunk)
        first, after = False, rows[-1][0]
    if not jsonl:
        yield b"]}"


def _result_entry(payloads: PayloadStore, batch_id: UUID, idx: int, state: str, error: str | None) -> bytes:
    parts = [b'{"idx":%d,"state":"%s"' % (idx, state.encode())]
    if state == "completed":
        body = payloads.read_response(batch_id, idx)
        if body:
            parts.append(b',"response":' + body.strip())
    if error is not None:
        parts.append(b',"error":' + json.dumps(error).encode())
    parts.append(b"}")
    return b"".join(parts)


def batch_view(row: dict[str, Any], counts: dict[str, int], *, items: list[dict[str, Any]],
               next_after: int | None) -> dict[str, Any]:
    """The batch object: summary, counts for every state, and a page of items."""
    view = summary_view(row)
    view["counts"] = {s: counts.get(s, 0) for s in _STATES}
    view["items"] = items
    view["items_next_after"] = next_after
    return view


def summary_view(row: dict[str, Any]) -> dict[str, Any]:
    """A batch without counts or items; never the relay key hash or the owner key."""
    view = {"id": row["id"], "object": "batch", "status": row["status"], "shape": row["shape"],
            "total": row["total"], "finished": row["finished_at"] is not None, "finished_at": row["finished_at"],
            "created_at": row["created_at"], "cancelled_at": row["cancelled_at"], "metadata": row["metadata"]}
    view.update({name: row[name] for name in ATTRIBUTION if name != "relay_key_hash"})  # never the hash
    return view


def _owned(conn: psycopg.Connection[Any], caller: Caller, batch_id: str) -> dict[str, Any]:
    """The batch row if CALLER submitted it; BatchNotFound otherwise (also for malformed ids)."""
    try:
        parsed = UUID(batch_id)
    except (ValueError, TypeError):
        raise BatchNotFound(message="batch not found") from None
    row = store.get_batch(conn, parsed, owner=caller.owner)
    if row is None:
        raise BatchNotFound(message="batch not found")
    return row


def _jsonb(value: dict[str, Any] | None) -> Any:
    from psycopg.types.json import Jsonb

    return Jsonb(value) if value is not None else None


def _encode_cursor(created_at: datetime, batch_id: UUID) -> str:
    raw = f"{created_at.isoformat()}|{batch_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, _, ident = raw.partition("|")
        return datetime.fromisoformat(stamp), UUID(ident)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidCursor(message="invalid cursor: pass next_cursor from the previous page") from exc
