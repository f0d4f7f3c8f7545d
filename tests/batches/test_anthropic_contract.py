"""Every answer of the Anthropic-compatible routes, driven through their flows against a real `relay api` and real
workers, validated against the `anthropic` SDK's types and Anthropic's API reference (tests/conformance/contracts):
bodies, error objects, `request-id`, Anthropic's rate-limit header names, `retry-after` on a 429."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from devtools.waiting import until
from tests.batches.provider_helpers import message
from tests.conformance import check
from tests.conformance.calls import Api

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fresh_upstream")]
BATCHES = "/messages/batches"


def _batch(body: Any) -> Any:
    return check.anthropic("MessageBatch", body)


def _error(res: Any, status: int, kind: str) -> dict[str, Any]:
    assert res.status_code == status, (res.status_code, res.text[:300])
    error = check.anthropic("ErrorResponse", res.json())["error"]
    assert error["type"] == kind, error
    return error  # type: ignore[no-any-return]


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.parametrize("prefix", ["/v1", "/anthropic/v1"])
def test_message_batches_answer_as_anthropics_types_through_a_whole_run(relay_api, make_key, prefix) -> None:  # type: ignore[no-untyped-def]
    api = Api(relay_api.url + prefix, make_key()["key"], anthropic=True)
    empty = check.anthropic("MessageBatchList", api.ok("GET", BATCHES))
    assert (empty["data"], empty["has_more"]) == ([], False)
    requests = [{"custom_id": "ok-1", "params": message("one")}, {"custom_id": "ok-2", "params": message("two")},
                {"custom_id": "bad", "params": message("three", model="no-such-model")}]
    created = _batch(api.ok("POST", BATCHES, json={"requests": requests}))
    assert _at(created["expires_at"]) - _at(created["created_at"]) == timedelta(hours=24)  # the providers' 24 h
    done = until(lambda: _batch(api.ok("GET", f"{BATCHES}/{created['id']}")),
                 lambda batch: batch["processing_status"] == "ended")
    assert done["request_counts"]["succeeded"] == 2 and done["request_counts"]["errored"] == 1
    _pages(api)
    lines = [json.loads(line) for line in api.call("GET", f"{BATCHES}/{done['id']}/results").content.splitlines()]
    kinds = {check.anthropic("MessageBatchIndividualResponse", line)["result"]["type"] for line in lines}
    assert kinds == {"succeeded", "errored"}
    _error(api.call("POST", f"{BATCHES}/{done['id']}/cancel"), 409, "invalid_request_error")
    deleted = check.anthropic("DeletedMessageBatch", api.ok("DELETE", f"{BATCHES}/{done['id']}"))
    assert deleted == {"id": done["id"], "type": "message_batch_deleted"}
    _error(api.call("GET", f"{BATCHES}/{done['id']}"), 404, "not_found_error")


def _pages(api: Api) -> None:
    """Every page of the list one batch at a time, each a valid list whose ids name its first and last batches."""
    after: dict[str, str] = {}
    for _ in range(50):
        page = check.anthropic("MessageBatchList", api.ok("GET", BATCHES, params={"limit": 1, **after}))
        assert len(page["data"]) == 1 and page["first_id"] == page["last_id"] == page["data"][0]["id"]
        if not page["has_more"]:
            return
        after = {"after_id": page["last_id"]}
    raise AssertionError("more than 50 pages")


def test_a_canceled_message_batch_answers_as_anthropics_types(relay_api, make_key, upstream) -> None:  # type: ignore[no-untyped-def]
    api = Api(relay_api.url + "/v1", make_key()["key"], anthropic=True)
    upstream.control("sk-batch-an", latency_ms=60_000)
    created = _batch(api.ok("POST", BATCHES, json={"requests": [
        {"custom_id": f"slow-{i}", "params": message(f"slow {i}")} for i in range(4)]}))
    canceling = _batch(api.ok("POST", f"{BATCHES}/{created['id']}/cancel"))
    assert canceling["processing_status"] in ("canceling", "ended") and canceling["cancel_initiated_at"]
    done = until(lambda: _batch(api.ok("GET", f"{BATCHES}/{created['id']}")),
                 lambda batch: batch["processing_status"] == "ended")
    for line in api.call("GET", f"{BATCHES}/{done['id']}/results").content.splitlines():
        assert check.anthropic("MessageBatchIndividualResponse", json.loads(line))["result"]["type"] == "canceled"


def test_every_error_of_the_message_batch_routes_is_anthropics_error_object(relay_api, key) -> None:  # type: ignore[no-untyped-def]
    stranger = Api(relay_api.url + "/v1", "rk_not-a-key", anthropic=True)
    for method, suffix in (("POST", ""), ("GET", ""), ("GET", "/msgbatch_" + "0" * 32),
                           ("POST", "/msgbatch_" + "0" * 32 + "/cancel"), ("DELETE", "/msgbatch_" + "0" * 32)):
        _error(stranger.call(method, BATCHES + suffix, json={}), 401, "authentication_error")
    api = Api(relay_api.url + "/v1", key, anthropic=True)
    _error(api.call("GET", BATCHES, params={"limit": 0}), 400, "invalid_request_error")
    _error(api.call("POST", BATCHES, data=b"{not json", headers={"content-type": "application/json"}), 400,
           "invalid_request_error")
    _error(api.call("POST", BATCHES, json={"requests": [{"custom_id": "x", "params": {}}]}), 400,
           "invalid_request_error")


def test_the_live_messages_route_answers_as_anthropics_types_with_its_header_names(relay_api, make_key) -> None:  # type: ignore[no-untyped-def]
    api = Api(relay_api.url + "/v1", make_key()["key"], anthropic=True)
    check.anthropic("Message", api.ok("POST", "/messages", json=message("hello")))
    models = api.ok("GET", "/models")  # under /v1, which OpenAI's SDK calls too: told apart by anthropic-version
    check.anthropic("MessageBatchList", {**models, "data": []})  # the same page envelope as the batches' list
    assert models["data"] and all(check.anthropic("ModelInfo", model) for model in models["data"])
    _error(api.call("POST", "/messages", json=message("hello", model="no-such-model")), 404, "not_found_error")
    limited = Api(relay_api.url + "/anthropic/v1", make_key("limited-contract")["key"], anthropic=True)
    answers = [limited.call("POST", "/messages", json=message("hello")) for _ in range(2)]  # 1 request an hour
    refused = answers[-1]
    _error(refused, 429, "rate_limit_error")
    names = {name.lower() for name in refused.headers}
    assert {"anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining",
            "anthropic-ratelimit-requests-reset"} <= names and not any(n.startswith("x-ratelimit") for n in names)
    _at(refused.headers["anthropic-ratelimit-requests-reset"])
