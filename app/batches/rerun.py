"""Re-run what failed: a new batch made from the items of a finished batch that ended `discarded` (or those with
chosen error codes), with their original request bytes, under the caller's current policy. No Flask.

The new batch goes through the same intake as a submit of the API that created the source batch: Relay's own
`POST /v1/batches` body, OpenAI's create from a new input file holding those lines with their `custom_id`s, or
Anthropic's create with them. It records `rerun_of` (the batch re-run) and `original_id` (the first batch of the
chain); each of its items records `source_idx`, its idx in that first batch, so that the chain's results can be
read merged (app/batches/merged.py).
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from marshmallow import ValidationError

from app.auth_model import Caller
from app.batches import anthropic_view, budget, openai_files, openai_view, rerun_store, service, store
from app.batches.errors import BatchNotFinished, BatchNotFound, InvalidBatch, NothingToRerun
from app.batches.origin import BatchOrigin, Rerun
from app.batches.views import openai_batch_id, parse_batch_id
from app.errors import ServiceUnavailable, ValidationFailed
from app.files.disk import StagedFile
from app.payloads import PayloadMissing
from app.runtime import Runtime
from schemas.provider_batches import OpenAIBatchCreateSchema

KEEP: Any = object()  # an option left out of the re-run body: the source batch's value is kept



class PayloadUnavailable(ServiceUnavailable):
    """The batch's request file is not readable here (another replica's payload directory)."""

    code = "payload_unavailable"

def rerun_batch(runtime: Runtime, caller: Caller, text_id: str, *, codes: list[str] | None = None,
                metadata: Any = KEEP, max_cost: Any = KEEP) -> tuple[UUID, str]:
    """Re-run the chosen items of CALLER's finished batch TEXT_ID as a new batch; its id and the API that created
    the source (the new batch's too). CODES: re-run the discarded or cancelled items with these error codes
    instead of every discarded one. METADATA and MAX_COST (dollars, or None for no cap) default to the source's.

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
                    source_idxs=[original for _, original, _ in picked], max_cost_nanos=cap)
    metadata = source["metadata"] if metadata is KEEP else metadata
    custom_ids = [custom_id if custom_id is not None else str(idx) for idx, _, custom_id in picked]
    if source["api"] == openai_view.API:
        return _rerun_openai(runtime, caller, source, bodies, custom_ids, metadata, lineage), source["api"]
    if source["api"] == anthropic_view.API:
        raw = _anthropic_body(bodies, custom_ids)
        created = anthropic_view.create_batch(runtime, caller, raw, lineage)
        return _created_id(created["id"]), source["api"]
    try:
        raw = _relay_body(source["shape"], metadata, source["completion_window"], bodies)
        created = service.submit_batch(runtime, caller, raw, BatchOrigin({}, rerun=lineage))
    except InvalidBatch as exc:
        raise _told_by_source(exc, picked) from None
    return UUID(str(created["id"])), source["api"]


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


def _anthropic_body(bodies: list[bytes], custom_ids: list[str]) -> bytes:
    """Anthropic's create body of BODIES with their custom_ids."""
    requests = (b'{"custom_id":%s,"params":%s}' % (json.dumps(custom_id).encode(), body)
                for custom_id, body in zip(custom_ids, bodies, strict=True))
    return b'{"requests":[' + b",".join(requests) + b"]}"


def _rerun_openai(runtime: Runtime, caller: Caller, source: dict[str, Any], bodies: list[bytes],
                  custom_ids: list[str], metadata: Any, lineage: Rerun) -> UUID:
    """OpenAI's create of a new input file (listed in the caller's files) holding the lines to re-run."""
    try:
        create = OpenAIBatchCreateSchema().load({"input_file_id": "", "endpoint": source["endpoint"],
                                                 "completion_window": source["completion_window"],
                                                 "metadata": metadata})
    except ValidationError as exc:
        raise ValidationFailed(message="invalid re-run of an OpenAI batch: metadata holds at most 16"
                                                  " string pairs", details=exc.messages) from None
    upload = _input_file(runtime, caller, source, bodies, custom_ids)
    try:
        created = openai_view.create_batch(runtime, caller, {**create, "input_file_id": upload}, lineage)
    except BaseException:
        openai_files.delete(runtime, caller, upload)
        raise
    return _created_id(created["id"])


def _input_file(runtime: Runtime, caller: Caller, source: dict[str, Any], bodies: list[bytes],
                custom_ids: list[str]) -> str:
    """A batch input file of the lines to re-run, uploaded as the caller; its OpenAI id."""
    disk = openai_view.file_disk(runtime)
    staged: StagedFile = disk.stage()
    head = {"method": "POST", "url": source["endpoint"]}
    try:
        for custom_id, body in zip(custom_ids, bodies, strict=True):
            if b"\n" in body or b"\r" in body:  # one line per request
                body = json.dumps(json.loads(body)).encode()
            staged.handle.write(json.dumps({"custom_id": custom_id, **head})[:-1].encode() + b',"body":' + body
                                + b"}\n")
    except BaseException:
        disk.discard(staged)
        raise
    name = f"rerun-of-{openai_batch_id(source['id'])}.jsonl"
    return str(openai_files.upload(runtime, caller, staged, filename=name, purpose="batch")["id"])


def _created_id(text_id: str) -> UUID:
    parsed = parse_batch_id(text_id)
    assert parsed is not None
    return parsed


def _told_by_source(exc: InvalidBatch, picked: list[tuple[int, int, str | None]]) -> InvalidBatch:
    """The intake's refusal of a re-run with each item told by its idx in the batch re-run."""
    details = [{**d, "idx": picked[d["idx"]][0]} if isinstance(d.get("idx"), int) else d for d in exc.details or []]
    return InvalidBatch(message="the items to re-run are no longer valid requests: see details (idx: in the batch"
                                " re-run)", details=details)

