"""The batch service the API calls: submit, read, list, cancel, delete (results: results.py). No Flask, no RabbitMQ."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID, uuid4

import psycopg

from app.auth import get_policy
from app.auth_model import ATTRIBUTION, Caller
from app.batches import budget, lifecycle, operator_store, outbox, pacing, retention_store, store
from app.batches.errors import (
    BatchAlreadyFinished,
    BatchBodyTooLarge,
    BatchNotFinished,
    BatchNotFound,
    ItemNotFound,
    PacedShareTooSmall,
)
from app.batches.finals import cancel_queued, share_usage_first
from app.batches.intake import NeedsScanner, parse_batch, typed_batch
from app.batches.origin import BatchOrigin
from app.blocking import start_off_the_hub
from app.cursors import decode_cursor, encode_cursor
from app.errors import DatabaseUnavailable
from app.observability.tracing import get_tracing
from app.payload_backends import payload_store
from app.payload_port import PayloadMissing, ResponseRef
from app.runtime import Runtime
from app.usage.queries import cost_usd, known_cost
from app.webhooks.callbacks import callback_columns
from schemas.batch_ids import parse_batch_id
from schemas.batches import ITEM_STATES
from schemas.durations import format_duration, parse_duration

# A cancel chosen as a deadlock's victim runs again. The one deadlock seen (its batch's shared usage row, written
# after the items were locked, beside a group commit of its items) is gone: the row is now written first.
CANCEL_ATTEMPTS = 3

if TYPE_CHECKING:
    from app.payload_files import Body


def submit_batch(runtime: Runtime, caller: Caller, raw: bytes | bytearray,
                 origin: BatchOrigin | None = None) -> dict[str, Any]:
    """Validate a whole `POST /v1/batches` body, then store it (create_batch); the new batch object.
    ORIGIN: what a provider API's create adds (its columns, custom_ids, writes in the same transaction).

    A body the typed path reads is stored while its items are checked (their rows are copied as they pass, the
    request file is written meanwhile): an item it cannot vouch for rolls that back, and the scanner decides."""
    settings = runtime.settings
    policy = get_policy(runtime, caller.policy_id)
    if policy is not None and (starved := policy.pacing_starved()):
        raise PacedShareTooSmall(message=f"policy {policy.name!r} paces batches at {starved}: no item could ever"
                                         " start (the operator raises its batch.share or the limit)")
    if len(raw) > settings.batch_max_bytes:
        raise BatchBodyTooLarge(message=f"a batch body holds at most {settings.batch_max_bytes} bytes")
    limits = {"max_items": settings.batch_max_items, "max_item_bytes": settings.max_request_bytes}
    typed = typed_batch(raw, **limits)
    if typed is not None:
        try:
            return create_batch(runtime, caller, shape=typed.shape, metadata=typed.metadata, bodies=typed.bodies(),
                                models=typed.checked_models(), total=len(typed.spans), origin=origin,
                                options=typed.options)
        except NeedsScanner:
            pass  # nothing was stored
    parsed = parse_batch(raw, **limits)
    return create_batch(runtime, caller, shape=parsed.shape, metadata=parsed.metadata, bodies=parsed.item_bodies(),
                        models=parsed.models, total=parsed.count, origin=origin, options=parsed.options)


def create_batch(runtime: Runtime, caller: Caller, *, shape: str, metadata: dict[str, Any] | None,
                 bodies: Iterable[Body], models: Iterable[str], total: int,
                 origin: BatchOrigin | None = None, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Store a batch of TOTAL items: each item's request BODIES (its JSON bytes) and model name, in idx order.
    OPTIONS: the submit's other envelope members (option_columns); a spend cap (its `max_cost`, else a re-run's) is
    refused (400) unless every model the items name is priced.

    The request file is written and synced on a native thread while this one inserts the batch and copies the
    items into Postgres; the transaction commits only after both, and a failure of either (an exception raised
    while iterating MODELS included) leaves nothing: no row, no visible file.
    """
    batch_id = uuid4()
    payloads = payload_store(runtime)
    rerun = origin.rerun if origin else None
    options = options or {}
    columns = batch_columns(runtime, options)
    if rerun is not None and rerun.max_cost_nanos is not None and "max_cost_nanos" not in columns:
        columns.update(max_cost_nanos=rerun.max_cost_nanos, max_cost_mode=rerun.max_cost_mode)
    cap = columns.get("max_cost_nanos")
    batch = {
        "id": batch_id, "shape": shape, "metadata": _jsonb(metadata), "total": total,
        "owner": caller.owner, **caller.attribution(), **columns, **(origin.columns if origin else {}),
        **(rerun.columns if rerun else {}),
        "trace_context": get_tracing(runtime).traceparent({"relay.batch.id": str(batch_id),
                                                           "relay.batch.items": total}),
    }
    named: set[str] = set()
    if cap is not None:
        models = _noting(models, named)  # only a capped batch pays for this
    stop = threading.Event()
    written = start_off_the_hub(payloads.write_requests, batch_id, bodies, stop.is_set)
    try:
        with runtime.pool.connection() as conn, conn.transaction():
            row = store.insert_batch(conn, batch)
            store.copy_items(conn, batch_id, models, origin.custom_ids if origin else None,
                             rerun.source_idxs if rerun else None)
            if cap is not None:
                budget.check_priced(runtime, named)
            if origin is not None and origin.also is not None:
                origin.also(conn, batch_id)
            written()  # the request file is durable and in place before the commit
            store.notify(conn, store.SUBMIT_CHANNEL, str(batch_id))
    except BaseException as exc:
        stop.set()
        with contextlib.suppress(Exception):
            written()  # the writer is done (stopped early, or failed) before its files are removed
        payloads.remove_batch(batch_id)
        if isinstance(exc, psycopg.OperationalError):
            raise DatabaseUnavailable(message="cannot store the batch: database unavailable") from exc
        raise
    return batch_view(row, {"queued": total}, items=[], next_after=None,  # no item is listed: no next page
                      pacing=_pacing(runtime, row, total))


def batch_columns(runtime: Runtime, options: dict[str, Any]) -> dict[str, Any]:
    """The batch columns of a submit's options (option_columns), its callback's included: 400
    callback_url_not_allowed for a host the operator does not allow. The estimate checks a body with this too."""
    return {**option_columns(options),
            **callback_columns(runtime.settings, options.get("callback_url"), options.get("callback_secret"))}


def option_columns(options: dict[str, Any]) -> dict[str, Any]:
    """The batch columns of a submit's options: a completion_window sets the deadline (expires_at), a max_cost the
    spend cap (in nano-dollars)."""
    columns: dict[str, Any] = {}
    if (max_cost := options.get("max_cost")) is not None:
        columns["max_cost_nanos"] = budget.to_nanos(max_cost)
        columns["max_cost_mode"] = options.get("max_cost_mode") or "hard"
    if (window := options.get("completion_window")) is not None:
        seconds = parse_duration(window)
        columns["completion_window"] = format_duration(seconds)
        columns["expires_at"] = datetime.now(UTC) + timedelta(seconds=seconds)
    return columns


def _pacing(runtime: Runtime, row: dict[str, Any], remaining: int) -> dict[str, Any] | None:
    """The batch's pacing (a paced policy's batches): its rate and expected finish (app/batches/pacing.py)."""
    policy = get_policy(runtime, row["policy_id"])
    if policy is None or not policy.batch_pace or remaining <= 0:
        return None
    with runtime.pool.connection() as conn:
        used = pacing.batch_share_used(conn, policy.rate_limits)
        others, ahead = outbox.paced_waiting(conn, policy.id, row["owner"], row["created_at"])
    deadline = row.get("expires_at")
    return pacing.pacing_view(policy, remaining, used, deadline.timestamp() if deadline else None,
                              others=others, ahead=ahead)


def _noting(models: Iterable[str], seen: set[str]) -> Iterator[str]:
    """MODELS as they are, each name added to SEEN on its way."""
    for model in models:
        seen.add(model)
        yield model


def get_batch(runtime: Runtime, caller: Caller | None, batch_id: str, *, state: str | None = None, after: int = -1,
              limit: int = 100, custom_id: str | None = None) -> dict[str, Any]:
    """The batch object with counts and one page of items (optionally of one state, or whose custom_id starts with
    CUSTOM_ID). A caller of None is the operator (admin routes only): any owner's batch."""
    return batch_object(runtime, find_batch(runtime, caller, batch_id), state=state, after=after, limit=limit,
                        custom_id=custom_id)


def find_batch(runtime: Runtime, caller: Caller | None, batch_id: str) -> dict[str, Any]:
    """The batch row (owned_batch), with `api`: the API that created it, whose view answers by default."""
    with runtime.pool.connection() as conn:
        return owned_batch(conn, caller, batch_id)


def batch_object(runtime: Runtime, row: dict[str, Any], *, state: str | None = None, after: int = -1,
                 limit: int = 100, custom_id: str | None = None) -> dict[str, Any]:
    """get_batch of a batch row already read (find_batch)."""
    with runtime.pool.connection() as conn:
        counts, cost = store.progress(conn, row["id"], row["total"])
        lifecycle.end_if_final(conn, row, counts)
        items = store.list_items(conn, row["id"], state=state, after=after, limit=limit + 1,
                                 custom_id=custom_id) if limit else []
        names = store.attribution_names(conn, row)
        usage = _usages(conn, [row])
    next_after = items[limit - 1]["idx"] if len(items) > limit else None  # null on the last page, full or not
    paced = _pacing(runtime, row, counts["queued"]) if row["status"] == "queued" else None
    return {**batch_view(row, counts, items=items[:limit], next_after=next_after, pacing=paced, cost_nanos=cost,
                         usage=usage.get(row["id"])), **names}


def list_batches(runtime: Runtime, caller: Caller, *, limit: int = 20, cursor: str | None = None,
                 **filters: Any) -> dict[str, Any]:
    """The caller's own batches matching FILTERS (status, finished, search: see store.state_clauses), newest
    first, with a cursor for the next page."""
    before = decode_cursor(cursor) if cursor else None
    with runtime.pool.connection() as conn:
        rows = store.list_batches(conn, caller.owner, before=before, limit=limit, **filters)
        usage = _usages(conn, rows)
    return _page([summary_view(r, usage.get(r["id"])) for r in rows], limit)


def list_all_batches(runtime: Runtime, *, limit: int = 20, cursor: str | None = None,
                     **filters: Any) -> dict[str, Any]:
    """The operator's list (admin routes): every owner's batches matching FILTERS (see operator_store.list_all_batches),
    newest first, each with its policy and principal names, and a cursor for the next page."""
    before = decode_cursor(cursor) if cursor else None
    with runtime.pool.connection() as conn:
        rows = operator_store.list_all_batches(conn, before=before, limit=limit, **filters)
        usage = _usages(conn, rows)
    return _page([{**summary_view(r, usage.get(r["id"])), "policy": r["policy"], "principal": r["principal"]}
                  for r in rows], limit)


def _usages(conn: psycopg.Connection[Any], rows: list[dict[str, Any]]) -> dict[UUID, dict[str, Any]]:
    """The usage of those ROWS whose batch has finished (summed once, then kept: see store.finished_usage)."""
    found = store.finished_usage(conn, [r["id"] for r in rows if r["finished_at"] is not None])
    return {batch_id: usage_view(u) for batch_id, u in found.items()}


def usage_view(usage: dict[str, Any]) -> dict[str, Any]:
    """A finished batch's tokens and cost, as the usage API tells them (cost null when only unpriced)."""
    cost = known_cost(usage["cost_nanos"], usage["unpriced"])
    return {"input_tokens": int(usage["input_tokens"]), "output_tokens": int(usage["output_tokens"]),
            "cached_tokens": int(usage["cached_tokens"]), "cost_nanos": cost, "cost_usd": cost_usd(cost),
            "unpriced": int(usage["unpriced"])}


def _page(views: list[dict[str, Any]], limit: int) -> dict[str, Any]:
    """A page of batch views, newest first, with the cursor of the next page when this one is full."""
    last = views[-1] if len(views) == limit else None
    return {"data": views, "next_cursor": encode_cursor(last["created_at"], last["id"]) if last else None}


def _cancel_queued_items(conn: psycopg.Connection[Any], caller: Caller | None, batch_id: str) -> dict[str, Any]:
    """The batch marked cancelled and its queued items cancelled, in one transaction; its row."""
    with conn.transaction():
        row = owned_batch(conn, caller, batch_id)
        share_usage_first(conn, row)
        if row["status"] != "cancelled" and _all_final(store.item_counts(conn, row["id"], row["total"])):
            raise BatchAlreadyFinished(message="every item of the batch is already final: nothing to cancel")
        store.mark_cancelled(conn, row["id"])
        cancel_queued(conn, row)
        store.notify(conn, store.CANCEL_CHANNEL, str(row["id"]))
    return row


def cancel_batch(runtime: Runtime, caller: Caller | None, batch_id: str) -> dict[str, Any]:
    """Cancel the batch (idempotent): queued items cancelled now, running ones stopped by every worker.
    BatchAlreadyFinished (409) when every item was final before any cancel: nothing is cancelled or changed.
    A caller of None is the operator (admin routes only). Run again, whole, when Postgres picks one of its
    transactions as a deadlock's victim beside a group commit of the batch's items (what it did before stays done)."""
    for attempt in range(CANCEL_ATTEMPTS):
        try:
            return _cancel(runtime, caller, batch_id)
        except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure):
            if attempt == CANCEL_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _cancel(runtime: Runtime, caller: Caller | None, batch_id: str) -> dict[str, Any]:
    with runtime.pool.connection() as conn:
        row = _cancel_queued_items(conn, caller, batch_id)
        with conn.transaction():
            lifecycle.finish_batch(conn, row["id"])
        fresh = store.get_batch(conn, row["id"]) or row
        counts, cost = store.progress(conn, row["id"], row["total"])
        usage = _usages(conn, [fresh])
    return batch_view(fresh, counts, items=[], next_after=None, cost_nanos=cost, usage=usage.get(fresh["id"]))


def delete_batch(runtime: Runtime, caller: Caller, batch_id: str) -> dict[str, Any]:
    """Delete a finished (or cancelled and settled) batch: its rows and payload files go, its usage events stay.

    409 batch_not_finished while an item is queued or running. Afterwards the batch answers 404 like any unknown id.
    """
    with runtime.pool.connection() as conn, conn.transaction():
        row = owned_batch(conn, caller, batch_id)
        if not retention_store.delete_finished_batch(conn, row["id"]):
            if not store.existing_batches(conn, [row["id"]]):  # a racing delete got there first
                raise BatchNotFound(message="batch not found")
            counts = store.item_counts(conn, row["id"], row["total"])
            waiting = {"queued": counts.get("queued", 0), "running": counts.get("running", 0)}
            raise BatchNotFinished(message=f"the batch still has {waiting['queued']} queued and {waiting['running']}"
                                           " running items: cancel it or wait until it finishes, then delete it",
                                   details=waiting)
    payload_store(runtime).remove_batch(row["id"])  # after the commit: a crash here leaves a stray folder for purge
    return {"id": row["id"], "object": "batch", "deleted": True}


def get_item(runtime: Runtime, caller: Caller | None, batch_id: str, text_idx: str) -> dict[str, Any]:
    """One item (TEXT_IDX: its idx) with its request and, once completed, its response (as stored; None where this
    replica cannot see them). A caller of None is the operator."""
    with runtime.pool.connection() as conn:
        row = owned_batch(conn, caller, batch_id)
        idx = int(text_idx) if text_idx.isascii() and text_idx.isdigit() and len(text_idx) < 10 else -1
        item = store.get_item(conn, row["id"], idx) if idx >= 0 else None
    if item is None:
        raise ItemNotFound(message=f"the batch has no item {text_idx[:20]!r} (its items are 0 to {row['total'] - 1})")
    payloads = payload_store(runtime)
    segment, offset, length = (item.pop(k) for k in ("response_segment", "response_offset", "response_length"))
    try:
        request = json.loads(payloads.read_request(row["id"], idx))
    except (PayloadMissing, ValueError):
        request = None
    response = None
    if item["state"] == "completed":
        ref = ResponseRef(segment, offset, length) if segment is not None else None
        stored = payloads.read_response(row["id"], idx, ref)
        response = json.loads(stored) if stored else None
    return {**item, "batch_id": row["id"], "request": request, "response": response}


def _all_final(counts: dict[str, int]) -> bool:
    return not counts.get("queued") and not counts.get("running")


def batch_view(row: dict[str, Any], counts: dict[str, int], *, items: list[dict[str, Any]],
               next_after: int | None, pacing: dict[str, Any] | None = None, cost_nanos: int = 0,
               usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """The batch object: summary, counts for every state, the recorded cost, a page of items, its pacing (paced
    policies) and, once finished, its usage (tokens too)."""
    view = summary_view(row, usage)
    view["pacing"] = pacing
    view["counts"] = {s: counts.get(s, 0) for s in ITEM_STATES}
    view["cost_usd"] = cost_usd(cost_nanos)
    view["items"] = items
    view["items_next_after"] = next_after
    return view


def summary_view(row: dict[str, Any], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """A batch without counts or items; never the relay key hash or the owner key. USAGE: a finished batch's."""
    view = {"id": row["id"], "object": "batch", "api": row["api"], "status": row["status"], "shape": row["shape"],
            "total": row["total"], "finished": row["finished_at"] is not None, "finished_at": row["finished_at"],
            "created_at": row["created_at"], "cancelled_at": row["cancelled_at"], "metadata": row["metadata"],
            "completion_window": row.get("completion_window"), "expires_at": row.get("expires_at"),
            "max_cost": budget.to_dollars(row["max_cost_nanos"]),
            "max_cost_mode": budget.cap_mode(row) if row["max_cost_nanos"] is not None else None,
            "max_cost_overshoot": budget.overshoot(row),
            "rerun_of": row["rerun_of"],
            "original_id": row["original_id"], "usage": usage}
    view.update({name: row[name] for name in ATTRIBUTION if name != "relay_key_hash"})  # never the hash
    return view


def owned_batch(conn: psycopg.Connection[Any], caller: Caller | None, batch_id: str) -> dict[str, Any]:
    """The batch row if CALLER submitted it (any batch for the operator, None); BatchNotFound otherwise (also for
    malformed ids). BATCH_ID may be spelled as any API spells it."""
    parsed = parse_batch_id(batch_id)  # any API's spelling: the UUID, batch_<hex>, msgbatch_<hex>
    if parsed is None:
        raise BatchNotFound(message="batch not found")
    row = store.get_batch(conn, parsed, owner=caller.owner if caller is not None else None)
    if row is None:
        raise BatchNotFound(message="batch not found")
    return row


def _jsonb(value: dict[str, Any] | None) -> Any:
    from psycopg.types.json import Jsonb

    return Jsonb(value) if value is not None else None
