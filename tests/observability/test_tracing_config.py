"""When tracing is on, read from the SDK's standard variables, and where the spans go."""

from __future__ import annotations

from app.observability.tracing import NO_SPAN, Tracing, traces_endpoint, tracing_configured


def test_tracing_is_on_only_with_an_otlp_endpoint_and_the_sdk_not_disabled() -> None:
    assert not tracing_configured({}) and not tracing_configured({"OTEL_SERVICE_NAME": "relay"})
    assert tracing_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing_configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"})
    assert not tracing_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "TRUE"})


def test_the_traces_go_to_the_endpoints_v1_traces_unless_the_traces_endpoint_is_named() -> None:
    assert traces_endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/"}) == "http://127.0.0.1:4318/v1/traces"
    assert traces_endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9/t"}) == "http://127.0.0.1:9/t"


def test_tracing_off_hands_out_the_one_span_that_does_nothing() -> None:
    tracing = Tracing.from_env({})
    assert not tracing.enabled
    submit = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    assert tracing.span("x") is NO_SPAN and tracing.linked_root("y", submit) is NO_SPAN
    assert tracing.traceparent({"relay.batch.id": "b"}) is None and tracing.current_context() is None
    headers: dict[str, str] = {}
    tracing.inject(headers)
    assert headers == {} and tracing.flush()
