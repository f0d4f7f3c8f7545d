"""Re-run what failed: a new batch made from the items of a finished batch that ended `discarded` (or those with
chosen error codes), with their original request bytes, under the caller's current policy. No Flask.

The new batch goes through the same intake as a submit of the API that created the source batch: Relay's own
`POST /v1/batches` body (submit_rerun), or, through app/compat/rerun.py, OpenAI's create from a new input file
holding those lines with their `custom_id`s, or Anthropic's create with them. It records `rerun_of` (the batch
re-run) and `original_id` (the first batch of the chain); each of its items records `source_idx`, its idx in that
first batch, so that the chain's results can be read merged (app/batches/merged.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from app.auth_model import Caller
from app.batches import budget, rerun_store, service, store
from app.batches.errors import BatchNotFinished, BatchNotFound, InvalidBatch, NothingToRerun, RerunExists
from app.batches.origin import BatchOrigin, Rerun
from app.errors import ServiceUnavailable
from app.payload_port import PayloadMissing
from app.runtime import Runtime
from schemas.batch_ids import parse_batch_id

KEEP: Any = object()  # an option left out of the re-run body: the source batch's value is kept


class PayloadUnavailable(ServiceUnavailable):
    """The batch's request file is not readable here (another replica's payload directory)."""

    code = "payload_unavailable"


@dataclass(frozen=True)
class RerunPlan:
    """What a re-run submits: the source batch's row, each chosen item's (idx, idx in the chain's original batch,
    custom_id), their request bodies as submitted, their custom_ids (the idx where there is none), the metadata
    and the lineage of the new batch."""

    source: dict[str, Any]
    picked: list[tuple[int, int, str | None]]
    bodies: list[bytes]
    custom_ids: list[str]
    metadata: Any
    lineage: Rerun


def plan_rerun(runtime: Runtime, caller: Caller, text_id: str, *, codes: list[str] | None = None,
               metadata: Any = KEEP, max_cost: Any = KEEP) -> RerunPlan:
    """The re-run of the chosen items of CALLER's finished batch TEXT_ID, to be submitted through the intake of
    the API that created it (`source["api"]`: submit_rerun for Relay's own). CODES: re-run the discarded or
    cancelled items with these error codes instead of every discarded one. METADATA and MAX_COST (dollars, or None
    for no cap) default to the source's.

    404 batch_not_found for a batch the caller may not read; 409 batch_not_finished while items are queued or
    running; 409 nothing_to_rerun when no item matches (its details count the items by error code)."""
    with runtime.pool.connection() as conn:
        batch_id = parse_batch_id(text_id)
        source = rerun_store.source_batch(conn, batch_id, caller.owner) if batch_id else None
        if source is None:
            raise BatchNotFound(message="batch not found")
        _check_finished(store.item_counts(conn, source["id"], source["total"]))
        picked = rerun_store.items_to_rerun(conn, source["id"], codes)
        if not picked:
            raise _nothing_to_rerun(codes, rerun_store.error_codes(conn, source["id"]))
    bodies = _request_bodies(runtime, source["id"], [idx for idx, _, _ in picked])
    cap = source["max_cost_nanos"] if max_cost is KEEP else budget.to_nanos(max_cost) if max_cost is not None \
        else None
    lineage = Rerun(rerun_of=source["id"], original_id=source["original_id"] or source["id"],
                    source_idxs=[original for _, original, _ in picked], max_cost_nanos=cap,
                    max_cost_mode=budget.cap_mode(source) if max_cost is KEEP else "hard")
    custom_ids = [custom_id if custom_id is not None else str(idx) for idx, _, custom_id in picked]
    return RerunPlan(source, picked, bodies, custom_ids, source["metadata"] if metadata is KEEP else metadata,
                     lineage)


def submit_rerun(runtime: Runtime, caller: Caller, plan: RerunPlan) -> UUID:
    """Submit PLAN as a batch of Relay's own API (the source's shape and completion window); the new batch's id."""
    source = plan.source
    try:
        raw = _relay_body(source["shape"], plan.metadata, source["completion_window"], plan.bodies)
        created = service.submit_batch(runtime, caller, raw, BatchOrigin({}, rerun=plan.lineage))
    except InvalidBatch as exc:
        raise _told_by_source(exc, plan.picked) from None
    return UUID(str(created["id"]))


def submit_once(runtime: Runtime, plan: RerunPlan, submit: Callable[[], UUID], *, force: bool = False) -> UUID:
    """SUBMIT() (PLAN's re-run through its API's intake) unless a re-run of the same batch already holds the same
    items (queued, running or finished): then 409 rerun_exists naming it, unless FORCE. Re-runs of one batch are
    decided one at a time, so concurrent ones (a double click, a retry after a timeout) make one batch."""
    with runtime.pool.connection() as conn, conn.transaction():
        rerun_store.lock_reruns(conn, plan.source["id"])
        found = None if force else rerun_store.rerun_of_items(conn, plan.source, plan.lineage.source_idxs)
        if found is not None:
            raise RerunExists(message=f"batch {plan.source['id']} already has a re-run of these {found['items']}"
                                      f" items: {found['id']}; read it, or send \"force\": true to run them again",
                              details={"rerun_id": str(found["id"]), "items": int(found["items"])})
        return submit()


def _check_finished(counts: dict[str, int]) -> None:
    waiting = {"queued": counts.get("queued", 0), "running": counts.get("running", 0)}
    if waiting["queued"] or waiting["running"]:
        raise BatchNotFinished(message=f"the batch still has {waiting['queued']} queued and {waiting['running']}"
                                       " running items: re-run it once it has finished", details=waiting)


def _nothing_to_rerun(codes: list[str] | None, found: dict[str, int]) -> NothingToRerun:
    what = "no discarded item" if codes is None else f"no discarded or cancelled item with error code {codes}"
    return NothingToRerun(message=f"nothing to re-run: the batch has {what}", details={"error_codes": found})


def _request_bodies(runtime: Runtime, batch_id: UUID, idxs: list[int]) -> list[bytes]:
    """The items' request bodies as they were submitted."""
    payloads = service.payload_store(runtime)
    try:
        return [payloads.read_request(batch_id, idx) for idx in idxs]
    except PayloadMissing as exc:
        raise PayloadUnavailable(message="cannot re-run: the batch's requests are not visible to"
                                                        f" this replica ({exc})") from exc


def _relay_body(shape: str, metadata: dict[str, Any] | None, window: str | None, bodies: list[bytes]) -> bytes:
    """Relay's own submit body of BODIES (spliced in as they are), with the source's completion WINDOW (a deadline
    that long after the re-run's submit)."""
    head = {"shape": shape} | ({"metadata": metadata} if metadata is not None else {}) | \
        ({"completion_window": window} if window is not None else {})
    return json.dumps(head)[:-1].encode() + b',"requests":[' + b",".join(bodies) + b"]}"


def _told_by_source(exc: InvalidBatch, picked: list[tuple[int, int, str | None]]) -> InvalidBatch:
    """The intake's refusal of a re-run with each item told by its idx in the batch re-run."""
    details = [{**d, "idx": picked[d["idx"]][0]} if isinstance(d.get("idx"), int) else d for d in exc.details or []]
    return InvalidBatch(message="the items to re-run are no longer valid requests: see details (idx: in the batch"
                                " re-run)", details=details)

