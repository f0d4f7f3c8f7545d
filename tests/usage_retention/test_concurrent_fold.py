"""Events written into an hour while it is being folded (`relay usage purge`, app/usage/retention.py) are neither
lost nor counted twice: each fold deletes exactly the events it sums, in one statement. A fold made of two statements
(sum, then delete) would delete the events committed between them unsummed, and fail this test."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from app.usage.retention import purge_usage

pytestmark = pytest.mark.integration

HOUR = datetime(2016, 1, 1, tzinfo=UTC)  # before every other window of this folder
FOLDS = 40  # at least this many folds ...
WRITES = 200  # ... and until the writer has written this many events beside them (60 s at most: only a hang fails)


def test_events_written_while_their_hour_is_folded_are_neither_lost_nor_counted_twice(runtime) -> None:
    written = {"events": 0, "tokens": 0}
    stop = threading.Event()
    credential = uuid.uuid4()

    def write() -> None:
        with runtime.pool.connection() as conn:
            conn.autocommit = True
            i = 0
            while not stop.is_set():
                i += 1
                at = HOUR + timedelta(microseconds=i)
                conn.execute("INSERT INTO usage_events (request_id, source, created_at, started_at, status,"
                             " credential_kind, credential_id, relay_key_hash, model_requested, input_tokens)"
                             " VALUES (%s, 'live', %s, %s, 200, 'relay_key', %s, %s, 'm-fold', %s)",
                             (f"fold-{i}", at, at, credential, b"\x01" * 32, i))
                written["events"] += 1
                written["tokens"] += i
            conn.autocommit = False

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    folded = folds = 0
    deadline = time.monotonic() + 60
    try:
        while (folds < FOLDS or written["events"] < WRITES) and time.monotonic() < deadline:
            folded += purge_usage(runtime.pool, HOUR + timedelta(hours=1), vacuum=False).events
            folds += 1
    finally:
        stop.set()
        writer.join(60)
    folded += purge_usage(runtime.pool, HOUR + timedelta(hours=1), vacuum=False).events
    assert written["events"] >= WRITES  # the writer ran while the folds did
    with runtime.pool.connection() as conn:
        left = conn.execute("SELECT count(*) AS n FROM usage_events WHERE created_at >= %s AND created_at < %s",
                            (HOUR, HOUR + timedelta(hours=1))).fetchone()
        summed = conn.execute("SELECT coalesce(sum(requests), 0) AS n, coalesce(sum(input_tokens), 0) AS tokens"
                              " FROM usage_rollups WHERE hour = %s AND credential_id = %s",
                              (HOUR, credential)).fetchone()
    assert left["n"] == 0
    assert (folded, int(summed["n"]), int(summed["tokens"])) == (written["events"], written["events"],
                                                                 written["tokens"])
