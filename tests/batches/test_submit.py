"""Submitting, reading and cancelling batches through the API, with no worker running (nothing is published)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.batches.service import payload_store
from tests.batches.helpers import CHAT, get, run_in_process, submit, usage_events

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream


@pytest.fixture(scope="module", autouse=True)
def _no_leftovers(runtime) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """Batches submitted here must not be run later by another module's workers."""
    yield
    with runtime.pool.connection() as conn:
        conn.execute("UPDATE batch_items SET state = 'cancelled' WHERE state = 'queued'")
        conn.execute("UPDATE batches SET status = 'cancelled' WHERE status = 'queued'")


def _errors(res: Any) -> list[dict[str, Any]]:
    assert res.status_code == 400, res.get_data(as_text=True)
    assert res.json["error"]["code"] == "invalid_batch"
    return res.json["error"]["details"]  # type: ignore[no-any-return]


def test_submit_answers_202_with_the_batch_and_stores_its_requests_in_one_file(client, key, runtime) -> None:
    items = [CHAT, {**CHAT, "messages": [{"role": "user", "content": "é ünïcode"}]}]
    res = submit(client, key, items, metadata={"job": "nightly"})
    assert res.status_code == 202, res.get_data(as_text=True)
    batch = res.json
    assert batch["status"] == "queued" and batch["shape"] == "openai" and batch["total"] == 2
    assert batch["counts"] == {"queued": 2, "running": 0, "completed": 0, "discarded": 0, "cancelled": 0}
    assert batch["finished"] is False and batch["finished_at"] is None and batch["metadata"] == {"job": "nightly"}
    assert batch["credential_kind"] == "relay_key" and batch["principal_kind"] == "service_account"
    assert "relay_key_hash" not in batch and "owner" not in batch
    store = payload_store(runtime)
    for idx, item in enumerate(items):
        assert json.loads(store.read_request(batch["id"], idx)) == item
    assert [p.name for p in store.batch_dir(batch["id"]).iterdir()] == ["requests.bin"]
    assert not any(Path(store.root, ".staging").iterdir())


def test_stored_requests_are_the_original_bytes(client, key, runtime) -> None:
    item = b'{"model":"gpt-4o-mini",  "messages":[{"role":"user","content":"\\u00e9"}]}'
    raw = b'{"shape": "openai", "requests": [ ' + item + b" ]}"
    res = client.post("/v1/batches", data=raw, content_type="application/json",
                      headers={"Authorization": f"Bearer {key}"})
    assert res.status_code == 202
    assert payload_store(runtime).read_request(res.json["id"], 0) == item


@pytest.mark.parametrize(("body", "field"), [
    ({"requests": [CHAT]}, "shape"),
    ({"shape": "cohere", "requests": [CHAT]}, "shape"),
    ({"shape": "openai"}, "requests"),
    ({"shape": "openai", "requests": {"a": 1}}, "requests"),
    ({"shape": "openai", "requests": [CHAT], "metadata": "x"}, "metadata"),
    ({"shape": "openai", "requests": [CHAT], "surprise": 1}, "surprise"),
])
def test_a_bad_envelope_is_rejected_naming_the_field(client, key, body, field) -> None:
    res = client.post("/v1/batches", json=body, headers={"Authorization": f"Bearer {key}"})
    assert [d["field"] for d in _errors(res)] == [field]


def test_empty_requests_are_rejected(client, key) -> None:
    assert _errors(submit(client, key, []))[0]["field"] == "requests"


def test_every_invalid_item_is_listed_with_its_index_and_nothing_is_stored(client, key, runtime) -> None:
    items = [
        CHAT,
        {"messages": CHAT["messages"]},  # 1: no model
        {"model": "gpt-4o-mini"},  # 2: no messages
        {**CHAT, "stream": True},  # 3: streaming
        {"model": "gpt-4o-mini", "input": "embed me"},  # 4: embeddings
        {"model": "gpt-4o-mini", "input": [{"role": "user", "content": "hi"}], "max_tokens": 5},  # 5: canonical
        "not an object",  # 6
        CHAT,
    ]
    with runtime.pool.connection() as conn:
        before = conn.execute("SELECT count(*) AS n FROM batches").fetchone()["n"]
    details = _errors(submit(client, key, items))
    by_idx = {d["idx"]: d for d in details}
    assert sorted(by_idx) == [1, 2, 3, 4, 5, 6]
    assert by_idx[1]["field"] == "model" and by_idx[2]["field"] == "messages"
    assert by_idx[3]["field"] == "stream"
    assert "embeddings" in by_idx[4]["message"] and "canonical" in by_idx[5]["message"]
    with runtime.pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM batches").fetchone()["n"] == before



def _counts(runtime: Any) -> tuple[int, int]:
    with runtime.pool.connection() as conn:
        row = conn.execute("SELECT (SELECT count(*) FROM batches) AS b, (SELECT count(*) FROM batch_items) AS i")
        found = row.fetchone()
    return found["b"], found["i"]


def test_a_bad_item_after_many_good_ones_rejects_the_batch_with_nothing_stored(client, key, runtime) -> None:
    # The typed path copies rows and writes the request file while it checks items: item 1500 makes it roll all
    # of that back, and the scanner answers.
    before, folders = _counts(runtime), set(payload_store(runtime).root.iterdir())
    details = _errors(submit(client, key, [CHAT] * 1500 + [{"model": "gpt-4o-mini"}] + [CHAT] * 10))
    assert [(d["idx"], d["field"]) for d in details] == [(1500, "messages")]
    assert _counts(runtime) == before
    assert set(payload_store(runtime).root.iterdir()) == folders
    assert not any(Path(payload_store(runtime).root, ".staging").iterdir())


def test_a_valid_item_the_typed_path_cannot_vouch_for_is_stored_by_the_scanner(client, key, runtime) -> None:
    # An assistant turn with tool calls and no content is valid Chat Completions, outside the typed struct.
    tool_turn = {"model": "gpt-4o-mini", "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                               "function": {"name": "w", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]}
    items = [CHAT] * 1500 + [tool_turn, CHAT]
    batches, rows = _counts(runtime)
    res = submit(client, key, items)
    assert res.status_code == 202, res.get_data(as_text=True)
    assert _counts(runtime) == (batches + 1, rows + len(items))  # the typed attempt's rows are gone
    store = payload_store(runtime)
    assert json.loads(store.read_request(res.json["id"], 1500)) == tool_turn
    assert json.loads(store.read_request(res.json["id"], 1501)) == CHAT

def test_items_are_validated_against_the_batch_shape(client, key) -> None:
    anthropic_item = {"model": "claude-sonnet", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    assert submit(client, key, [anthropic_item], shape="anthropic").status_code == 202
    assert _errors(submit(client, key, [CHAT], shape="anthropic"))[0]["field"] == "max_tokens"
    responses_item = {"model": "gpt-5-responses", "input": "hi"}
    assert submit(client, key, [responses_item], shape="openai_responses").status_code == 202
    embed = {"model": "text-embedding-3-small", "input": "x"}
    assert "embeddings" in _errors(submit(client, key, [embed], shape="openai_responses"))[0]["message"]


def test_malformed_json_is_a_400(client, key) -> None:
    for raw in (b'{"shape": "openai", "requests": [', b"", b"\xff\xfe", b"[1]", b'{"shape":"openai"} x'):
        res = client.post("/v1/batches", data=raw, content_type="application/json",
                          headers={"Authorization": f"Bearer {key}"})
        assert res.status_code == 400, raw
        assert res.json["error"]["code"] in ("invalid_json", "invalid_batch")


def test_too_many_items_is_a_413(client, key, runtime, monkeypatch) -> None:
    monkeypatch.setattr(runtime, "settings", _replace(runtime.settings, batch_max_items=3))
    res = submit(client, key, [CHAT] * 4)
    assert res.status_code == 413 and res.json["error"]["code"] == "batch_too_large"
    assert submit(client, key, [CHAT] * 3).status_code == 202


def test_too_many_bytes_is_a_413(client, key, runtime, monkeypatch) -> None:
    monkeypatch.setattr(runtime, "settings", _replace(runtime.settings, batch_max_bytes=2000))
    res = submit(client, key, [CHAT] * 40)
    assert res.status_code == 413 and res.json["error"]["code"] == "payload_too_large"


def test_an_unwritable_payload_dir_is_a_507_and_nothing_is_committed(client, key, runtime, tmp_path,
                                                                    monkeypatch) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the directory should be")
    monkeypatch.setitem(runtime.services, "payloads", type(payload_store(runtime))(blocked))
    with runtime.pool.connection() as conn:
        before = conn.execute("SELECT count(*) AS n FROM batches").fetchone()["n"]
    res = submit(client, key, [CHAT])
    assert res.status_code == 507 and res.json["error"]["code"] == "payload_store_unavailable"
    with runtime.pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM batches").fetchone()["n"] == before


def test_submit_needs_a_credential(client) -> None:
    res = client.post("/v1/batches", json={"shape": "openai", "requests": [CHAT]})
    assert res.status_code == 401


def test_only_the_submitter_can_read_or_cancel(client, admin, make_key, make_token) -> None:
    owner = make_key()
    batch = submit(client, owner["key"], [CHAT]).json
    path = f"/v1/batches/{batch['id']}"
    other_key = make_key()["key"]
    token_a = make_token("batch-user")["token"]
    token_a2 = make_token("batch-user")["token"]
    token_b = make_token("other-user")["token"]
    by_token = submit(client, token_a, [CHAT]).json
    rotated = admin("POST", f"/admin/relay-keys/{owner['id']}/rotate", json={"grace_seconds": 600}).json["key"]
    for secret in (other_key, rotated, token_a):
        for suffix in ("", "/results"):
            res = get(client, secret, path + suffix)
            assert res.status_code == 404 and res.json["error"]["code"] == "batch_not_found"
        res = client.post(path + "/cancel", headers={"Authorization": f"Bearer {secret}"})
        assert res.status_code == 404
    assert get(client, owner["key"], path).status_code == 200  # the old value still works in its grace period
    assert get(client, token_a2, f"/v1/batches/{by_token['id']}").status_code == 200
    assert get(client, token_b, f"/v1/batches/{by_token['id']}").status_code == 404
    for bad in ("nope", "00000000-0000-0000-0000-000000000000"):
        res = get(client, owner["key"], f"/v1/batches/{bad}")
        assert res.status_code == 404 and res.json["error"]["code"] == "batch_not_found"


def test_list_shows_only_your_batches_newest_first_with_a_cursor(client, make_key) -> None:
    """Relay's view of the list is `format=relay` (by default `GET /v1/batches` lists OpenAI's batches)."""
    mine = make_key()["key"]
    ids = [submit(client, mine, [CHAT]).json["id"] for _ in range(3)]
    submit(client, make_key()["key"], [CHAT])
    first = get(client, mine, "/v1/batches", format="relay", limit=2).json
    assert [b["id"] for b in first["data"]] == ids[::-1][:2]
    assert (first["object"], first["first_id"], first["last_id"], first["has_more"]) == ("list", *ids[::-1][:2], True)
    second = get(client, mine, "/v1/batches", format="relay", limit=2, cursor=first["next_cursor"]).json
    assert [b["id"] for b in second["data"]] == ids[:1] and second["next_cursor"] is None
    bad = get(client, mine, "/v1/batches", format="relay", cursor="Z2FyYmFnZQ")  # base64 of "garbage"
    assert (bad.status_code, bad.json["error"]["code"]) == (400, "invalid_request")  # the usage API's code
    openai_view = get(client, mine, "/v1/batches").json
    assert openai_view == {"object": "list", "data": [], "first_id": "", "last_id": "", "has_more": False}


def test_items_are_paginated_and_filtered_by_state(client, key) -> None:
    batch = submit(client, key, [CHAT] * 5).json
    page = get(client, key, f"/v1/batches/{batch['id']}", limit=2).json
    assert [i["idx"] for i in page["items"]] == [0, 1] and page["items_next_after"] == 1
    page = get(client, key, f"/v1/batches/{batch['id']}", limit=2, after=3).json
    assert [i["idx"] for i in page["items"]] == [4] and page["items_next_after"] is None
    assert get(client, key, f"/v1/batches/{batch['id']}", state="discarded").json["items"] == []
    assert get(client, key, f"/v1/batches/{batch['id']}", state="bogus").status_code == 400


def test_the_last_page_of_items_has_no_next_after_even_when_it_is_full(client, key) -> None:
    batch = submit(client, key, [CHAT] * 4).json
    page = get(client, key, f"/v1/batches/{batch['id']}", limit=2, after=1).json
    assert [i["idx"] for i in page["items"]] == [2, 3] and page["items_next_after"] is None
    page = get(client, key, f"/v1/batches/{batch['id']}", limit=4).json
    assert len(page["items"]) == 4 and page["items_next_after"] is None
    page = get(client, key, f"/v1/batches/{batch['id']}", limit=3).json
    assert page["items_next_after"] == 2


def test_an_item_larger_than_the_live_request_limit_is_a_413_and_nothing_is_stored(client, key, runtime,
                                                                                  monkeypatch) -> None:
    monkeypatch.setattr(runtime, "settings", _replace(runtime.settings, max_request_bytes=2000))
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 2000}]}
    with runtime.pool.connection() as conn:
        before = conn.execute("SELECT count(*) AS n FROM batches").fetchone()["n"]
    res = submit(client, key, [CHAT] * 50 + [big] + [CHAT] * 50)
    assert res.status_code == 413 and res.json["error"]["code"] == "item_too_large"
    assert res.json["error"]["message"].startswith("requests[50] holds more than 2000 bytes")
    with runtime.pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM batches").fetchone()["n"] == before
    assert submit(client, key, [CHAT] * 100).status_code == 202  # a body past the limit, of items within it


def test_cancelling_a_finished_batch_is_a_409_and_changes_nothing(client, key, runtime, upstream) -> None:
    batch = submit(client, key, [CHAT] * 2).json
    assert run_in_process(runtime, batch["id"], 2) == ["completed", "completed"]  # as a worker would
    res = client.post(f"/v1/batches/{batch['id']}/cancel", headers={"Authorization": f"Bearer {key}"})
    assert res.status_code == 409 and res.json["error"]["code"] == "batch_finished"
    after = get(client, key, f"/v1/batches/{batch['id']}").json
    assert after["status"] == "queued" and after["cancelled_at"] is None and after["finished"] is True
    assert after["counts"]["completed"] == 2 and after["counts"]["cancelled"] == 0


def test_cancel_marks_queued_items_cancelled_once_with_one_usage_event_each(client, key, runtime) -> None:
    batch = submit(client, key, [CHAT] * 3).json
    for _ in range(2):
        res = client.post(f"/v1/batches/{batch['id']}/cancel", headers={"Authorization": f"Bearer {key}"})
        assert res.status_code == 200
        body = res.json
        assert body["status"] == "cancelled" and body["counts"]["cancelled"] == 3
        assert body["finished"] is True and body["cancelled_at"] is not None
    events = usage_events(runtime, batch["id"])
    assert [e["batch_idx"] for e in events] == [0, 1, 2]
    assert {e["source"] for e in events} == {"batch"} and {e["error_code"] for e in events} == {"batch_cancelled"}
    assert all(e["input_tokens"] == 0 and e["output_tokens"] == 0 for e in events)


def test_results_stream_every_item_in_idx_order_as_json_or_json_lines(client, key) -> None:
    batch = submit(client, key, [CHAT] * 3).json
    client.post(f"/v1/batches/{batch['id']}/cancel", headers={"Authorization": f"Bearer {key}"})
    res = get(client, key, f"/v1/batches/{batch['id']}/results")
    assert res.mimetype == "application/json"
    assert [(r["idx"], r["state"]) for r in res.json["results"]] == [(i, "cancelled") for i in range(3)]
    res = get(client, key, f"/v1/batches/{batch['id']}/results", format="jsonl")
    lines = [json.loads(line) for line in res.get_data().splitlines()]
    assert res.mimetype == "application/x-ndjson" and [r["idx"] for r in lines] == [0, 1, 2]
    res = client.get(f"/v1/batches/{batch['id']}/results",
                     headers={"Authorization": f"Bearer {key}", "Accept": "application/x-ndjson"})
    assert res.mimetype == "application/x-ndjson"


def _replace(settings: Any, **changes: Any) -> Any:
    from dataclasses import replace

    return replace(settings, **changes)


