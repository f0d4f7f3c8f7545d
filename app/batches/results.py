"""A batch's results, read back in idx order: Relay's own JSON and JSON Lines streams, and the row-level iterator
(`result_items`) the compatible APIs write their formats from. A stream a delete cuts short ends visibly cut."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, TypeVar
from uuid import UUID

from app.auth_model import Caller
from app.batches import store
from app.batches.errors import BatchNotFound
from app.batches.service import owned_batch
from app.payload_backends import payload_store
from app.runtime import Runtime
from schemas.batches import ITEM_STATES

RESULTS_CHUNK = 2000


class ResultsCut(BatchNotFound):
    """The batch was deleted while its results were read: what was sent is not all of them (a 404 when nothing
    was sent yet; a stream already under way ends visibly cut, see cut_visibly)."""

    code = "results_incomplete"

    def __init__(self, sent: int | None = None, total: int | None = None) -> None:
        counted = f": {sent} of {total} results were sent" if sent is not None else ""
        super().__init__(message=f"the batch was deleted while its results were read{counted}")


def cut_visibly(chunks: Iterator[bytes], cut_line: Callable[[ResultsCut], bytes]) -> Iterator[bytes]:
    """CHUNKS, ended by CUT_LINE's bytes when a delete cuts them short: a reader must get every result or see that
    it did not, never a shorter document that parses as whole."""
    try:
        yield from chunks
    except ResultsCut as cut:
        yield cut_line(cut)


def open_results(runtime: Runtime, caller: Caller | None, batch_id: str, *, jsonl: bool) -> Iterator[bytes]:
    """Check access now (404 before streaming starts), then stream the results in idx order. A caller of None is
    the operator (admin routes only). A stream a delete cuts short ends without the JSON's closing bracket, or
    with an error line in JSON Lines."""
    return cut_marked(open_result_chunks(runtime, caller, batch_id, jsonl=jsonl), jsonl=jsonl)


def cut_marked(chunks: Iterator[bytes], *, jsonl: bool) -> Iterator[bytes]:
    """CHUNKS of Relay's own results formats, ended visibly where a delete cut them (see cut_visibly)."""
    return cut_visibly(chunks, _jsonl_cut_line if jsonl else lambda _cut: b"")


def open_result_chunks(runtime: Runtime, caller: Caller | None, batch_id: str, *,
                       jsonl: bool) -> Iterator[bytes]:
    """open_results without the cut marking: ResultsCut is raised where a delete cut the stream short."""
    with runtime.pool.connection() as conn:
        row = owned_batch(conn, caller, batch_id)
    return _stream_results(runtime, row["id"], row["total"], jsonl=jsonl)


class ResultItem(NamedTuple):
    """One item's outcome as stored: RESPONSE is a completed item's stored response bytes (None where this replica
    cannot see them), STATUS the status of the usage event of an item that did not complete."""

    idx: int
    state: str
    response: bytes | memoryview | None
    error: str | None
    error_code: str | None
    custom_id: str | None
    status: int | None


def result_items(runtime: Runtime, caller: Caller | None, batch_id: UUID) -> Iterator[ResultItem]:
    """Every item's ResultItem in idx order, for views that write results in another format (the provider APIs):
    access is checked now (BatchNotFound before the first item); ResultsCut where a delete cuts them short."""
    with runtime.pool.connection() as conn:
        row = owned_batch(conn, caller, str(batch_id))
    return _result_items(runtime, row["id"], row["total"])


def _result_items(runtime: Runtime, batch_id: UUID, total: int) -> Iterator[ResultItem]:
    for rows, responses in _result_pages(runtime, batch_id, total, store.outcome_rows):
        found = iter(responses)
        for idx, _segment, _offset, _length, state, error, custom_id, code, status in rows:
            yield ResultItem(idx, state, next(found) if state == "completed" else None, error, code, custom_id,
                             status)


def _jsonl_cut_line(cut: ResultsCut) -> bytes:
    return json.dumps(cut.to_dict(), separators=(",", ":")).encode() + b"\n"


def _stream_results(runtime: Runtime, batch_id: UUID, total: int, *, jsonl: bool) -> Iterator[bytes]:
    """`{"results": [...]}` or JSON Lines, chunk by chunk; completed items splice their stored response raw.
    ResultsCut when the items run out before TOTAL, or a chunk's responses are gone with the batch."""
    sep = b"\n" if jsonl else b","
    yield b"" if jsonl else b'{"results":['
    sent = 0
    for rows, responses in _result_pages(runtime, batch_id, total, store.result_rows):
        chunk = sep.join(_result_entries(rows, responses))
        yield chunk + b"\n" if jsonl else (chunk if not sent else b"," + chunk)
        sent += len(rows)
    if not jsonl:
        yield b"]}"


_Rows = TypeVar("_Rows", bound=Sequence[tuple[Any, ...]])


def _result_pages(runtime: Runtime, batch_id: UUID, total: int, fetch: Callable[..., _Rows],
                  ) -> Iterator[tuple[_Rows, list[bytes | memoryview | None]]]:
    """Pages of FETCH's rows (idx, segment, offset, length, state, ...) in idx order, each with the stored responses
    of its completed items (in their order). ResultsCut when the rows run out before TOTAL, or a page's responses
    are gone with the batch."""
    payloads = payload_store(runtime)
    after, sent = -1, 0
    while sent < total:
        with runtime.pool.connection() as conn:
            rows = fetch(conn, batch_id, after=after, limit=RESULTS_CHUNK)
        responses = payloads.read_responses(batch_id, [row[:4] for row in rows if row[4] == "completed"])
        if not rows or (not all(responses) and not _batch_exists(runtime, batch_id)):
            raise ResultsCut(sent, total)
        yield rows, responses
        sent, after = sent + len(rows), rows[-1][0]


def _batch_exists(runtime: Runtime, batch_id: UUID) -> bool:
    with runtime.pool.connection() as conn:
        return bool(store.existing_batches(conn, [batch_id]))


_STATE_PREFIX = {state: b'"state":"%s"' % state.encode() for state in ITEM_STATES}


def _result_entries(rows: list[store.ResultRow], responses: list[bytes | memoryview | None]) -> list[bytes]:
    """One JSON object per row: idx, state, the RESPONSES of its completed items (None: not visible here), the
    error (and the custom_id of a provider batch's item)."""
    found = iter(responses)
    return [result_entry(idx, state, next(found) if state == "completed" else None, error,
                         b"" if custom_id is None else b',"custom_id":' + json.dumps(custom_id).encode())
            for idx, _segment, _offset, _length, state, error, custom_id in rows]  # custom_id: provider batches


def result_entry(idx: int, state: str, body: bytes | memoryview | None, error: str | None,
                 tail: bytes = b"") -> bytes:
    """One result's JSON object: idx, state, the response BODY if there is one, the error, then TAIL (more members,
    each starting with a comma)."""
    parts: list[bytes | memoryview] = [b'{"idx":%d,' % idx, _STATE_PREFIX[state]]
    if body:
        parts += (b',"response":', body)
    if error is not None:
        parts += (b',"error":', json.dumps(error).encode())
    parts += (tail, b"}")
    return b"".join(parts)
