"""One batch, three spellings of its id (Relay's UUID, OpenAI's `batch_<hex>`, Anthropic's `msgbatch_<hex>`): every
route that takes a batch id takes each of them, the operator's routes and the usage filter included."""

from __future__ import annotations

import json
from uuid import UUID

import pytest

from tests.batches.helpers import CHAT, submit, wait_finished

pytestmark = pytest.mark.integration


def _spellings(batch_id: str) -> list[str]:
    hexed = UUID(batch_id).hex
    return [batch_id, f"batch_{hexed}", f"msgbatch_{hexed}"]


def test_the_operator_routes_take_every_spelling_of_a_batch_id(client, admin, key) -> None:  # type: ignore[no-untyped-def]
    batch_id = str(submit(client, key, [CHAT, CHAT]).json["id"])
    for spelled in _spellings(batch_id):
        read = admin("GET", f"/admin/batches/{spelled}", query_string={"limit": 1})
        assert read.status_code == 200 and read.json["id"] == batch_id, (spelled, read.get_data(as_text=True))
        results = admin("GET", f"/admin/batches/{spelled}/results")
        assert results.status_code == 200, spelled
        assert [r["idx"] for r in json.loads(results.get_data())["results"]] == [0, 1]
    cancelled = admin("POST", f"/admin/batches/batch_{UUID(batch_id).hex}/cancel")
    assert cancelled.status_code == 200 and cancelled.json["status"] == "cancelled"
    for bad in (f"batch_{'0' * 31}", "msgbatch_nothex" + "0" * 24, "no-such-batch"):
        assert admin("GET", f"/admin/batches/{bad}").json["error"]["code"] == "batch_not_found"


def test_the_usage_batch_filter_takes_every_spelling_of_a_batch_id(client, admin, key, workers) -> None:  # type: ignore[no-untyped-def]
    batch_id = str(submit(client, key, [CHAT] * 3).json["id"])
    wait_finished(client, key, batch_id)
    for spelled in _spellings(batch_id):
        for reader in (lambda q: admin("GET", "/v1/usage/summary", query_string=q),
                       lambda q: client.get("/v1/usage/events", query_string=q,
                                            headers={"Authorization": f"Bearer {key}"})):
            res = reader({"batch_id": spelled})
            assert res.status_code == 200, (spelled, res.get_data(as_text=True))
            body = res.json
            count = body["totals"]["requests"] if "totals" in body else len(body["events"])
            assert count == 3, (spelled, body)
    refused = admin("GET", "/v1/usage/summary", query_string={"batch_id": "batch_xyz"})
    assert refused.status_code == 400 and "Not a batch id" in json.dumps(refused.json["error"]["details"])
