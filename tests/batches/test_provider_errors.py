"""Bad requests to the provider batch APIs: a 4xx in that API's error shape, with Relay's stable code."""

from __future__ import annotations

from typing import Any

import pytest

MISSING_FILE = "file-" + "0" * 32


def _openai_error(res: Any, status: int, code: str) -> dict[str, Any]:
    assert res.status_code == status, res.get_data(as_text=True)
    error = res.json["error"]
    assert set(error) >= {"message", "type", "param", "code"} and error["code"] == code, error
    return error  # type: ignore[no-any-return]


def _anthropic_error(res: Any, status: int, code: str) -> dict[str, Any]:
    assert res.status_code == status, res.get_data(as_text=True)
    assert res.json["type"] == "error" and res.json["error"]["code"] == code, res.json
    return res.json["error"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("prefix", ["/v1", "/openai/v1"])
def test_file_uploads_that_are_not_a_batch_file_are_refused(client, key, prefix) -> None:  # type: ignore[no-untyped-def]
    auth = {"Authorization": f"Bearer {key}"}
    _openai_error(client.post(f"{prefix}/files", json={"file": "x"}, headers=auth), 400, "invalid_request")
    form = {"file": "not a file part", "purpose": "batch"}
    _openai_error(client.post(f"{prefix}/files", data=form, headers=auth), 400, "invalid_request")
    for bad in (MISSING_FILE, "file-nope", "nope", f"file-{'g' * 32}"):
        _openai_error(client.get(f"{prefix}/files/{bad}", headers=auth), 404, "file_not_found")
        _openai_error(client.get(f"{prefix}/files/{bad}/content", headers=auth), 404, "file_not_found")
        _openai_error(client.delete(f"{prefix}/files/{bad}", headers=auth), 404, "file_not_found")
    _openai_error(client.get(f"{prefix}/files", query_string={"order": "up"}, headers=auth), 400, "invalid_request")


@pytest.mark.parametrize("path", ["/v1/batches", "/openai/v1/batches"])
def test_an_openai_create_that_names_no_usable_file_is_refused_in_openais_shape(client, key, path) -> None:  # type: ignore[no-untyped-def]
    auth = {"Authorization": f"Bearer {key}"}
    body = {"input_file_id": MISSING_FILE, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    _openai_error(client.post(path, json=body, headers=auth), 404, "file_not_found")
    error = _openai_error(client.post(path, json={**body, "completion_window": "1h"}, headers=auth), 400,
                          "invalid_request")
    assert "completion_window" in error["message"]
    _openai_error(client.post(path, json={**body, "surprise": 1}, headers=auth), 400, "invalid_request")
    metadata = {f"k{i}": "v" for i in range(17)}
    _openai_error(client.post(path, json={**body, "metadata": metadata}, headers=auth), 400, "invalid_request")
    _openai_error(client.post(path, json={**body, "endpoint": "/v1/embeddings"}, headers=auth), 400,
                  "unsupported_endpoint")


def test_an_openai_create_holding_nan_is_refused_as_invalid_json_not_read(client, key) -> None:  # type: ignore[no-untyped-def]
    auth = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    body = (f'{{"input_file_id": "{MISSING_FILE}", "endpoint": "/v1/chat/completions", "completion_window": "24h",'
            ' "output_expires_after": {"seconds": NaN}}')
    _openai_error(client.post("/openai/v1/batches", data=body, headers=auth), 400, "invalid_json")
    relay = client.post("/v1/batches", data=body, headers=auth)  # not a create Relay can read: its own submit's
    assert relay.status_code == 400 and relay.json["error"]["code"] == "invalid_json", relay.json


def test_unknown_batch_ids_answer_404_in_openais_shape(client, key) -> None:  # type: ignore[no-untyped-def]
    auth = {"Authorization": f"Bearer {key}"}
    for path in (f"/v1/batches/batch_{'0' * 32}", f"/openai/v1/batches/batch_{'0' * 32}", "/openai/v1/batches/x"):
        _openai_error(client.get(path, headers=auth), 404, "batch_not_found")
        _openai_error(client.post(path + "/cancel", headers=auth), 404, "batch_not_found")
    relay = client.get(f"/v1/batches/{'0' * 8}-0000-4000-8000-{'0' * 12}", headers=auth)  # OpenAI's object too
    assert _openai_error(relay, 404, "batch_not_found")["message"] == "batch not found"
    assert client.get("/v1/batches", query_string={"format": "xml"}, headers=auth).status_code == 400


@pytest.mark.parametrize("prefix", ["/v1", "/anthropic/v1"])
def test_bad_message_batch_requests_are_refused_in_anthropics_shape(client, key, prefix) -> None:  # type: ignore[no-untyped-def]
    auth = {"x-api-key": key}
    path = f"{prefix}/messages/batches"
    _anthropic_error(client.post(path, data=b"{", content_type="application/json", headers=auth), 400,
                     "invalid_json")
    _anthropic_error(client.post(path, data=b"x", content_type="text/plain", headers=auth), 415,
                     "unsupported_media_type")
    _anthropic_error(client.post(path, json={"requests": []}, headers=auth), 400, "invalid_batch")
    _anthropic_error(client.post(path, json={"requests": [{"custom_id": "a"}]}, headers=auth), 400, "invalid_batch")
    _anthropic_error(client.get(path, query_string={"limit": 0}, headers=auth), 400, "invalid_request")
    _anthropic_error(client.get(path, query_string={"after_id": "a", "before_id": "b"}, headers=auth), 400,
                     "invalid_request")
    for method, suffix in (("GET", ""), ("DELETE", ""), ("POST", "/cancel"), ("GET", "/results")):
        _anthropic_error(client.open(f"{path}/msgbatch_nope{suffix}", method=method, headers=auth), 404,
                         "batch_not_found")
    _anthropic_error(client.get(path, headers={"x-api-key": "rk_wrong"}), 401, "invalid_credential")
