"""Re-run what failed (`POST /v1/batches/{id}/rerun`) and merged results, on real workers and the fake upstream."""

from __future__ import annotations

import io
import json
from typing import Any
from uuid import UUID

import pytest

from app.batches.service import payload_store
from devtools.waiting import until
from tests.batches.helpers import CHAT, get, results, submit, wait_finished
from tests.batches.provider_helpers import jsonl, lines_of

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fresh_upstream")]
MESSAGE = {"model": "claude-sonnet", "max_tokens": 16, "messages": [{"role": "user", "content": "hello"}]}


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def rerun(client: Any, key: str, batch_id: str, body: Any = None, **params: Any) -> Any:
    return client.post(f"/v1/batches/{batch_id}/rerun", json=body, query_string=params, headers=_auth(key))


def _asked(item: dict[str, Any]) -> str:
    return str(item["body"]["messages"][-1]["content"])


def _raw_submit(client: Any, key: str, items: list[bytes]) -> str:
    """Submit item bodies written by hand (their exact bytes are what a re-run must send again)."""
    body = b'{"shape": "openai", "requests": [' + b",".join(items) + b"]}"
    res = client.post("/v1/batches", data=body, content_type="application/json", headers=_auth(key))
    assert res.status_code == 202, res.get_data(as_text=True)
    return str(res.json["id"])


def _item_bytes(i: int) -> bytes:
    # odd spacing and an escaped character, so that a re-run that re-encoded the body would differ
    return (b'{ "model":"gpt-4o-mini",  "messages":[{"role":"user","content":"item %d \\u00e9"}],'
            b'"max_tokens": 32 }' % i)


def test_a_rerun_of_the_failed_items_runs_exactly_those_once_with_their_request_bytes(client, key, runtime,
                                                                                       upstream) -> None:
    upstream.control("sk-batch-ok", mode="fail", fail_status=503, times=3)  # three calls fail: all_keys_failed
    items = [_item_bytes(i) for i in range(8)] + [json.dumps({**CHAT, "model": "no-such-model"}).encode()]
    original = wait_finished(client, key, _raw_submit(client, key, items))
    failed = sorted(i["idx"] for i in original["items"] if i["error_code"] == "all_keys_failed")
    assert len(failed) == 3 and original["counts"] == {**original["counts"], "completed": 5, "discarded": 4}
    seen = upstream.stats()["total"]

    res = rerun(client, key, original["id"], {"codes": ["all_keys_failed"]})
    assert res.status_code == 202, res.get_data(as_text=True)
    made = res.json
    assert made["rerun_of"] == original["id"] and made["original_id"] == original["id"]
    assert made["total"] == 3 and made["policy_id"] == original["policy_id"]
    done = wait_finished(client, key, made["id"])
    assert done["counts"]["completed"] == 3
    assert [i["source_idx"] for i in done["items"]] == failed
    calls = upstream.requests(since=seen)
    assert sorted(_asked(c) for c in calls) == sorted(f"item {i} \u00e9" for i in failed)  # each once, no other
    store = payload_store(runtime)
    for item in done["items"]:
        assert store.read_request(UUID(made["id"]), item["idx"]) == items[item["source_idx"]]


def test_merged_results_give_the_latest_attempt_of_every_original_item_through_a_chain_of_reruns(
        client, key, upstream) -> None:
    upstream.control("sk-batch-ok", mode="fail", fail_status=503, times=4)
    original = wait_finished(client, key, _raw_submit(client, key, [_item_bytes(i) for i in range(6)]))
    first_failed = {i["idx"] for i in original["items"] if i["state"] == "discarded"}
    assert len(first_failed) == 4
    upstream.control("sk-batch-ok", mode="fail", fail_status=503, times=1)  # one of the re-run fails again
    second = wait_finished(client, key, rerun(client, key, original["id"]).json["id"])
    (again,) = [i for i in second["items"] if i["state"] == "discarded"]
    third = wait_finished(client, key, rerun(client, key, second["id"]).json["id"])
    assert third["rerun_of"] == second["id"] and third["original_id"] == original["id"]
    assert [i["source_idx"] for i in third["items"]] == [again["source_idx"]]

    for asked_on in (original["id"], second["id"], third["id"]):
        merged = get(client, key, f"/v1/batches/{asked_on}/results", merged="true").json["results"]
        assert [r["idx"] for r in merged] == list(range(6))
        assert all(r["state"] == "completed" and r["response"]["object"] == "chat.completion" for r in merged)
        by_idx = {r["idx"]: r for r in merged}
        assert by_idx[again["source_idx"]]["batch_id"] == third["id"]
        assert by_idx[again["source_idx"]]["attempts"] == 3
        for idx in first_failed - {again["source_idx"]}:
            assert (by_idx[idx]["batch_id"], by_idx[idx]["attempts"]) == (second["id"], 2)
        for idx in set(range(6)) - first_failed:
            assert (by_idx[idx]["batch_id"], by_idx[idx]["batch_idx"], by_idx[idx]["attempts"]) == \
                (original["id"], idx, 1)
    lines = get(client, key, f"/v1/batches/{original['id']}/results", merged="true", format="jsonl")
    assert [json.loads(line)["idx"] for line in lines.get_data().splitlines()] == list(range(6))
    assert [r["idx"] for r in results(client, key, original["id"])] == list(range(6))  # unmerged: its own items


def test_a_rerun_by_anyone_else_is_the_same_404_as_an_unknown_id(client, key, make_key, make_token,
                                                                 upstream) -> None:
    upstream.control("sk-batch-ok", mode="fail", fail_status=503, times=1)
    batch = wait_finished(client, key, submit(client, key, [CHAT]).json["id"])
    for other in (make_key()["key"], make_token()["token"]):
        res = rerun(client, other, batch["id"])
        assert res.status_code == 404 and res.json["error"]["code"] == "batch_not_found"
    unknown = rerun(client, key, "00000000-0000-0000-0000-000000000000")
    assert unknown.status_code == 404 and unknown.json["error"]["code"] == "batch_not_found"
    assert rerun(client, key, "not-an-id").status_code == 404
    assert rerun(client, key, batch["id"]).status_code == 202


def test_a_batch_not_finished_or_with_nothing_to_rerun_is_a_409_with_a_stable_code(client, make_key,
                                                                                   upstream) -> None:
    slow = make_key("slow")["key"]
    upstream.control("sk-batch-slow", latency_ms=3000)
    running = submit(client, slow, [CHAT, CHAT]).json
    res = rerun(client, slow, running["id"])
    assert res.status_code == 409 and res.json["error"]["code"] == "batch_not_finished"
    assert set(res.json["error"]["details"]) == {"queued", "running"}
    client.post(f"/v1/batches/{running['id']}/cancel", headers=_auth(slow))

    key = make_key()["key"]
    done = wait_finished(client, key, submit(client, key, [CHAT, {**CHAT, "model": "no-such-model"}]).json["id"])
    res = rerun(client, key, done["id"], {"codes": ["rate_limited"]})
    assert res.status_code == 409 and res.json["error"]["code"] == "nothing_to_rerun"
    assert res.json["error"]["details"] == {"error_codes": {"model_not_found": 1}}
    assert rerun(client, key, done["id"], {"codes": ["model_not_found"]}).status_code == 202


@pytest.mark.parametrize("body", [{"codes": []}, {"codes": "rate_limited"}, {"codes": ["Not A Code"]},
                                  {"max_cost": -1}, {"max_cost": "1"}, {"max_cost": True}, {"surprise": 1},
                                  {"metadata": [1]}, [1], "text"])
def test_a_bad_rerun_body_is_a_400_with_a_code(client, key, body) -> None:
    batch = wait_finished(client, key, submit(client, key, [{**CHAT, "model": "no-such-model"}]).json["id"])
    res = rerun(client, key, batch["id"], body)
    assert res.status_code == 400 and res.json["error"]["code"], res.get_data(as_text=True)


def test_an_openai_batch_is_rerun_as_an_openai_batch_of_a_new_input_file_with_its_custom_ids(client, key,
                                                                                             upstream) -> None:
    lines = [{"custom_id": f"q-{i}", **CHAT, "messages": [{"role": "user", "content": f"q {i}"}]} for i in range(4)]
    upload = client.post("/v1/files", data={"purpose": "batch", "file": (io.BytesIO(jsonl(lines)), "in.jsonl")},
                         headers=_auth(key), content_type="multipart/form-data")
    assert upload.status_code == 200, upload.get_data(as_text=True)
    upstream.control("sk-batch-ok", mode="fail", fail_status=503, times=2)
    created = client.post("/v1/batches", json={"input_file_id": upload.json["id"], "endpoint": "/v1/chat/completions",
                                               "completion_window": "24h", "metadata": {"job": "nightly"}},
                          headers=_auth(key)).json
    _wait_relay_view(client, key, created["id"])
    errors = lines_of(client.get(f"/v1/files/{_file(client, key, created['id'], 'error_file_id')}/content",
                                 headers=_auth(key)).get_data())
    failed = sorted(line["custom_id"] for line in errors)
    assert len(failed) == 2

    res = rerun(client, key, created["id"])
    assert res.status_code == 202, res.get_data(as_text=True)
    made = res.json
    assert made["object"] == "batch" and made["id"].startswith("batch_") and made["metadata"] == {"job": "nightly"}
    assert made["request_counts"]["total"] == 2 and made["input_file_id"] != upload.json["id"]
    new_input = lines_of(client.get(f"/v1/files/{made['input_file_id']}/content", headers=_auth(key)).get_data())
    assert sorted(line["custom_id"] for line in new_input) == failed
    assert all(line["url"] == "/v1/chat/completions" and line["method"] == "POST" for line in new_input)
    relay_view = _wait_relay_view(client, key, made["id"])
    assert relay_view["counts"]["completed"] == 2 and relay_view["rerun_of"] == str(UUID(created["id"][6:]))
    output = lines_of(client.get(f"/v1/files/{_file(client, key, made['id'], 'output_file_id')}/content",
                                 headers=_auth(key)).get_data())
    assert sorted(line["custom_id"] for line in output) == failed
    listed = client.get("/v1/batches", headers=_auth(key)).json["data"]
    assert made["id"] in [b["id"] for b in listed]  # listed by OpenAI's API like any batch created there


def _wait_relay_view(client: Any, key: str, batch_id: str) -> dict[str, Any]:
    """Relay's view of an OpenAI batch once it has finished."""
    return until(lambda: (b := get(client, key, f"/v1/batches/{batch_id}", format="relay").json)["finished"] and b,
                    timeout=30, what=f"batch {batch_id} to finish")  # type: ignore[no-any-return]


def _file(client: Any, key: str, batch_id: str, which: str) -> str:
    return str(client.get(f"/v1/batches/{batch_id}", headers=_auth(key)).json[which])


def test_an_anthropic_batch_is_rerun_as_a_message_batch_keeping_its_custom_ids(client, key, upstream) -> None:
    requests = [{"custom_id": f"m-{i}", "params": {**MESSAGE, "messages": [{"role": "user", "content": f"m {i}"}]}}
                for i in range(3)]
    requests.append({"custom_id": "lost", "params": {**MESSAGE, "model": "no-such-model"}})
    created = client.post("/v1/messages/batches", json={"requests": requests}, headers=_auth(key)).json
    original = _wait_relay_view(client, key, created["id"])
    res = rerun(client, key, created["id"])
    assert res.status_code == 202 and res.json["total"] == 1 and res.json["rerun_of"] == original["id"]
    again = client.get(f"/v1/messages/batches/msgbatch_{UUID(res.json['id']).hex}", headers=_auth(key))
    assert again.status_code == 200 and again.json["type"] == "message_batch"
    wait_finished(client, key, res.json["id"])
    lines = lines_of(client.get(f"/v1/messages/batches/msgbatch_{UUID(res.json['id']).hex}/results",
                                headers=_auth(key)).get_data())
    assert [(line["custom_id"], line["result"]["type"]) for line in lines] == [("lost", "errored")]


def test_merged_results_outlive_a_deleted_original_with_the_attempts_left(client, key, upstream) -> None:
    upstream.control("sk-batch-ok", mode="fail", fail_status=503, times=2)
    original = wait_finished(client, key, _raw_submit(client, key, [_item_bytes(i) for i in range(5)]))
    failed = sorted(i["idx"] for i in original["items"] if i["state"] == "discarded")
    made = wait_finished(client, key, rerun(client, key, original["id"]).json["id"])
    assert client.delete(f"/v1/batches/{original['id']}", headers=_auth(key)).status_code == 200
    merged = get(client, key, f"/v1/batches/{made['id']}/results", merged="true").json["results"]
    assert [(r["idx"], r["batch_id"], r["attempts"]) for r in merged] == [(idx, made["id"], 1) for idx in failed]


def test_a_rerun_keeps_the_source_batchs_metadata_completion_window_and_cap_unless_told_otherwise(client, key,
                                                                                                  upstream) -> None:
    upstream.control("sk-batch-ok", mode="fail", fail_status=503, times=2)
    bounded = {**CHAT, "max_tokens": 16}  # an item a hard cap can run
    source = submit(client, key, [bounded, bounded], metadata={"run": 1}, completion_window="2h", max_cost=3)
    done = wait_finished(client, key, source.json["id"])
    kept = rerun(client, key, done["id"], {"codes": ["all_keys_failed"]}).json
    assert (kept["metadata"], kept["completion_window"], kept["max_cost"], kept["max_cost_mode"]) == (
        {"run": 1}, "2h", 3, "hard")
    assert kept["expires_at"] > done["expires_at"]  # the window runs from the re-run's submit
    told = rerun(client, key, done["id"], {"metadata": {"run": 2}, "max_cost": None, "force": True}).json
    assert (told["metadata"], told["max_cost"]) == ({"run": 2}, None)
