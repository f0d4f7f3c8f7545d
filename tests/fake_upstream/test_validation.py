"""The fake upstream refuses what the real APIs refuse, in each API's error shape."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from devtools.fake_upstream.harness import FakeUpstream

pytestmark = pytest.mark.integration  # real Postgres, RabbitMQ or fake upstream

OPENAI_AUTH = {"Authorization": "Bearer sk-test"}
ANTHROPIC_AUTH = {"x-api-key": "sk-ant", "anthropic-version": "2023-06-01"}
USER = [{"role": "user", "content": "hi"}]


def post(upstream: FakeUpstream, path: str, body: Any, headers: dict[str, str]) -> requests.Response:
    data = body if isinstance(body, bytes) else None
    return requests.post(upstream.url + path, json=None if data else body, data=data, headers=headers, timeout=10)


def openai_error(response: requests.Response) -> dict[str, Any]:
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error  # type: ignore[no-any-return]


def anthropic_error(response: requests.Response) -> dict[str, Any]:
    body = response.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    return body["error"]  # type: ignore[no-any-return]


def test_a_responses_body_sent_to_chat_completions_gets_400(upstream: FakeUpstream) -> None:
    response = post(upstream, "/v1/chat/completions", {"model": "gpt-5", "input": "hi"}, OPENAI_AUTH)
    assert response.status_code == 400
    error = openai_error(response)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "messages"
    assert error["code"] == "missing_required_parameter"


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": USER}),
    ("/v1/responses", {"input": "hi"}),
    ("/v1/embeddings", {"input": "hi"}),
])
def test_missing_model_gets_400_naming_the_param(upstream: FakeUpstream, path: str, body: dict[str, Any]) -> None:
    response = post(upstream, path, body, OPENAI_AUTH)
    assert response.status_code == 400
    assert openai_error(response)["param"] == "model"


@pytest.mark.parametrize("body,field", [
    ({"model": "gpt-4o", "messages": []}, "messages"),
    ({"model": "gpt-4o", "messages": [{"content": "no role"}]}, "messages[0].role"),
    ({"model": "gpt-4o", "messages": USER, "stream": "yes"}, "stream"),
])
def test_malformed_chat_bodies_get_400(upstream: FakeUpstream, body: dict[str, Any], field: str) -> None:
    response = post(upstream, "/v1/chat/completions", body, OPENAI_AUTH)
    assert response.status_code == 400
    assert openai_error(response)["param"] == field


def test_responses_without_input_gets_400(upstream: FakeUpstream) -> None:
    response = post(upstream, "/v1/responses", {"model": "gpt-5"}, OPENAI_AUTH)
    assert response.status_code == 400
    assert openai_error(response)["param"] == "input"


@pytest.mark.parametrize("body,missing", [
    ({"model": "c", "messages": USER}, "max_tokens"),
    ({"model": "c", "max_tokens": 10}, "messages"),
    ({"max_tokens": 10, "messages": USER}, "model"),
])
def test_anthropic_missing_fields_get_400_in_anthropic_shape(upstream: FakeUpstream, body: dict[str, Any],
                                                             missing: str) -> None:
    response = post(upstream, "/v1/messages", body, ANTHROPIC_AUTH)
    assert response.status_code == 400
    error = anthropic_error(response)
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith(missing)


def test_anthropic_without_version_header_gets_400(upstream: FakeUpstream) -> None:
    response = post(upstream, "/v1/messages", {"model": "c", "max_tokens": 5, "messages": USER}, {"x-api-key": "k"})
    assert response.status_code == 400
    assert "anthropic-version" in anthropic_error(response)["message"]


@pytest.mark.parametrize("path,headers,shape", [
    ("/v1/chat/completions", OPENAI_AUTH, "openai"),
    ("/v1/messages", ANTHROPIC_AUTH, "anthropic"),
])
def test_invalid_json_gets_400(upstream: FakeUpstream, path: str, headers: dict[str, str], shape: str) -> None:
    response = post(upstream, path, b"{not json", {**headers, "content-type": "application/json"})
    assert response.status_code == 400
    error = openai_error(response) if shape == "openai" else anthropic_error(response)
    assert error["type"] == "invalid_request_error"
    assert upstream.requests()[-1]["body"] == "{not json"


def test_missing_key_gets_401_in_each_shape(upstream: FakeUpstream) -> None:
    openai_response = post(upstream, "/v1/chat/completions", {"model": "m", "messages": USER}, {})
    assert openai_response.status_code == 401
    assert openai_error(openai_response)["type"] == "invalid_request_error"
    anthropic_response = post(upstream, "/v1/messages", {"model": "c", "max_tokens": 5, "messages": USER},
                              {"anthropic-version": "2023-06-01"})
    assert anthropic_response.status_code == 401
    assert anthropic_error(anthropic_response)["type"] == "authentication_error"
    assert upstream.stats()["by_key"] == {"(none)": 2}


def test_auth_is_checked_before_the_body(upstream: FakeUpstream) -> None:
    upstream.control("sk-test", mode="invalid")
    response = post(upstream, "/v1/chat/completions", {"input": "not even chat"}, OPENAI_AUTH)
    assert response.status_code == 401
    assert openai_error(response)["code"] == "invalid_api_key"


def test_unknown_paths_get_404_like_openai(upstream: FakeUpstream) -> None:
    response = requests.get(upstream.url + "/v1/chat/completions", headers=OPENAI_AUTH, timeout=10)
    assert response.status_code == 404
    assert openai_error(response)["message"] == "Invalid URL (GET /v1/chat/completions)"


def test_models_list_follows_the_callers_shape(upstream: FakeUpstream) -> None:
    anthropic_list = requests.get(upstream.url + "/v1/models", headers=ANTHROPIC_AUTH, timeout=10).json()
    assert anthropic_list["data"][0]["type"] == "model" and "has_more" in anthropic_list
    openai_list = requests.get(upstream.url + "/v1/models", headers=OPENAI_AUTH, timeout=10).json()
    assert openai_list["object"] == "list" and openai_list["data"][0]["object"] == "model"
