"""Readers that open a streamed answer and stop reading: a real `relay api` with a pool of 4 connections and more
stalled usage exports than that. None of them holds a database connection (or an open transaction) while it
stalls, and the API keeps answering every other route."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import requests

from devtools.processes import RelayProcess
from devtools.stack import Stack

pytestmark = pytest.mark.integration

POOL = 4
STALLED = POOL + 2
EVENTS = 20_000  # ~18 MB of JSON Lines: far more than the socket buffers between a stalled reader and the API
START = datetime(2018, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def api(fuzz_stack: Stack) -> Iterator[RelayProcess]:
    credential = uuid.uuid4()
    with fuzz_stack.runtime.pool.connection() as conn, conn.cursor() as cur, cur.copy(
            "COPY usage_events (request_id, source, created_at, started_at, status, credential_kind, credential_id,"
            " model_requested, input_tokens, cost_nanos) FROM STDIN") as copy:
        for i in range(EVENTS):
            at = START + timedelta(seconds=i)
            copy.write_row((f"stall-{i}", "live", at, at, 200, "relay_key", credential, "m-stall", i, i))
    process = fuzz_stack.start_api(db_pool_max=POOL, db_pool_min=1)
    yield process
    process.stop()
    fuzz_stack.processes.remove(process)


def _open_stalled_export(url: str, token: str) -> socket.socket:
    """Ask for the whole export, read the first bytes of the answer, then never read again."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    query = f"format=jsonl&from={START.date()}T00:00:00Z&to={(START + timedelta(days=2)).date()}T00:00:00Z"
    sock.sendall(f"GET /v1/usage/events/export?{query} HTTP/1.1\r\nHost: {host}\r\n"
                 f"Authorization: Bearer {token}\r\n\r\n".encode())
    first = sock.recv(1024)
    assert first.startswith(b"HTTP/1.1 200"), first[:200]
    return sock


def _held_connections(stack: Stack) -> list[str]:
    """States of the API's Postgres sessions that hold a transaction or run a query (this test's own excluded)."""
    with stack.runtime.pool.connection() as conn:
        rows = conn.execute("SELECT state, left(query, 60) AS query FROM pg_stat_activity WHERE datname ="
                            " current_database() AND pid <> pg_backend_pid() AND query ILIKE '%%usage_events%%'"
                            " AND (state LIKE 'idle in transaction%%' OR state = 'active')").fetchall()
    return [f"{r['state']}: {r['query']}" for r in rows]


def test_stalled_export_readers_hold_no_database_connection_and_other_routes_still_answer(
        api: RelayProcess, fuzz_stack: Stack) -> None:
    key = fuzz_stack.new_key("kill")  # a key of its own: the schemathesis run may have replaced the catalog
    admin = fuzz_stack.settings.admin_token
    stalled = [_open_stalled_export(api.url, admin) for _ in range(STALLED)]
    try:
        deadline = time.monotonic() + 60
        while (held := _held_connections(fuzz_stack)) and time.monotonic() < deadline:
            time.sleep(0.2)  # each export runs until its socket is full, then waits with no connection
        assert not held, held
        headers = {"Authorization": f"Bearer {admin}"}
        for path in ("/v1/usage/events?limit=5", "/v1/usage/summary", "/admin/relay-keys", "/readyz"):
            res = requests.get(api.url + path, headers=headers, timeout=60)
            assert res.status_code == 200, (path, res.status_code, res.text[:300])
        res = requests.get(api.url + "/v1/batches", headers={"Authorization": f"Bearer {key}"}, timeout=60)
        assert res.status_code == 200, res.text[:300]
    finally:
        for sock in stalled:
            sock.close()


def test_a_reader_that_reads_slowly_still_gets_every_event_once(api: RelayProcess, fuzz_stack: Stack) -> None:
    params = {"format": "jsonl", "from": START.isoformat(), "to": (START + timedelta(days=2)).isoformat()}
    with requests.get(api.url + "/v1/usage/events/export", params=params, stream=True, timeout=60,
                      headers={"Authorization": f"Bearer {fuzz_stack.settings.admin_token}"}) as res:
        ids = [line.split(b'"request_id":"', 1)[1].split(b'"', 1)[0] for line in res.iter_lines() if line]
    assert len(ids) == EVENTS == len(set(ids))
    assert ids[0] == f"stall-{EVENTS - 1}".encode() and ids[-1] == b"stall-0"
