"""Every answer of the OpenAI-compatible routes, driven through their flows against a real `relay api` and real
workers, validated against OpenAI's published OpenAPI document (tests/conformance/contracts): bodies, error
objects (whole, with `param` where a parameter is at fault), `x-request-id`, `retry-after` on a 429."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devtools.waiting import until
from tests.batches.provider_helpers import chat, jsonl
from tests.conformance import check
from tests.conformance.calls import Api

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fresh_upstream")]
ENDED = ("completed", "failed", "expired", "cancelled")
DAY = 24 * 3600


def _upload(api: Api, content: bytes, **form: str) -> Any:
    return check.openai("OpenAIFile", api.ok("POST", "/files", files={"file": ("in.jsonl", content)},
                                             data={"purpose": "batch", **form}))


def _create(api: Api, path: str, file_id: str, **extra: Any) -> Any:
    body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h", **extra}
    return check.openai("Batch", api.ok("POST", path, json=body))


def _error(res: Any, status: int, param: str | None = None) -> dict[str, Any]:
    assert res.status_code == status, (res.status_code, res.text[:300])
    error = check.openai("ErrorResponse", res.json())["error"]
    assert error["param"] == param, error
    return error  # type: ignore[no-any-return]


@pytest.mark.parametrize("prefix", ["/v1", "/openai/v1"])
def test_files_and_batches_answer_as_openais_document_through_a_whole_run(relay_api, make_key, prefix) -> None:  # type: ignore[no-untyped-def]
    api = Api(relay_api.url + prefix, make_key()["key"])
    empty = check.openai("ListFilesResponse", api.ok("GET", "/files"))
    assert (empty["data"], empty["first_id"], empty["last_id"]) == ([], "", "")
    content = jsonl([{"custom_id": "ok-1", **chat("one")}, {"custom_id": "ok-2", **chat("two")},
                     {"custom_id": "bad", **chat("three", model="no-such-model")}])
    upload = _upload(api, content, **{"expires_after[anchor]": "created_at", "expires_after[seconds]": "3600"})
    assert upload["expires_at"] == upload["created_at"] + 3600
    assert check.openai("OpenAIFile", api.ok("GET", f"/files/{upload['id']}")) == upload
    created = _create(api, "/batches", upload["id"], metadata={"job": "contract"},
                      output_expires_after={"anchor": "created_at", "seconds": 7200})
    assert created["expires_at"] == created["created_at"] + DAY  # the providers' 24 h
    done = until(lambda: check.openai("Batch", api.ok("GET", f"/batches/{created['id']}")),
                 lambda batch: batch["status"] in ENDED)
    assert done["status"] == "completed" and done["request_counts"] == {"total": 3, "completed": 2, "failed": 1}
    _pages(api, "/batches", "ListBatchesResponse")
    _pages(api, "/files", "ListFilesResponse")
    for kind, body_schema in (("output_file_id", "CreateChatCompletionResponse"), ("error_file_id", "ErrorResponse")):
        result_file = check.openai("OpenAIFile", api.ok("GET", f"/files/{done[kind]}"))
        assert result_file["purpose"] == "batch_output" and result_file["expires_at"] >= done["completed_at"] + 7200
        res = api.call("GET", f"/files/{done[kind]}/content")
        for line in map(json.loads, res.content.splitlines()):
            check.openai("BatchRequestOutput", line)
            check.openai(body_schema, line["response"]["body"])
    _error(api.call("POST", f"/batches/{done['id']}/cancel"), 409)
    deleted = check.openai("DeleteFileResponse", api.ok("DELETE", f"/files/{upload['id']}"))
    assert deleted == {"id": upload["id"], "object": "file", "deleted": True}
    _error(api.call("GET", f"/files/{upload['id']}"), 404)


def _pages(api: Api, path: str, schema: str) -> None:
    """Every page of PATH one item at a time, each a valid SCHEMA whose ids name its first and last items."""
    after: dict[str, str] = {}
    for _ in range(50):
        page = check.openai(schema, api.ok("GET", path, params={"limit": 1, **after}))
        assert len(page["data"]) <= 1 and page["first_id"] == page["last_id"]
        if not page["has_more"]:
            return
        after = {"after": page["last_id"]}
    raise AssertionError(f"{path}: more than 50 pages")


def test_a_cancelled_batch_answers_as_openais_document(relay_api, make_key, upstream) -> None:  # type: ignore[no-untyped-def]
    api = Api(relay_api.url + "/v1", make_key("slow")["key"])
    upstream.control("sk-batch-slow", latency_ms=60_000)
    upload = _upload(api, jsonl([{"custom_id": f"slow-{i}", **chat(f"slow {i}")} for i in range(6)]))
    created = _create(api, "/batches", upload["id"])
    cancelling = check.openai("Batch", api.ok("POST", f"/batches/{created['id']}/cancel"))
    assert cancelling["status"] in ("cancelling", "cancelled")
    done = until(lambda: check.openai("Batch", api.ok("GET", f"/batches/{created['id']}")),
                 lambda batch: batch["status"] in ENDED)
    assert done["status"] == "cancelled" and done["error_file_id"]
    for line in map(json.loads, api.call("GET", f"/files/{done['error_file_id']}/content").content.splitlines()):
        assert check.openai("BatchRequestOutput", line)["error"]["code"] == "batch_cancelled"


@pytest.mark.parametrize("path", ["/v1/batches", "/openai/v1/batches"])
def test_every_error_of_the_batch_routes_is_openais_whole_error_object(relay_api, key, path) -> None:  # type: ignore[no-untyped-def]
    stranger = Api(relay_api.url, "rk_not-a-key")
    for method, suffix in (("POST", ""), ("GET", ""), ("GET", "/batch_" + "0" * 32),
                           ("POST", "/batch_" + "0" * 32 + "/cancel")):
        _error(stranger.call(method, path + suffix, json={}), 401)
    api = Api(relay_api.url, key)
    _error(api.call("GET", path, params={"limit": 0}), 400, "limit")
    _error(api.call("POST", path, data=b"{not json", headers={"content-type": "application/json"}), 400)
    upload = _upload(Api(relay_api.url + "/v1", key), jsonl([{"custom_id": "a", **chat("a")}]))
    good = {"input_file_id": upload["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    refused = [({"endpoint": "/v1/embeddings"}, "endpoint"), ({"completion_window": "1h"}, "completion_window"),
               ({"output_expires_after": {"anchor": "created_at", "seconds": 10}}, "output_expires_after"),
               ({"output_expires_after": {"anchor": "bogus", "seconds": 3600}}, "output_expires_after")]
    for change, param in refused:
        _error(api.call("POST", path, json={**good, **change}), 400, param)


def test_an_upload_with_an_expiry_out_of_range_is_refused_naming_expires_after(relay_api, key) -> None:  # type: ignore[no-untyped-def]
    api = Api(relay_api.url + "/v1", key)
    for anchor, seconds in (("created_at", "10"), ("bogus", "3600"), ("created_at", "soon")):
        res = api.call("POST", "/files", files={"file": ("in.jsonl", b"{}\n")},
                       data={"purpose": "batch", "expires_after[anchor]": anchor, "expires_after[seconds]": seconds})
        _error(res, 400, "expires_after")
    _error(api.call("GET", "/files", params={"order": "sideways"}), 400, "order")


def test_the_live_routes_answer_as_openais_document(relay_api, make_key, upstream) -> None:  # type: ignore[no-untyped-def]
    api = Api(relay_api.url + "/v1", make_key()["key"])
    check.openai("CreateChatCompletionResponse", api.ok("POST", "/chat/completions", json=chat("hello")))
    check.openai("Response", api.ok("POST", "/responses", json={"model": "gpt-5-responses", "input": "hello"}))
    check.openai("ListModelsResponse", api.ok("GET", "/models"))
    _error(api.call("POST", "/chat/completions", json=chat("hello", model="no-such-model")), 404)
    limited = Api(relay_api.url + "/v1", make_key("failing")["key"])
    upstream.control("sk-batch-fail", mode="rate_limited", retry_after=5)
    res = limited.call("POST", "/chat/completions", json=chat("hello"))
    assert res.headers["retry-after"] == "5"
    assert _error(res, 429)["type"] == "rate_limit_error"
