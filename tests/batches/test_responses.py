"""Responses in the payload store, run by the worker code in this process: each completed item's ref is committed
with its final state and served back; a response that cannot be made durable is never committed as stored."""

from __future__ import annotations

import errno
import os
from typing import Any
from uuid import UUID

from app import payload_files
from app.batches.store import SEGMENT
from app.payload_port import SEGMENT_NAME
from app.payloads import FolderStore
from tests.batches.helpers import CHAT, results, run_in_process, submit, usage_events


def _refs(runtime: Any, batch_id: str) -> list[tuple[str, str | None, int | None, int | None]]:
    with runtime.pool.connection() as conn:
        rows = conn.execute(f"SELECT state, {SEGMENT}, response_offset, response_length FROM batch_items"
                            " WHERE batch_id = %s ORDER BY idx", (batch_id,)).fetchall()
    return [(r["state"], r["response_segment"], r["response_offset"], r["response_length"]) for r in rows]


def test_each_completed_item_commits_where_its_response_is_and_results_serve_it(client, key, runtime,
                                                                               tmp_path) -> None:
    batch_id = str(submit(client, key, [CHAT] * 4).json["id"])
    assert run_in_process(runtime, batch_id, 4) == ["completed"] * 4

    refs = _refs(runtime, batch_id)
    assert {segment for _, segment, _, _ in refs} == {refs[0][1]}  # one segment: one process ran them
    assert [offset for _, _, offset, _ in refs] == sorted({offset for _, _, offset, _ in refs})
    served = results(client, key, batch_id)
    assert [r["response"]["object"] for r in served] == ["chat.completion"] * 4
    segment = FolderStore(runtime.settings.batch_payload_dir).batch_dir(UUID(batch_id)) / str(refs[0][1])
    assert segment.stat().st_size == sum(length or 0 for _, _, _, length in refs)


def test_a_response_that_cannot_be_synced_discards_the_item_and_commits_no_ref(client, key, runtime, tmp_path,
                                                                              monkeypatch) -> None:
    batch_id = str(submit(client, key, [CHAT, CHAT]).json["id"])
    payloads = FolderStore(runtime.settings.batch_payload_dir)  # this worker's own store: its failure stays here
    real = os.fdatasync

    def deferred_enospc(fd: int) -> None:  # as a network file system reports a full disk: at sync time
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fdatasync", deferred_enospc)
    first = run_in_process(runtime, batch_id, 1, payloads)
    monkeypatch.setattr(os, "fdatasync", real)
    rest = run_in_process(runtime, batch_id, 2, payloads)[1:]  # the sync works again, but the hold is not over

    assert first + rest == ["discarded", "discarded"]
    assert _refs(runtime, batch_id) == [("discarded", None, None, None)] * 2
    with runtime.pool.connection() as conn:
        codes = conn.execute("SELECT error_code FROM batch_items WHERE batch_id = %s", (batch_id,)).fetchall()
    assert [r["error_code"] for r in codes] == ["payload_store_unavailable"] * 2
    assert [e["batch_idx"] for e in usage_events(runtime, batch_id)] == [0, 1]  # the upstream calls, as billed
    served = results(client, key, batch_id)
    assert all("response" not in r and r["error"].startswith("cannot store the response") for r in served)
    monkeypatch.setattr(payload_files, "SYNC_FAILURE_HOLD_S", 0.0)
    payloads.close()


def test_an_items_row_keeps_a_code_of_its_segment_and_rows_with_a_whole_name_still_serve(client, key,
                                                                                        runtime) -> None:
    batch_id = str(submit(client, key, [CHAT] * 2).json["id"])
    assert run_in_process(runtime, batch_id, 2) == ["completed"] * 2
    name = _refs(runtime, batch_id)[0][1]
    assert name is not None and SEGMENT_NAME.fullmatch(name)
    with runtime.pool.connection() as conn:
        stored = conn.execute("SELECT response_segment FROM batch_items WHERE batch_id = %s ORDER BY idx",
                              (batch_id,)).fetchall()
        assert [r["response_segment"] for r in stored] == [name.removeprefix("responses-").removesuffix(".seg")] * 2
        conn.execute("UPDATE batch_items SET response_segment = %s WHERE batch_id = %s AND idx = 1",
                     (name, batch_id))  # as an earlier version wrote it
    assert [r["response"]["object"] for r in results(client, key, batch_id)] == ["chat.completion"] * 2
    assert {segment for _, segment, _, _ in _refs(runtime, batch_id)} == {name}
