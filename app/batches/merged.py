"""Merged results of a re-run chain: one entry per item of the chain's original batch, in its idx order, each the
latest attempt of that item (the newest batch of the chain that holds it: the original, or a re-run of it or of
one of its re-runs), whatever that attempt's state. No Flask.

Every batch of the chain is read in idx order of the original (a re-run's items by `source_idx`, which follows its
own idx order), RESULTS_CHUNK items at a time, and merged: memory stays at about one chunk per batch of the chain.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from uuid import UUID

from app.auth_model import Caller
from app.batches import rerun_store, results, service, store
from app.batches.rerun_store import AttemptRow
from app.runtime import Runtime


def open_merged_results(runtime: Runtime, caller: Caller | None, batch_id: str, *, jsonl: bool) -> Iterator[bytes]:
    """Check access now (404 before streaming starts), then stream the merged results of the chain BATCH_ID
    belongs to (the same for the original and for each of its re-runs). A caller of None is the operator."""
    with runtime.pool.connection() as conn:
        row = service.owned_batch(conn, caller, batch_id)
        original = row["original_id"] or row["id"]
        members = rerun_store.chain(conn, original, row["owner"])
        original_row = row if row["id"] == original else store.get_batch(conn, original)
    total = original_row["total"] if original_row is not None else None
    return results.cut_marked(_stream(runtime, original, members, total, jsonl=jsonl), jsonl=jsonl)


def _stream(runtime: Runtime, original: UUID, members: list[UUID], total: int | None, *,
            jsonl: bool) -> Iterator[bytes]:
    """`{"results": [...]}` or JSON Lines, chunk by chunk, as results.open_results streams one batch; ResultsCut
    when fewer than the original's TOTAL items were found (a delete cut the stream)."""
    sep = b"\n" if jsonl else b","
    yield b"" if jsonl else b'{"results":['
    after, first, sent = -1, True, 0
    while True:
        with runtime.pool.connection() as conn:
            found = [(member, rerun_store.attempt_rows(conn, member, rerun=member != original, after=after,
                                                       limit=results.RESULTS_CHUNK)) for member in members]
        if not any(rows for _, rows in found):
            if total is not None and sent < total:
                raise results.ResultsCut(sent, total)
            break
        full = [rows[-1][0] for _, rows in found if len(rows) == results.RESULTS_CHUNK]
        upto = min(full) if full else max(rows[-1][0] for _, rows in found if rows)  # every attempt up to it is read
        entries = _entries(runtime, found, upto)
        chunk = sep.join(entries)
        yield chunk + b"\n" if jsonl else (chunk if first else b"," + chunk)
        first, after, sent = False, upto, sent + len(entries)
    if not jsonl:
        yield b"]}"


def _entries(runtime: Runtime, found: list[tuple[UUID, list[AttemptRow]]], upto: int) -> list[bytes]:
    """The merged entries of every original idx up to UPTO: the latest attempt's result, where it is (`batch_id`,
    `batch_idx`) and how many batches of the chain hold the item (`attempts`)."""
    latest: dict[int, tuple[UUID, AttemptRow]] = {}
    attempts: Counter[int] = Counter()
    for member, rows in found:  # oldest batch first: a newer attempt replaces an older one
        for row in rows:
            if row[0] > upto:
                break
            latest[row[0]] = (member, row)
            attempts[row[0]] += 1
    keys = sorted(latest)
    responses: dict[int, bytes | memoryview | None] = {}
    payloads = service.payload_store(runtime)
    for member, _ in found:
        completed = [k for k in keys if latest[k][0] == member and latest[k][1][5] == "completed"]
        if completed:
            read = payloads.read_responses(member, [latest[k][1][1:5] for k in completed])  # type: ignore[misc]
            responses.update(zip(completed, read, strict=True))
    entries = []
    for key in keys:
        member, (_, idx, _segment, _offset, _length, state, error) = latest[key]
        tail = b',"batch_id":"%s","batch_idx":%d,"attempts":%d' % (str(member).encode(), idx, attempts[key])
        entries.append(results.result_entry(key, state, responses.get(key), error, tail))
    return entries
