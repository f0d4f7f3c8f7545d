"""Relay's own batch object tells what a provider's console shows: which API created the batch, the names behind
its attribution ids, and once finished its tokens and cost (summed once from the items' usage events)."""

from __future__ import annotations

import pytest

from tests.batches.helpers import CHAT, get, submit, usage_events, wait_finished

pytestmark = pytest.mark.integration


def test_a_finished_batch_carries_its_usage_its_api_and_its_attributions_names(client, runtime, workers,  # type: ignore[no-untyped-def]
                                                                               make_key) -> None:
    key = make_key()
    created = submit(client, key["key"], [CHAT] * 3, metadata={"name": "nightly"})
    assert created.status_code == 202
    batch_id = created.json["id"]
    assert created.json["api"] == "relay" and created.json["usage"] is None  # not finished yet
    assert created.json["items_next_after"] is None  # no item is listed in the answer: no next page either
    done = wait_finished(client, key["key"], batch_id)
    events = usage_events(runtime, batch_id)
    usage = done["usage"]
    assert usage["input_tokens"] == sum(e["input_tokens"] for e in events) > 0
    assert usage["output_tokens"] == sum(e["output_tokens"] for e in events) > 0
    assert usage["cost_nanos"] == sum(e["cost_nanos"] for e in events) > 0 and usage["unpriced"] == 0
    assert usage["cost_usd"] == f"{usage['cost_nanos'] / 1e9:.9f}"
    assert (done["policy"], done["project"], done["team"], done["principal"]) == ("main", "p-batch", "t-batch",
                                                                                "batch-svc")
    assert done["credential"] == key["prefix"]  # an unnamed key: its prefix
    listed = get(client, key["key"], "/v1/batches", format="relay").json["data"]
    assert next(b for b in listed if b["id"] == batch_id)["usage"] == usage
    with runtime.pool.connection() as conn:  # kept: later reads do not sum the events again
        kept = conn.execute("SELECT * FROM batch_usage WHERE batch_id = %s", (batch_id,)).fetchone()
    assert kept is not None and kept["input_tokens"] == usage["input_tokens"]


def test_a_cancel_answer_lists_no_items_and_says_there_is_no_next_page(client, make_key, upstream) -> None:  # type: ignore[no-untyped-def]
    key = make_key("slow")["key"]
    upstream.control("sk-batch-slow", latency_ms=60_000)  # the cancel comes before its items could end (a loaded
    try:  # machine ran both to the end first: 409)
        batch_id = submit(client, key, [CHAT] * 2).json["id"]
        cancelled = client.post(f"/v1/batches/{batch_id}/cancel", headers={"Authorization": f"Bearer {key}"})
        assert cancelled.status_code == 200 and cancelled.json["items"] == [], cancelled.get_data(as_text=True)
        assert cancelled.json["items_next_after"] is None
    finally:
        upstream.forget("sk-batch-slow")


@pytest.mark.parametrize("member", [b'"custom_id": "q-1"', b'"custom\\u005fid": "q-1"', b'"custom_id": null'])
@pytest.mark.parametrize("shape_first", [True, False])  # the typed path, and the scanner (shape after requests)
def test_a_custom_id_inside_a_native_request_body_is_refused_naming_the_item(client, key, member: bytes,  # type: ignore[no-untyped-def]
                                                                           shape_first: bool) -> None:
    good = b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}'
    bad = good[:-1] + b", " + member + b"}"
    requests_ = b'"requests": [' + b", ".join([good, good, bad]) + b"]"
    body = b'{"shape": "openai", ' + requests_ + b"}" if shape_first else b"{" + requests_ + b', "shape": "openai"}'
    res = client.post("/v1/batches", data=body, content_type="application/json",
                      headers={"Authorization": f"Bearer {key}"})
    assert res.status_code == 400, res.get_data(as_text=True)
    error = res.json["error"]
    assert error["code"] == "invalid_batch" and error["message"].startswith("invalid batch: requests[2].custom_id: ")
    assert error["details"] == [{"idx": 2, "field": "custom_id", "message": error["details"][0]["message"]}]
    assert "OpenAI or Anthropic batch API" in error["details"][0]["message"]


def test_the_callers_list_filters_by_state_and_searches_ids_and_metadata(client, admin, make_key, workers,  # type: ignore[no-untyped-def]
                                                                          upstream) -> None:
    key = make_key("slow")["key"]
    done = submit(client, key, [CHAT], metadata={"name": "Nightly Evals", "team": "search"}).json["id"]
    wait_finished(client, key, done)
    upstream.control("sk-batch-slow", latency_ms=60_000)  # the cancel comes before its item could end
    try:
        stopped = submit(client, key, [CHAT], metadata={"name": "weekly"}).json["id"]
        assert client.post(f"/v1/batches/{stopped}/cancel",
                           headers={"Authorization": f"Bearer {key}"}).status_code == 200
        wait_finished(client, key, stopped)  # a running item ends when its cancel reaches its worker
    finally:
        upstream.forget("sk-batch-slow")

    def ids(**params: str) -> list[str]:
        res = get(client, key, "/v1/batches", format="relay", **params)
        assert res.status_code == 200, res.get_data(as_text=True)
        return [b["id"] for b in res.json["data"]]

    assert ids() == [stopped, done]
    assert ids(status="cancelled") == [stopped] and ids(status="queued") == [done]
    assert ids(finished="true") == [stopped, done] and ids(finished="false") == []  # nothing is running
    assert ids(search="nightly evals") == [done] and ids(search="WEEKLY") == [stopped]
    assert ids(search=f"msgbatch_{done.replace('-', '')}") == [done] and ids(search="no such text") == []
    every = admin("GET", "/admin/batches", query_string={"search": "Nightly"}).json["data"]
    assert done in [b["id"] for b in every] and stopped not in [b["id"] for b in every]
    assert get(client, key, "/v1/batches", format="relay", status="done").status_code == 400
