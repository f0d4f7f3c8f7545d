"""Anthropic's Message Batches API over Relay's batches: create, retrieve, list, cancel, delete and results.
No Flask."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from app.auth_model import Caller
from app.batches import service
from app.batches.errors import BatchNotEnded
from app.batches.origin import Rerun
from app.batches.results import cut_visibly
from app.compat import provider
from app.compat.inputs import from_anthropic_body
from app.compat.views import anthropic_batch, anthropic_batch_id, anthropic_cut_line, anthropic_result_line
from app.errors import ValidationFailed
from app.runtime import Runtime

API = "anthropic"


def create_batch(runtime: Runtime, caller: Caller, raw: bytes | bytearray,
                 rerun: Rerun | None = None) -> dict[str, Any]:
    """A batch of the Messages requests in RAW (`{"requests": [{custom_id, params}, ...]}`); RERUN: the lineage of
    a re-run."""
    batch = from_anthropic_body(raw, max_requests=runtime.settings.batch_max_items)
    batch_id = provider.create(runtime, caller, batch, columns={"api": API}, rerun=rerun)
    return get_batch(runtime, caller, anthropic_batch_id(batch_id))


def get_batch(runtime: Runtime, caller: Caller, text_id: str) -> dict[str, Any]:
    return anthropic_batch(*provider.load(runtime, caller, text_id, API))


def cancel_batch(runtime: Runtime, caller: Caller, text_id: str) -> dict[str, Any]:
    """Cancel a batch before its processing ends ("any time before processing ends"); 409 after."""
    return anthropic_batch(*provider.cancel(runtime, caller, text_id, API, ended=lambda row, _counts: (
        f"message batch {anthropic_batch_id(row['id'])} has ended: it can no longer be canceled")))


def list_batches(runtime: Runtime, caller: Caller, *, after_id: str | None, before_id: str | None,
                 limit: int) -> dict[str, Any]:
    """Anthropic's list envelope of the caller's message batches, newest first."""
    if after_id and before_id:
        raise ValidationFailed(message="pass after_id or before_id, not both")
    found = provider.page(runtime, caller, API, after=after_id, before=before_id, limit=limit)
    data = [anthropic_batch(row, found.counts[row["id"]]) for row in found.rows]
    return {"data": data, "has_more": found.has_more, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}


def delete_batch(runtime: Runtime, caller: Caller, text_id: str) -> dict[str, Any]:
    """Delete an ended batch with its items and stored payloads (its usage events stay)."""
    row, _counts = provider.load(runtime, caller, text_id, API)
    if row["finished_at"] is None:
        raise BatchNotEnded(message="a message batch can be deleted once its processing has ended: cancel it first")
    service.delete_batch(runtime, caller, str(row["id"]))
    return {"id": anthropic_batch_id(row["id"]), "type": "message_batch_deleted"}


def results(runtime: Runtime, caller: Caller, text_id: str) -> Iterator[bytes]:
    """The results as JSON Lines, in request order; access and the end of processing are checked first."""
    row, _counts = provider.load(runtime, caller, text_id, API)
    if row["finished_at"] is None:
        raise BatchNotEnded(message="results are available once the batch's processing has ended")
    lines = (anthropic_result_line(item) for item in provider.outcomes(runtime, caller, row["id"]))
    return provider.joined(cut_visibly(lines, anthropic_cut_line))
