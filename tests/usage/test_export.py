"""GET /v1/usage/events/export: CSV and JSON Lines with the same filters, streamed with flat memory."""

from __future__ import annotations

import csv
import io
import json
import tracemalloc
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.usage.queries import EVENT_FIELDS
from tests.usage.conftest import WINDOW, World, labels

pytestmark = pytest.mark.integration


def export(client: Any, world: World, fmt: str, who: str = "admin", **params: Any) -> Any:
    res = client.get("/v1/usage/events/export", headers=world.headers(who),
                     query_string={**WINDOW, "format": fmt, **params})
    assert res.status_code == 200, res.get_data(as_text=True)
    return res


def test_jsonl_holds_the_same_events_as_the_api(client, world) -> None:
    res = export(client, world, "jsonl")
    assert res.is_streamed and res.mimetype == "application/x-ndjson"
    assert 'filename="usage-events.jsonl"' in res.headers["Content-Disposition"]
    lines = [json.loads(line) for line in res.get_data(as_text=True).splitlines()]
    page = client.get("/v1/usage/events", headers=world.headers("admin"), query_string=WINDOW).json["events"]
    assert lines == page
    assert labels(world, lines) == ["E10", "E9", "E8", "E7", "E6", "E5", "E4", "E3", "E2", "E1"]


def test_csv_has_a_header_and_one_row_per_event(client, world) -> None:
    res = export(client, world, "csv", source="batch")
    assert res.mimetype == "text/csv"
    rows = list(csv.DictReader(io.StringIO(res.get_data(as_text=True))))
    assert tuple(rows[0].keys()) == EVENT_FIELDS
    assert [int(r["id"]) for r in rows] == [world.ids["E8"], world.ids["E4"], world.ids["E3"]]
    e4 = rows[1]
    assert (e4["status"], e4["error_code"], e4["cost_nanos"], e4["cost_usd"]) == ("502", "upstream_error", "", "")
    assert rows[2]["cost_usd"] == "0.005400000" and rows[2]["streamed"] == "false"
    assert sum(int(r["cost_nanos"] or 0) for r in rows) == 5_437_500
    ka_hash = world.callers["KA"].relay_key_hash
    assert ka_hash is not None and ka_hash.hex() not in res.get_data(as_text=True)


def test_an_empty_export_is_just_the_header(client, world) -> None:
    res = export(client, world, "csv", project="no-such-project")
    assert res.get_data(as_text=True) == ",".join(EVENT_FIELDS) + "\n"
    assert export(client, world, "jsonl", project="no-such-project").get_data() == b""


def test_a_large_export_streams_with_flat_memory(client, runtime, world) -> None:
    count, start = 30_000, datetime(2019, 6, 1, tzinfo=UTC)
    credential = uuid.uuid4()  # nobody's: only the admin sees these rows
    with runtime.pool.connection() as conn, conn.cursor() as cur, cur.copy(
            "COPY usage_events (request_id, source, created_at, started_at, status, credential_kind, credential_id,"
            " relay_key_hash, model_requested, input_tokens, cost_nanos) FROM STDIN") as copy:
        for i in range(count):
            at = start + timedelta(seconds=i)
            copy.write_row((f"bulk-{i}", "live", at, at, 200, "relay_key", credential, b"\x00" * 32,
                            "m-bulk", i, i * 7))
    small = streamed_export(client, world, start, start + timedelta(seconds=count // 6))
    large = streamed_export(client, world, start, start + timedelta(seconds=count))
    assert (small[0], large[0]) == (count // 6 + 1, count + 1)  # header + rows
    assert large[2] < small[2] * 1.5, (small, large)  # peak memory does not grow with the export
    assert large[2] < large[1] / 2, large
    params = {"from": "2019-06-01T00:00:00Z", "to": "2019-06-02T00:00:00Z"}
    total = client.get("/v1/usage/summary", headers=world.headers("admin"), query_string=params)
    assert total.json["totals"]["cost_nanos"] == 7 * count * (count - 1) // 2


def streamed_export(client: Any, world: World, start: datetime, end: datetime) -> tuple[int, int, int]:
    """(lines, bytes, peak traced memory) of a CSV export read chunk by chunk."""
    params = {"from": start.isoformat(), "to": end.isoformat(), "format": "csv"}
    tracemalloc.start()
    try:
        res = client.get("/v1/usage/events/export", headers=world.headers("admin"), query_string=params,
                         buffered=False)
        size = lines = 0
        for chunk in res.response:
            data = chunk if isinstance(chunk, bytes) else chunk.encode()
            size += len(data)
            lines += data.count(b"\n")
        res.close()
        return lines, size, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
