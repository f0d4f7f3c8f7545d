"""A batch's results, read back in idx order: Relay's own JSON and JSON Lines streams, and the row-level iterator
(`result_items`) the compatible APIs write their formats from. A stream a delete cuts short ends visibly cut."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple, TypeVar
from uuid import UUID

from app.auth_model import Caller
from app.batches import store
from app.batches.errors import BatchNotFound
from app.batches.service import owned_batch
from app.payload_backends import payload_store
from app.runtime import Runtime
from schemas.batches import ITEM_STATES

RESULTS_CHUNK = 2000  # items of a stream's first page (and of each page of merged results)
RESULTS_PAGE_MAX = 16000  # items of a page at most: pages double from RESULTS_CHUNK up to this


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
    """`{"results": [...]}` or JSON Lines, a page at a time; completed items splice their stored response raw.
    ResultsCut when the items run out before TOTAL, or a page's responses are gone with the batch."""
    yield b"" if jsonl else b'{"results":['
    first = True
    for rows, responses in _result_pages(runtime, batch_id, total, store.result_rows):
        yield _page_chunk(rows, responses, jsonl=jsonl, first=first)
        first = False
    if not jsonl:
        yield b"]}"


_Rows = TypeVar("_Rows", bound=Sequence[tuple[Any, ...]])


def _result_pages(runtime: Runtime, batch_id: UUID, total: int, fetch: Callable[..., _Rows],
                  ) -> Iterator[tuple[_Rows, list[bytes | memoryview | None]]]:
    """Pages of FETCH's rows (idx, segment, offset, length, state, ...) in idx order, each with the stored responses
    of its completed items (in their order). The next page is read (rows and responses) while this one is sent,
    and pages grow from RESULTS_CHUNK items to RESULTS_PAGE_MAX. ResultsCut when the rows run out before TOTAL, a
    page's responses are gone with the batch, or the batch is gone when a page read ahead is to be sent (a delete
    cuts the stream at the next page, as it would without the read-ahead)."""
    payloads = payload_store(runtime)

    def read_page(after: int, limit: int) -> tuple[_Rows, list[bytes | memoryview | None]]:
        with runtime.pool.connection() as conn:
            rows = fetch(conn, batch_id, after=after, limit=limit)
        responses = payloads.read_responses(batch_id, [row[:4] for row in rows if row[4] == "completed"])
        if rows and (all(responses) or _batch_exists(runtime, batch_id)):
            return rows, responses
        raise ResultsCut()

    sent, limit = 0, RESULTS_CHUNK
    ahead = ThreadPoolExecutor(1, "relay-results")
    try:
        pending: Future[tuple[_Rows, list[bytes | memoryview | None]]] | None = \
            ahead.submit(read_page, -1, limit) if total else None
        while pending is not None:
            try:
                rows, responses = pending.result()
            except ResultsCut:
                raise ResultsCut(sent, total) from None
            if sent and not _batch_exists(runtime, batch_id):
                raise ResultsCut(sent, total)
            sent, limit = sent + len(rows), min(2 * limit, RESULTS_PAGE_MAX)
            pending = ahead.submit(read_page, rows[-1][0], limit) if sent < total else None
            yield rows, responses
    finally:
        ahead.shutdown(wait=False, cancel_futures=True)  # a stream closed early leaves at most one page being read


def _batch_exists(runtime: Runtime, batch_id: UUID) -> bool:
    with runtime.pool.connection() as conn:
        return bool(store.existing_batches(conn, [batch_id]))


_STATE_PREFIX = {state: b'"state":"%s"' % state.encode() for state in ITEM_STATES}


def _page_chunk(rows: list[store.ResultRow], responses: list[bytes | memoryview | None], *, jsonl: bool,
                first: bool) -> bytes:
    """One page's entries as one chunk of the stream (JSON Lines, or the members of the JSON array after FIRST's):
    a completed item's entry is its precomputed head, its stored response and a closing brace, with no JSON
    decoded or encoded; other items go through result_entry."""
    lead, trail = (b"", b"\n") if jsonl else (b",", b"")
    head, close = lead + _COMPLETED_HEAD, b"}" + trail
    parts: list[bytes | memoryview] = []
    add = parts.append
    found = iter(responses)
    for idx, _segment, _offset, _length, state, error, custom_id in rows:
        body = next(found) if state == "completed" else None
        if body and error is None and custom_id is None:
            add(head % idx)
            add(body)
            add(close)
        else:  # custom_id: provider batches
            add(lead + result_entry(idx, state, body, error, b"" if custom_id is None else
                                    b',"custom_id":' + json.dumps(custom_id).encode()) + trail)
    if first and not jsonl and parts:
        parts[0] = bytes(parts[0])[len(lead):]
    return b"".join(parts)


_COMPLETED_HEAD = b'{"idx":%d,"state":"completed","response":'


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
