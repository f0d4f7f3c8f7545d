"""Traces exported for real: Relay's OTLP/HTTP exporter sends to a receiver bound to port 0 in this process, which
decodes the protobuf; the fake upstream records the `traceparent` each call came with. A live call continues the
caller's trace with its spans in the right parentage, a retried key attempt is two spans, the upstream's parent is
its attempt's client span, and no secret or prompt is in any attribute."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
import requests

from app.runtime import Runtime
from devtools.otlp_receiver import OtlpReceiver, ReceivedSpan
from devtools.processes import start_api
from tests.observability.tracing_helpers import attribute_texts, by_name, one, parent_of

pytestmark = pytest.mark.integration
PROMPT = "a prompt that must never reach a span " + secrets.token_hex(4)


def _chat(traced: tuple[Any, Runtime], key: str, headers: dict[str, str] | None = None) -> Any:
    body = {"model": "tr-gpt", "messages": [{"role": "user", "content": PROMPT}]}
    res = traced[0].test_client().post("/v1/chat/completions", json=body,
                                       headers={"Authorization": f"Bearer {key}", **(headers or {})})
    assert res.status_code == 200, res.json
    return res


def _trace(receiver: OtlpReceiver, runtime: Runtime, trace_id: str, attempts: int) -> list[ReceivedSpan]:
    assert runtime.services["tracing"].flush()
    spans = receiver.wait_for(lambda spans: len(by_name(spans, "relay.attempt", trace_id)) >= attempts
                              and by_name(spans, "relay.usage", trace_id) != [])
    return [s for s in spans if s.trace_id == trace_id]


def test_a_live_call_continues_the_callers_trace_with_its_spans_and_sends_the_upstream_its_parent(
        traced, relay_key, receiver, traced_upstream) -> None:  # type: ignore[no-untyped-def]
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    since = max([r["seq"] for r in traced_upstream.requests()] or [0])
    _chat(traced, relay_key, {"traceparent": f"00-{trace_id}-{caller_span}-01"})
    spans = _trace(receiver, traced[1], trace_id, 1)

    server = one(spans, "POST /v1/chat/completions")
    assert server.kind == "server" and server.parent_id == caller_span and server.service == "relay-api-test"
    assert server.attributes["http.response.status_code"] == 200
    route, attempt, usage = one(spans, "relay.route"), one(spans, "relay.attempt"), one(spans, "relay.usage")
    assert route.parent_id == attempt.parent_id == usage.parent_id == server.span_id
    assert route.attributes["gen_ai.request.model"] == "tr-gpt" and route.attributes["relay.policy"] == "tr-main"
    client = one(spans, "chat gpt-4o-mini")
    assert client.kind == "client" and client.parent_id == attempt.span_id
    assert client.attributes["gen_ai.request.model"] == "gpt-4o-mini"
    assert client.attributes["http.response.status_code"] == 200
    assert usage.attributes["gen_ai.usage.input_tokens"] > 0 and usage.attributes["gen_ai.usage.output_tokens"] > 0
    [call] = traced_upstream.requests(since=since)
    assert parent_of(call["traceparent"]) == (trace_id, client.span_id)


def test_a_retried_key_attempt_is_two_spans_each_with_its_own_upstream_parent(
        traced, relay_key, receiver, traced_upstream) -> None:  # type: ignore[no-untyped-def]
    traced_upstream.control("sk-tr-first", mode="fail", fail_status=503, times=1)
    since = max([r["seq"] for r in traced_upstream.requests()] or [0])
    trace_id = secrets.token_hex(16)
    _chat(traced, relay_key, {"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"})
    spans = _trace(receiver, traced[1], trace_id, 2)

    first, second = sorted(by_name(spans, "relay.attempt"), key=lambda s: s.attributes["relay.attempt"])
    assert (first.attributes["relay.attempt"], second.attributes["relay.attempt"]) == (1, 2)
    assert first.span_id != second.span_id and first.parent_id == second.parent_id
    assert first.error and first.attributes["error.type"] == "503" and not second.error
    assert first.attributes["relay.key.id"] != second.attributes["relay.key.id"]
    clients = {s.parent_id: s for s in spans if s.kind == "client"}
    assert set(clients) == {first.span_id, second.span_id}
    calls = traced_upstream.requests(since=since)
    assert [c["key"] for c in calls] == ["sk-tr-first", "sk-tr-second"]
    assert [parent_of(c["traceparent"]) for c in calls] == [(trace_id, clients[a.span_id].span_id)
                                                            for a in (first, second)]


def test_without_a_callers_traceparent_a_live_call_starts_its_own_trace(
        traced, relay_key, receiver) -> None:  # type: ignore[no-untyped-def]
    res = _chat(traced, relay_key, {"x-request-id": "tracing-" + secrets.token_hex(8)})
    request_id = res.headers["x-request-id"]
    assert traced[1].services["tracing"].flush()
    spans = receiver.wait_for(lambda spans: any(s.attributes.get("relay.request_id") == request_id for s in spans))
    [server] = [s for s in spans if s.attributes.get("relay.request_id") == request_id]
    assert server.parent_id == "" and len(server.trace_id) == 32


def test_a_malformed_traceparent_is_ignored_and_the_call_starts_its_own_trace(
        traced, relay_key, receiver) -> None:  # type: ignore[no-untyped-def]
    request_id = "tracing-" + secrets.token_hex(8)
    _chat(traced, relay_key, {"x-request-id": request_id, "traceparent": "00-not-a-trace-context-\u0000"})
    assert traced[1].services["tracing"].flush()
    spans = receiver.wait_for(lambda spans: any(s.attributes.get("relay.request_id") == request_id for s in spans))
    [server] = [s for s in spans if s.attributes.get("relay.request_id") == request_id]
    assert server.parent_id == "" and "not" not in server.trace_id


def test_no_span_attribute_holds_a_secret_or_a_prompt(traced, relay_key, receiver, settings) -> None:  # type: ignore[no-untyped-def]
    _chat(traced, relay_key)
    assert traced[1].services["tracing"].flush()
    texts = attribute_texts(receiver.spans())
    assert any("tr-gpt" in t for t in texts)  # the attributes were read
    for secret in ("sk-tr-first", "sk-tr-second", relay_key, settings.admin_token, settings.secret_key, PROMPT,
                   "must never reach"):
        assert not any(secret in t for t in texts), f"a span attribute holds {secret[:12]}..."


def test_a_relay_api_process_under_gunicorn_exports_a_streamed_calls_trace_from_the_standard_variables(
        settings_env, relay_key, receiver, tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = {**settings_env, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SERVICE_NAME": "relay-api-process",
           "OTEL_BSP_SCHEDULE_DELAY": "100"}
    api = start_api(env, tmp_path)
    try:
        trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
        body = {"model": "tr-gpt", "stream": True, "messages": [{"role": "user", "content": PROMPT}]}
        res = requests.post(api.url + "/v1/chat/completions", json=body, timeout=30, headers={
            "Authorization": f"Bearer {relay_key}", "traceparent": f"00-{trace_id}-{caller_span}-01"})
        assert res.status_code == 200 and "data:" in res.text
        spans = [s for s in receiver.wait_for(lambda spans: any(
            s.trace_id == trace_id and s.kind == "server" for s in spans)) if s.trace_id == trace_id]
    finally:
        api.stop()
    server = one(spans, "POST /v1/chat/completions")
    assert server.service == "relay-api-process" and server.parent_id == caller_span
    usage = one(spans, "relay.usage")  # written when the stream ended, still under the call's server span
    assert usage.parent_id == server.span_id and usage.attributes["gen_ai.usage.output_tokens"] > 0
    assert one(spans, "chat gpt-4o-mini").parent_id == one(spans, "relay.attempt").span_id
