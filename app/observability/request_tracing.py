"""The API's server spans: one per POST request (inference, batch submits), continuing the caller's trace."""

from __future__ import annotations

from flask import Flask, Response, g, request

from app.observability.tracing import Tracing


def install_request_tracing(app: Flask, tracing: Tracing) -> None:
    """With tracing on: a server span around every POST request of APP, named by its route template; a streamed
    answer's span ends when its body is closed (its usage written)."""
    if not tracing.enabled:
        return

    @app.before_request
    def _start_span() -> None:
        if request.method != "POST":
            return
        route = request.url_rule.rule if request.url_rule is not None else "unmatched"
        g.trace_span, g.trace_token = tracing.start_server(f"POST {route}", _trace_headers(), {
            "http.request.method": "POST", "http.route": route, "url.scheme": request.scheme,
            "relay.request_id": getattr(g, "request_id", "")})

    @app.after_request
    def _note_status(response: Response) -> Response:
        span = g.get("trace_span")
        if span is not None:
            span.set_attribute("http.response.status_code", response.status_code)
            if response.status_code >= 500:
                tracing.failed(span, str(response.status_code))
            if response.is_streamed:
                g.trace_span = None
                response.call_on_close(span.end)
        return response

    @app.teardown_request
    def _end_span(exc: BaseException | None) -> None:
        span, token = g.pop("trace_span", None), g.pop("trace_token", None)
        if span is not None:
            span.end()
        tracing.detach(token)


def _trace_headers() -> dict[str, str]:
    return {name: value for name in ("traceparent", "tracestate") if (value := request.headers.get(name))}
