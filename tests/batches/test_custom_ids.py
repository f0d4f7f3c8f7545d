"""custom_id wherever a batch has them: a batch created through the OpenAI or Anthropic API shows each item's
custom_id in Relay's own view (items, a search by custom_id, the results), and one item is read whole (request and
response) by its idx, on the caller's and the operator's routes."""

from __future__ import annotations

import json

import pytest

from tests.batches.helpers import CHAT, get, submit, wait_finished
from tests.batches.provider_helpers import batch_uuid, message

pytestmark = pytest.mark.integration


def _anthropic_batch(client, key: str, custom_ids: list[str]) -> str:  # type: ignore[no-untyped-def]
    res = client.post("/v1/messages/batches", headers={"x-api-key": key},
                      json={"requests": [{"custom_id": c, "params": message(f"hi {c}")} for c in custom_ids]})
    assert res.status_code == 200, res.get_data(as_text=True)
    return str(batch_uuid(res.json["id"]))


def test_relays_view_of_a_provider_batch_shows_and_searches_its_custom_ids(client, key, workers) -> None:  # type: ignore[no-untyped-def]
    batch_id = _anthropic_batch(client, key, ["order-1", "order-2", "refund-1"])
    done = wait_finished(client, key, batch_id)
    assert [(i["idx"], i["custom_id"]) for i in done["items"]] == [(0, "order-1"), (1, "order-2"), (2, "refund-1")]
    found = get(client, key, f"/v1/batches/{batch_id}", custom_id="order-").json
    assert [i["custom_id"] for i in found["items"]] == ["order-1", "order-2"] and found["items_next_after"] is None
    assert get(client, key, f"/v1/batches/{batch_id}", custom_id="nothing").json["items"] == []
    results = json.loads(get(client, key, f"/v1/batches/{batch_id}/results").get_data())["results"]
    assert [(r["idx"], r["custom_id"]) for r in results] == [(0, "order-1"), (1, "order-2"), (2, "refund-1")]
    lines = get(client, key, f"/v1/batches/{batch_id}/results", format="jsonl").get_data().splitlines()
    assert [json.loads(line)["custom_id"] for line in lines] == ["order-1", "order-2", "refund-1"]


def test_relays_own_batches_have_no_custom_id(client, key, workers) -> None:  # type: ignore[no-untyped-def]
    batch_id = submit(client, key, [CHAT]).json["id"]
    done = wait_finished(client, key, batch_id)
    assert done["items"][0]["custom_id"] is None
    (result,) = json.loads(get(client, key, f"/v1/batches/{batch_id}/results").get_data())["results"]
    assert "custom_id" not in result


def test_one_item_is_read_whole_by_its_idx(client, admin, key, make_key, workers) -> None:  # type: ignore[no-untyped-def]
    batch_id = _anthropic_batch(client, key, ["only-one"])
    wait_finished(client, key, batch_id)
    item = get(client, key, f"/v1/batches/{batch_id}/items/0").json
    assert (item["idx"], item["custom_id"], item["state"], item["batch_id"]) == (0, "only-one", "completed", batch_id)
    assert item["request"] == message("hi only-one") and item["response"]["type"] == "message"
    assert admin("GET", f"/admin/batches/{batch_id}/items/0").json == item
    for missing_idx in ("1", "-1", "x", "9" * 30):
        missing = get(client, key, f"/v1/batches/{batch_id}/items/{missing_idx}")
        assert missing.status_code == 404 and missing.json["error"]["code"] == "item_not_found", missing_idx
    stranger = get(client, make_key()["key"], f"/v1/batches/{batch_id}/items/0")
    assert stranger.status_code == 404 and stranger.json["error"]["code"] == "batch_not_found"
