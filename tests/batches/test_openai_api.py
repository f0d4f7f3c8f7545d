"""OpenAI's Files + Batches API through the unmodified `openai` SDK, against a real `relay api` and real workers."""

from __future__ import annotations

import io
import json
from typing import Any

import openai
import pytest
import requests

from devtools.processes import RelayProcess
from devtools.waiting import until
from tests.batches.provider_helpers import (
    batch_rows,
    batch_uuid,
    chat,
    jsonl,
    lines_of,
    usage_by_custom_id,
    wait_openai,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fresh_upstream")]


def client(relay_api: RelayProcess, key: str, prefix: str = "/v1") -> openai.OpenAI:
    return openai.OpenAI(base_url=relay_api.url + prefix, api_key=key, max_retries=0)


def upload(oai: openai.OpenAI, content: bytes, name: str = "requests.jsonl") -> Any:
    return oai.files.create(file=(name, io.BytesIO(content)), purpose="batch")


@pytest.mark.parametrize("prefix", ["/v1", "/openai/v1"])
def test_an_uploaded_file_runs_and_every_custom_id_comes_back_in_the_output_or_error_file(
        relay_api, make_key, runtime, upstream, prefix) -> None:  # type: ignore[no-untyped-def]
    oai = client(relay_api, make_key()["key"], prefix)
    good = [{"custom_id": f"ok-{i}", **chat(f"question {i}")} for i in range(4)]
    bad = {"custom_id": "no-model", **chat("hi", model="no-such-model")}
    uploaded = upload(oai, jsonl([*good, bad]))
    assert uploaded.purpose == "batch" and uploaded.bytes == len(jsonl([*good, bad]))
    created = oai.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                 completion_window="24h", metadata={"job": "nightly"})
    assert created.status == "in_progress" and created.input_file_id == uploaded.id
    done = wait_openai(oai, created.id)
    assert done.status == "completed" and done.metadata == {"job": "nightly"}
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (5, 4, 1)
    assert done.completed_at is not None and done.completed_at >= done.created_at
    output = lines_of(oai.files.content(done.output_file_id).content)
    errors = lines_of(oai.files.content(done.error_file_id).content)
    assert sorted(line["custom_id"] for line in output) == [f"ok-{i}" for i in range(4)]
    for line in output:
        assert line["error"] is None and line["response"]["status_code"] == 200
        assert line["response"]["body"]["object"] == "chat.completion"
    (failed,) = errors
    assert failed["custom_id"] == "no-model" and failed["response"]["status_code"] == 404
    assert failed["response"]["body"]["error"]["code"] == "model_not_found"
    events = usage_by_custom_id(runtime, done.id)
    assert set(events) == {*(g["custom_id"] for g in good), "no-model"}
    assert all(events[line["custom_id"]]["status"] == 200 for line in output)
    assert events["no-model"]["error_code"] == "model_not_found"
    listed = requests.get(f"{relay_api.url}/v1/usage/events", params={"batch_id": str(batch_uuid(done.id))},
                          headers={"Authorization": f"Bearer {oai.api_key}"}, timeout=30).json()["events"]
    assert sorted(e["custom_id"] for e in listed) == sorted(events)
    assert upstream.stats()["total"] == 4


def test_a_responses_batch_runs_on_the_responses_binding(relay_api, key) -> None:  # type: ignore[no-untyped-def]
    oai = client(relay_api, key)
    lines = [{"custom_id": "r1", "model": "gpt-5-responses", "input": "hello"}]
    created = oai.batches.create(input_file_id=upload(oai, jsonl(lines, "/v1/responses")).id,
                                 endpoint="/v1/responses", completion_window="24h")
    done = wait_openai(oai, created.id)
    (line,) = lines_of(oai.files.content(done.output_file_id).content)
    assert line["custom_id"] == "r1" and line["response"]["body"]["object"] == "response"
    assert done.error_file_id is None


def test_embeddings_and_other_endpoints_are_refused_at_create_in_openais_error_shape(relay_api, key,
                                                                                       runtime) -> None:  # type: ignore[no-untyped-def]
    oai = client(relay_api, key)
    file_id = upload(oai, jsonl([{"custom_id": "e", "model": "text-embedding", "input": "x"}], "/v1/embeddings")).id
    before = batch_rows(runtime)
    for endpoint, said in (("/v1/embeddings", "embeddings requests cannot be batched"),
                           ("/v1/completions", "/v1/completions is not an endpoint Relay runs batches for")):
        with pytest.raises(openai.BadRequestError) as refused:
            oai.batches.create(input_file_id=file_id, endpoint=endpoint, completion_window="24h")  # type: ignore[arg-type]
        error = refused.value.body
        assert error["code"] == "unsupported_endpoint" and error["type"] == "invalid_request_error"
        assert error["message"] == f"{said}: use /v1/chat/completions or /v1/responses"
    assert batch_rows(runtime) == before


def test_every_problem_of_every_line_is_named_at_once_by_line_and_custom_id_and_nothing_is_stored(  # type: ignore[no-untyped-def]
        relay_api, key, runtime) -> None:
    oai = client(relay_api, key)
    lines = [
        json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": chat("hi")}),
        json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": chat("hi")}),
        json.dumps({"custom_id": "b", "method": "POST", "url": "/v1/responses", "body": chat("hi")}),
        json.dumps({"method": "POST", "url": "/v1/chat/completions", "body": chat("hi")}),
        "{not json",
        json.dumps({"custom_id": "c", "method": "POST", "url": "/v1/chat/completions",
                    "body": {**chat("hi"), "stream": True}}),
        json.dumps({"custom_id": "d", "method": "GET", "url": "/v1/embeddings", "body": chat("hi")}),
    ]
    file_id = upload(oai, "\n".join(lines).encode()).id
    before = batch_rows(runtime)
    with pytest.raises(openai.BadRequestError) as refused:
        oai.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")
    error = refused.value.body
    assert error["code"] == "invalid_batch" and error["message"].startswith("invalid batch: line 2: custom_id")
    assert [(d["line"], d["field"]) for d in error["details"]] == [  # the envelopes' and the bodies' in one answer
        (2, "custom_id"), (3, "url"), (4, "custom_id"), (5, ""), (6, "body.stream"), (7, "method"), (7, "url")]
    assert error["message"].endswith("(and 6 more)")
    only_bodies = "\n".join([lines[0], lines[5]]).encode()
    with pytest.raises(openai.BadRequestError) as refused:
        oai.batches.create(input_file_id=upload(oai, only_bodies).id, endpoint="/v1/chat/completions",
                           completion_window="24h")
    assert refused.value.body["details"] == [{"line": 2, "custom_id": "c", "field": "body.stream",
                                              "message": "must not be set: batch responses are stored whole, "
                                                         "never streamed"}]
    assert batch_rows(runtime) == before


def test_cancel_mid_run_stops_the_batch_and_every_request_lands_in_the_error_file(relay_api, make_key, upstream,
                                                                                   runtime) -> None:  # type: ignore[no-untyped-def]
    oai = client(relay_api, make_key("slow")["key"])
    upstream.control("sk-batch-slow", latency_ms=60_000)
    lines = [{"custom_id": f"slow-{i}", **chat(f"slow {i}")} for i in range(20)]
    created = oai.batches.create(input_file_id=upload(oai, jsonl(lines)).id, endpoint="/v1/chat/completions",
                                 completion_window="24h")
    until(lambda: upstream.stats()["in_flight"] == 8, what="every worker thread calling the upstream")
    cancelling = oai.batches.cancel(created.id)
    assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at is not None
    done = wait_openai(oai, created.id, timeout=10)
    assert done.status == "cancelled" and done.cancelled_at is not None and done.output_file_id is None
    assert (done.request_counts.completed, done.request_counts.failed) == (0, 20)
    errors = lines_of(oai.files.content(done.error_file_id).content)
    assert sorted(e["custom_id"] for e in errors) == sorted(line["custom_id"] for line in lines)
    assert {e["error"]["code"] for e in errors} == {"batch_cancelled"} and all(e["response"] is None for e in errors)
    assert upstream.stats()["total"] == 8
    assert set(usage_by_custom_id(runtime, done.id)) == {line["custom_id"] for line in lines}  # queued and running
    with pytest.raises(openai.ConflictError):  # an ended batch: nothing to cancel, as OpenAI answers
        oai.batches.cancel(created.id)


def test_the_list_pages_newest_first_through_the_sdk_and_relays_own_view_stays_reachable(
        relay_api, make_key) -> None:  # type: ignore[no-untyped-def]
    secret = make_key()["key"]
    oai = client(relay_api, secret)
    file_id = upload(oai, jsonl([{"custom_id": "x", **chat("list me")}])).id
    made = [oai.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h").id
            for _ in range(3)]
    native = requests.post(f"{relay_api.url}/v1/batches", json={"shape": "openai", "requests": [chat("native")]},
                           headers={"Authorization": f"Bearer {secret}"}, timeout=30).json()
    first = oai.batches.list(limit=2)
    assert [b.id for b in first.data] == made[::-1][:2] and first.has_more
    assert [b.id for b in oai.batches.list(limit=1)] == made[::-1]  # the SDK follows `after` while has_more
    relay = requests.get(f"{relay_api.url}/v1/batches", params={"format": "relay", "limit": 10},
                         headers={"Authorization": f"Bearer {secret}"}, timeout=30).json()
    assert [b["id"] for b in relay["data"]] == [native["id"], *(str(batch_uuid(b)) for b in made[::-1])]
    assert relay["object"] == "list" and relay["first_id"] == native["id"] and relay["has_more"] is False
    own = requests.get(f"{relay_api.url}/v1/batches/{made[0]}", params={"format": "relay"},
                       headers={"Authorization": f"Bearer {secret}"}, timeout=30).json()
    assert own["id"] == str(batch_uuid(made[0])) and own["total"] == 1 and own["shape"] == "openai"
    by_uuid = requests.get(f"{relay_api.url}/v1/batches/{own['id']}", headers={"Authorization": f"Bearer {secret}"},
                           timeout=30).json()
    assert by_uuid["id"] == made[0] and by_uuid["object"] == "batch"  # read in the format it was created in


def test_files_list_deletes_and_serves_their_bytes(relay_api, key) -> None:  # type: ignore[no-untyped-def]
    oai = client(relay_api, key)
    content = jsonl([{"custom_id": "f", **chat("file")}])
    uploaded = upload(oai, content, "../../etc/passwd")
    assert uploaded.filename == "passwd" and oai.files.content(uploaded.id).content == content
    done = wait_openai(oai, oai.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                               completion_window="24h").id)
    listed = {f.id: f for f in oai.files.list()}
    assert uploaded.id in listed and done.output_file_id in listed and done.error_file_id is None
    output = listed[done.output_file_id]
    assert output.purpose == "batch_output" and output.bytes == len(oai.files.content(output.id).content)
    assert oai.files.delete(uploaded.id).deleted
    with pytest.raises(openai.NotFoundError):
        oai.files.retrieve(uploaded.id)
    assert oai.batches.retrieve(done.id).status == "completed"  # the batch does not depend on its input file
    with pytest.raises(openai.BadRequestError) as refused:
        oai.files.create(file=("x.jsonl", io.BytesIO(content)), purpose="fine-tune")
    assert refused.value.body["code"] == "unsupported_purpose"


@pytest.mark.parametrize("query", ["purpose=a%00b", "after=file-%00", "order=desc&purpose=%01"])
def test_a_control_character_in_a_files_list_filter_is_a_400_not_a_500(relay_api, key, query) -> None:  # type: ignore[no-untyped-def]
    res = requests.get(f"{relay_api.url}/v1/files?{query}", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert res.status_code == 400 and res.json()["error"]["code"], res.text


def test_another_caller_gets_404_on_every_route(relay_api, make_key, make_token) -> None:  # type: ignore[no-untyped-def]
    owner = client(relay_api, make_key()["key"])
    uploaded = upload(owner, jsonl([{"custom_id": "mine", **chat("mine")}]))
    batch = wait_openai(owner, owner.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                                    completion_window="24h").id)
    for other in (client(relay_api, make_key()["key"]), client(relay_api, make_token()["token"], "/openai/v1")):
        calls = [lambda o=other: o.files.retrieve(uploaded.id), lambda o=other: o.files.content(uploaded.id),
                 lambda o=other: o.files.delete(uploaded.id), lambda o=other: o.files.content(batch.output_file_id),
                 lambda o=other: o.batches.retrieve(batch.id), lambda o=other: o.batches.cancel(batch.id),
                 lambda o=other: o.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                                  completion_window="24h")]
        for call in calls:
            with pytest.raises(openai.NotFoundError):
                call()
        assert batch.id not in [b.id for b in other.batches.list()]
        assert {uploaded.id, batch.output_file_id}.isdisjoint(f.id for f in other.files.list())
