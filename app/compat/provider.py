"""What the OpenAI and Anthropic batch APIs share: creating a batch through Relay's own submit, loading one API's
batch with its counts (404 under the batches' access rule), pages of them, cancel, and every item's outcome merged
with its result. No Flask."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg

from app.auth_model import Caller
from app.batches import reads, results, service
from app.batches.errors import BatchAlreadyFinished, InvalidBatch
from app.batches.origin import BatchOrigin, Rerun
from app.batches.results import ResultItem
from app.compat.inputs import ProviderBatch
from app.compat.views import parse_batch_id
from app.runtime import Runtime

Row = dict[str, Any]
STREAM_CHUNK = 1 << 16  # bytes of result lines per chunk of a streamed answer


@dataclass
class Page:
    """A page of one API's batches with each one's counts, and whether more follow."""

    rows: list[Row]
    counts: dict[UUID, dict[str, int]]
    has_more: bool


def create(runtime: Runtime, caller: Caller, batch: ProviderBatch, *, columns: dict[str, Any],
           also: Callable[[psycopg.Connection[Any], UUID], None] | None = None, rerun: Rerun | None = None) -> UUID:
    """Submit BATCH through Relay's intake (the same validation, limits and storage as any batch); its id.
    With RELAY_PROVIDER_BATCH_EXPIRY_S set, the batch's queued requests expire that long after now. RERUN: the
    lineage of a re-run."""
    raw = batch.finish(max_item_bytes=runtime.settings.max_request_bytes)
    expiry = runtime.settings.provider_batch_expiry_s
    if expiry > 0:  # exactly EXPIRY after created_at, as both providers' expires_at reads
        now = datetime.now(UTC)
        columns = {**columns, "created_at": now, "expires_at": now + timedelta(seconds=expiry)}
    try:
        created = service.submit_batch(runtime, caller, raw, BatchOrigin(columns, batch.custom_ids, also, rerun))
    except InvalidBatch as exc:
        raise batch.remap(exc) from None
    return UUID(str(created["id"]))


def load(runtime: Runtime, caller: Caller, text_id: str, api: str) -> tuple[Row, dict[str, int]]:
    """CALLER's batch created through API with its counts; BatchNotFound otherwise (malformed ids included)."""
    with runtime.pool.connection() as conn:
        row = reads.batch_of_api(conn, caller, text_id, api)
        return row, reads.counts_of(conn, [row])[row["id"]]


def counted(runtime: Runtime, row: Row) -> dict[str, int]:
    """The counts of a batch row already read (service.find_batch), finished_at recorded as load does."""
    with runtime.pool.connection() as conn:
        return reads.counts_of(conn, [row])[row["id"]]


def page(runtime: Runtime, caller: Caller, api: str, *, after: str | None, before: str | None,
         limit: int) -> Page:
    """A page of CALLER's batches created through API, newest first (after / before: a batch id of the list)."""
    cursors = [parse_batch_id(text) if text else None for text in (after, before)]
    if any(text and cursor is None for text, cursor in zip((after, before), cursors, strict=True)):
        return Page([], {}, False)  # an id that is no batch is past every batch
    with runtime.pool.connection() as conn:
        rows = reads.list_batches_of_api(conn, caller.owner, api, after=cursors[0], before=cursors[1],
                                         limit=limit + 1)
        more = len(rows) > limit
        rows = (rows[1:] if before else rows[:-1]) if more else rows
        counts = reads.counts_of(conn, rows)
    return Page(rows, counts, more)


def cancel(runtime: Runtime, caller: Caller, text_id: str, api: str,
           ended: Callable[[Row, dict[str, int]], str]) -> tuple[Row, dict[str, int]]:
    """Cancel the batch; the batch after. Once its processing has ended (cancelled or not) nothing is changed and
    the answer is 409 batch_finished with ENDED(row, counts)'s message, as both providers answer."""
    row, counts = load(runtime, caller, text_id, api)
    if row["finished_at"] is not None:
        raise BatchAlreadyFinished(message=ended(row, counts))
    service.cancel_batch(runtime, caller, str(row["id"]))
    return load(runtime, caller, text_id, api)


def outcomes(runtime: Runtime, caller: Caller, batch_id: UUID) -> Iterator[ResultItem]:
    """Every item's outcome with its stored response bytes, in idx order (results.result_items: whatever the
    payload store's layout); access is checked before the first item, so a caller who may not read the batch gets
    BatchNotFound right away; a delete that cuts them short raises results.ResultsCut (see results.cut_visibly)."""
    return results.result_items(runtime, caller, batch_id)


def joined(lines: Iterator[bytes], size: int = STREAM_CHUNK) -> Iterator[bytes]:
    """LINES joined into chunks of about SIZE bytes: a response streams a few large writes, not one per line."""
    held: list[bytes] = []
    length = 0
    for line in lines:
        held.append(line)
        length += len(line)
        if length >= size:
            yield b"".join(held)
            held, length = [], 0
    if held:
        yield b"".join(held)
