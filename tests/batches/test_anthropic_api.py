"""Anthropic's Message Batches API through the unmodified `anthropic` SDK, against a real `relay api` and real
workers."""

from __future__ import annotations

import anthropic
import pytest
import requests

from devtools.processes import RelayProcess
from devtools.waiting import until
from tests.batches.provider_helpers import batch_rows, batch_uuid, message, usage_by_custom_id, wait_anthropic

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fresh_upstream")]


def client(relay_api: RelayProcess, secret: str, prefix: str = "", *, bearer: bool = False) -> anthropic.Anthropic:
    if bearer:
        return anthropic.Anthropic(base_url=relay_api.url + prefix, auth_token=secret, max_retries=0)
    return anthropic.Anthropic(base_url=relay_api.url + prefix, api_key=secret, max_retries=0)


@pytest.mark.parametrize(("prefix", "bearer"), [("", False), ("/anthropic", True)])
def test_a_message_batch_runs_and_its_results_match_every_custom_id(relay_api, make_key, runtime, upstream,
                                                                    prefix, bearer) -> None:  # type: ignore[no-untyped-def]
    claude = client(relay_api, make_key()["key"], prefix, bearer=bearer)
    requests_ = [{"custom_id": f"q-{i}", "params": message(f"question {i}")} for i in range(4)]
    requests_.append({"custom_id": "lost", "params": message("hi", model="no-such-model")})
    created = claude.messages.batches.create(requests=requests_)
    assert created.id.startswith("msgbatch_") and created.processing_status == "in_progress"
    assert created.results_url is None and created.request_counts.processing + created.request_counts.succeeded \
        + created.request_counts.errored == 5
    done = wait_anthropic(claude, created.id)
    counts = done.request_counts
    assert (counts.processing, counts.succeeded, counts.errored, counts.canceled, counts.expired) == (0, 4, 1, 0, 0)
    assert done.ended_at is not None and done.results_url == f"/v1/messages/batches/{done.id}/results"
    results = {r.custom_id: r.result for r in claude.messages.batches.results(done.id)}
    assert set(results) == {r["custom_id"] for r in requests_}
    for i in range(4):
        assert results[f"q-{i}"].type == "succeeded" and results[f"q-{i}"].message.type == "message"
    assert results["lost"].type == "errored" and results["lost"].error.error.type == "not_found_error"
    events = usage_by_custom_id(runtime, done.id)
    assert set(events) == set(results) and events["lost"]["error_code"] == "model_not_found"
    assert upstream.stats()["total"] == 4


def test_invalid_requests_are_refused_in_anthropics_error_shape_and_nothing_is_stored(relay_api, key,
                                                                                      runtime) -> None:  # type: ignore[no-untyped-def]
    claude = client(relay_api, key)
    before = batch_rows(runtime)
    bad = [{"custom_id": "ok", "params": message("hi")}, {"custom_id": "ok", "params": message("again")},
           {"custom_id": "has space", "params": message("hi")},
           {"custom_id": "streams", "params": {**message("hi"), "stream": True}},
           {"custom_id": "no-messages", "params": {"model": "claude-sonnet", "max_tokens": 5}}]
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.batches.create(requests=bad)  # type: ignore[arg-type]
    error = refused.value.body["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_batch"
    assert [(d["index"], d["field"]) for d in error["details"]] == [  # the envelopes' and the params' at once
        (1, "custom_id"), (2, "custom_id"), (3, "params.stream"), (4, "params.messages")]
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.batches.create(requests=[bad[0], bad[3], bad[4]])  # type: ignore[arg-type]
    details = refused.value.body["error"]["details"]
    assert [(d["index"], d["custom_id"], d["field"]) for d in details] == [(1, "streams", "params.stream"),
                                                                          (2, "no-messages", "params.messages")]
    assert batch_rows(runtime) == before


def test_cancel_mid_run_ends_the_batch_with_every_request_canceled(relay_api, key, upstream) -> None:  # type: ignore[no-untyped-def]
    claude = client(relay_api, key)
    upstream.control("sk-batch-an", latency_ms=60_000)
    created = claude.messages.batches.create(requests=[{"custom_id": f"c{i}", "params": message(f"slow {i}")}
                                                       for i in range(20)])
    until(lambda: upstream.stats()["in_flight"] == 8, what="every worker thread calling the upstream")
    canceling = claude.messages.batches.cancel(created.id)
    assert canceling.processing_status in ("canceling", "ended") and canceling.cancel_initiated_at is not None
    done = wait_anthropic(claude, created.id, timeout=10)
    assert (done.request_counts.canceled, done.request_counts.succeeded) == (20, 0)
    results = list(claude.messages.batches.results(done.id))
    assert sorted(r.custom_id for r in results) == sorted(f"c{i}" for i in range(20))
    assert {r.result.type for r in results} == {"canceled"}
    assert upstream.stats()["total"] == 8


def test_the_list_pages_both_ways_and_shows_only_message_batches(relay_api, make_key) -> None:  # type: ignore[no-untyped-def]
    secret = make_key()["key"]
    claude = client(relay_api, secret)
    made = [claude.messages.batches.create(requests=[{"custom_id": "one", "params": message("x")}]).id
            for _ in range(3)]
    requests.post(f"{relay_api.url}/v1/batches", json={"shape": "anthropic", "requests": [message("native")]},
                  headers={"Authorization": f"Bearer {secret}"}, timeout=30).raise_for_status()
    newest_first = made[::-1]
    assert [b.id for b in claude.messages.batches.list(limit=1)] == newest_first  # the SDK follows after_id
    page = claude.messages.batches.list(limit=2)
    assert [b.id for b in page.data] == newest_first[:2] and page.has_more and page.last_id == newest_first[1]
    back = claude.messages.batches.list(before_id=newest_first[2], limit=1)
    assert [b.id for b in back.data] == [newest_first[1]] and back.has_more
    relay = requests.get(f"{relay_api.url}/v1/batches/{made[0]}", headers={"Authorization": f"Bearer {secret}"},
                         timeout=30).json()
    assert relay["id"] == str(batch_uuid(made[0])) and relay["shape"] == "anthropic"  # Relay's own view


def test_only_an_ended_batch_can_be_deleted_and_then_it_is_gone(relay_api, key, upstream, runtime) -> None:  # type: ignore[no-untyped-def]
    claude = client(relay_api, key)
    upstream.control("sk-batch-an", latency_ms=60_000)
    running = claude.messages.batches.create(requests=[{"custom_id": "r", "params": message("wait")}])
    until(lambda: upstream.stats()["in_flight"] == 1, what="the request running")
    with pytest.raises(anthropic.ConflictError) as refused:
        claude.messages.batches.delete(running.id)
    assert refused.value.body["error"]["code"] == "batch_not_ended"
    claude.messages.batches.cancel(running.id)
    wait_anthropic(claude, running.id, timeout=10)
    deleted = claude.messages.batches.delete(running.id)
    assert deleted.id == running.id and deleted.type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.batches.retrieve(running.id)
    assert len(usage_by_custom_id(runtime, running.id)) == 1  # its usage stays


def test_another_caller_gets_404_on_every_route(relay_api, make_key, make_token) -> None:  # type: ignore[no-untyped-def]
    owner = client(relay_api, make_key()["key"])
    batch = wait_anthropic(owner, owner.messages.batches.create(
        requests=[{"custom_id": "mine", "params": message("mine")}]).id)
    for secret, bearer in ((make_key()["key"], False), (make_token()["token"], True)):
        other = client(relay_api, secret, bearer=bearer)
        for call in (other.messages.batches.retrieve, other.messages.batches.cancel, other.messages.batches.delete):
            with pytest.raises(anthropic.NotFoundError) as refused:
                call(batch.id)
            assert refused.value.body == {"type": "error", "error": {"type": "not_found_error",
                                                                     "message": "batch not found",
                                                                     "code": "batch_not_found"}}
        answer = requests.get(f"{relay_api.url}/v1/messages/batches/{batch.id}/results",
                              headers={"Authorization": f"Bearer {secret}"}, timeout=30)
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "batch_not_found"
        assert batch.id not in [b.id for b in other.messages.batches.list()]
    assert owner.messages.batches.retrieve(batch.id).processing_status == "ended"
