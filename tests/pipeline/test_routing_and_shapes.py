"""Routing errors, shape rules and pass-through on the live path (real Postgres, real fake upstream)."""

from __future__ import annotations

import pytest

from tests.pipeline.helpers import CHAT, chat, usage_event

pytestmark = pytest.mark.integration


def test_a_chat_completion_passes_through_with_only_the_model_rewritten(client, make_key, upstream, runtime) -> None:
    res = chat(client, make_key())
    assert res.status_code == 200, res.json
    assert res.json["object"] == "chat.completion"
    sent = upstream.requests()[-1]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["body"]["model"] == "gpt-4o-mini-2024"
    assert sent["body"]["messages"] == CHAT["messages"]
    event = usage_event(runtime, res.headers["x-request-id"])
    assert event["source"] == "live" and event["status"] == 200 and event["error_code"] is None
    assert event["host_name"] == "openai" and event["host_key_name"] == "oa-1"
    assert event["input_tokens"] == res.json["usage"]["prompt_tokens"] > 0
    assert event["output_tokens"] == res.json["usage"]["completion_tokens"] > 0


def test_usage_cost_is_priced_from_the_binding_in_nano_dollars(client, make_key, runtime) -> None:
    res = chat(client, make_key())
    event = usage_event(runtime, res.headers["x-request-id"])
    usage = res.json["usage"]
    cached = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    expected = (usage["prompt_tokens"] - cached) * 150 + cached * 75 + usage["completion_tokens"] * 600
    assert event["cost_nanos"] == expected


def test_an_unpriced_binding_records_no_cost_rather_than_zero(client, make_key, runtime) -> None:
    res = chat(client, make_key(), {**CHAT, "model": "llama-local"})
    assert res.status_code == 200
    assert usage_event(runtime, res.headers["x-request-id"])["cost_nanos"] is None


@pytest.mark.parametrize(("model", "policy", "status", "code"), [
    ("no-such-model", "main", 404, "model_not_found"),
    ("claude-sonnet", "narrow", 403, "model_not_allowed"),
    ("retired", "main", 503, "no_binding"),
])
def test_routing_errors_have_stable_codes_and_a_usage_event(client, make_key, runtime, upstream,
                                                            model, policy, status, code) -> None:
    res = chat(client, make_key(policy), {**CHAT, "model": model})
    assert res.status_code == status
    assert res.json["error"]["code"] == code
    assert usage_event(runtime, res.headers["x-request-id"])["error_code"] == code
    assert upstream.requests() == []


def test_a_cross_shape_live_request_is_refused_naming_both_shapes(client, make_key, upstream) -> None:
    body = {"model": "gpt-4o-mini", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    res = client.post("/v1/messages", json=body, headers={"x-api-key": make_key(), "anthropic-version": "2023-06-01"})
    assert res.status_code == 400
    assert res.json["type"] == "error"
    assert res.json["error"]["code"] == "cross_shape_unsupported"
    assert "anthropic" in res.json["error"]["message"] and "openai" in res.json["error"]["message"]
    assert upstream.requests() == []


def test_a_responses_request_on_the_openai_hosts_chat_binding_goes_to_v1_responses(client, make_key, upstream) -> None:
    res = client.post("/v1/responses", json={"model": "gpt-4o-mini", "input": "hello"},
                      headers={"Authorization": f"Bearer {make_key()}"})
    assert res.status_code == 200, res.json
    assert [r["path"] for r in upstream.requests()] == ["/v1/responses"]


def test_a_responses_request_on_another_hosts_chat_binding_is_refused(client, make_key, upstream) -> None:
    res = client.post("/v1/responses", json={"model": "llama-local", "input": "hello"},
                      headers={"Authorization": f"Bearer {make_key()}"})
    assert res.status_code == 400
    assert res.json["error"]["code"] == "cross_shape_unsupported"
    assert upstream.requests() == []


def test_the_host_key_goes_upstream_and_caller_credentials_never_do(client, make_key, upstream) -> None:
    key = make_key()
    res = chat(client, key, **{"x-api-key": key, "anthropic-version": "2023-06-01"})
    assert res.status_code == 200
    sent = upstream.requests()[-1]
    headers = {k.lower(): v for k, v in sent["headers"].items()}
    assert headers["authorization"] == "Bearer sk-oa-1"
    assert key not in str(sent)
    assert "x-api-key" not in headers


def test_an_anthropic_request_is_sent_with_x_api_key_and_version(client, make_key, upstream) -> None:
    body = {"model": "claude-sonnet", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
    res = client.post("/anthropic/v1/messages", json=body, headers={"x-api-key": make_key()})
    assert res.status_code == 200, res.json
    assert res.json["type"] == "message"
    headers = {k.lower(): v for k, v in upstream.requests()[-1]["headers"].items()}
    assert headers["x-api-key"] == "sk-an-1" and headers["anthropic-version"]
    assert "authorization" not in headers


def test_embeddings_are_proxied(client, make_key, upstream) -> None:
    res = client.post("/v1/embeddings", json={"model": "text-embedding", "input": "hi"},
                      headers={"Authorization": f"Bearer {make_key()}"})
    assert res.status_code == 200, res.json
    assert res.json["data"][0]["embedding"]
    assert upstream.requests()[-1]["path"] == "/v1/embeddings"


@pytest.mark.parametrize("model", ["gpt-4o-mini", "claude-sonnet", "gpt-5-responses"])
def test_generate_translates_the_canonical_shape_to_each_adapter_and_back(client, make_key, model) -> None:
    res = client.post("/v1/generate", json={"model": model, "input": "hello there", "instructions": "be brief",
                                            "max_tokens": 30}, headers={"Authorization": f"Bearer {make_key()}"})
    assert res.status_code == 200, res.json
    assert res.json["output_text"]
    assert res.json["usage"]["input_tokens"] > 0


def test_models_lists_what_the_policy_grants(client, make_key) -> None:
    res = client.get("/v1/models", headers={"Authorization": f"Bearer {make_key('narrow')}"})
    assert res.status_code == 200
    assert {m["id"] for m in res.json["data"]} == {"gpt-4o-mini", "gpt-5-responses"}


@pytest.mark.parametrize(("data", "content_type", "status", "code"), [
    (b"{not json", "application/json", 400, "invalid_json"),
    (b"[1, 2]", "application/json", 400, "invalid_body"),
    (b"model=x", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
    (b'{"model": "gpt-4o-mini"}', "application/json", 400, "invalid_request"),
])
def test_bad_bodies_get_a_4xx_in_the_callers_shape(client, make_key, data, content_type, status, code) -> None:
    res = client.post("/v1/chat/completions", data=data, content_type=content_type,
                      headers={"Authorization": f"Bearer {make_key()}"})
    assert res.status_code == status
    assert res.json["error"]["code"] == code
    assert res.json["error"]["type"]


def test_a_missing_credential_is_a_401_in_the_callers_shape(client) -> None:
    res = client.post("/v1/messages", json={})
    assert res.status_code == 401
    assert res.json["type"] == "error" and res.json["error"]["type"] == "authentication_error"


def test_a_live_body_over_the_limit_is_a_413_in_the_callers_shape(client, make_key, settings, upstream) -> None:
    data = b'{"model": "gpt-4o-mini", "pad": "' + b"x" * settings.max_request_bytes + b'"}'
    res = client.post("/v1/messages", data=data, content_type="application/json", headers={"x-api-key": make_key()})
    assert res.status_code == 413
    assert res.json["error"]["code"] == "payload_too_large"
    assert upstream.requests() == []
