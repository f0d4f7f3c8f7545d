"""OpenTelemetry tracing, off unless the SDK's standard environment names an OTLP endpoint.

On: `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and `OTEL_SDK_DISABLED` is not
`true`; spans go over OTLP/HTTP (protobuf) through a batching processor, and the SDK reads the rest of its
standard variables itself (`OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER[_ARG]`, `OTEL_EXPORTER_OTLP_HEADERS`,
`OTEL_BSP_*`, ...). Off: the SDK is never imported, and every span below is one shared object that does nothing.
Contexts cross processes as W3C `traceparent` strings: in HTTP headers, in a batch's row, in a Dramatiq message's
options.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider

    from app.runtime import Runtime

TRACING_SERVICE = "tracing"
TRACER_NAME = "relay"
Attributes = Mapping[str, "str | int | float | bool"]


class SpanLike(Protocol):
    """What Relay's code does with a span: the SDK's spans, or NO_SPAN when tracing is off."""

    def set_attribute(self, key: str, value: Any) -> None: ...

    def end(self) -> None: ...


class _NoSpan:
    """The span of tracing off: a context manager and a span at once, doing nothing."""

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def end(self) -> None:
        return None

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


NO_SPAN = _NoSpan()


def tracing_configured(env: Mapping[str, str]) -> bool:
    """Whether ENV turns tracing on: an OTLP endpoint is set and the SDK is not disabled."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def traces_endpoint(env: Mapping[str, str]) -> str:
    """The OTLP/HTTP traces URL, as the SDK's specification derives it from the two variables."""
    signal = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if signal:
        return signal
    return env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"


class Tracing:
    """This process's tracer (None: tracing is off). Made once per runtime by get_tracing()."""

    def __init__(self, provider: TracerProvider | None = None) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer(TRACER_NAME) if provider is not None else None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, service: str = "relay") -> Tracing:
        """Tracing as ENV (os.environ) configures it; SERVICE names the process when OTEL_SERVICE_NAME does not."""
        env = os.environ if env is None else env
        if not tracing_configured(env):
            return cls()
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or service})
        provider = TracerProvider(resource=resource)  # the sampler: OTEL_TRACES_SAMPLER, parent-based by default
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_endpoint(env))))
        return cls(provider)

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    def span(self, name: str, attributes: Attributes | None = None, *, kind: str = "internal",
             parent: Context | None = None) -> AbstractContextManager[SpanLike]:
        """A child of the current span (or of PARENT), current within the block; KIND: internal, client, server."""
        if self._tracer is None:
            return NO_SPAN
        from opentelemetry.trace import SpanKind

        return _typed_errors(self._tracer.start_as_current_span(name, context=parent, kind=SpanKind[kind.upper()],
                                                                attributes=attributes))

    def start_server(self, name: str, headers: Mapping[str, str],
                     attributes: Attributes | None = None) -> tuple[SpanLike, object]:
        """A server span continuing the caller's `traceparent` in HEADERS (a new trace without one), which may
        outlive the request's handler (a streamed answer): started and made current until detach(TOKEN); the caller
        ends it."""
        if self._tracer is None:
            return NO_SPAN, None
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        parent = TraceContextTextMapPropagator().extract(_carrier(headers))
        span = self._tracer.start_span(name, context=parent, kind=trace.SpanKind.SERVER, attributes=attributes)
        return span, context.attach(trace.set_span_in_context(span, parent))

    def detach(self, token: object) -> None:
        """Make current again what was before start_server()."""
        if self._tracer is None or token is None:
            return
        from opentelemetry import context

        context.detach(token)  # type: ignore[arg-type]

    def failed(self, span: SpanLike, error_type: str) -> None:
        """Mark SPAN as failed, with the stable code (or status) that says why."""
        if self._tracer is None:
            return
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", error_type)
        span.set_status(Status(StatusCode.ERROR))  # type: ignore[attr-defined]

    def linked_root(self, name: str, traceparent: str | None,
                    attributes: Attributes | None = None) -> AbstractContextManager[SpanLike]:
        """The root of a new trace, linked to the span TRACEPARENT names (a batch item's run, linked to its submit)."""
        if self._tracer is None:
            return NO_SPAN
        from opentelemetry.context import Context
        from opentelemetry.trace import Link, SpanKind, get_current_span
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        links = []
        if traceparent:
            linked = get_current_span(TraceContextTextMapPropagator().extract({"traceparent": traceparent}))
            if linked.get_span_context().is_valid:
                links.append(Link(linked.get_span_context()))
        return _typed_errors(self._tracer.start_as_current_span(name, context=Context(), kind=SpanKind.CONSUMER,
                                                                links=links, attributes=attributes))

    def current_context(self) -> Context | None:
        """The active context, to parent a span that starts later elsewhere (a stream's usage write)."""
        if self._tracer is None:
            return None
        from opentelemetry.context import get_current

        return get_current()

    def traceparent(self, attributes: Attributes | None = None) -> str | None:
        """The current span as a W3C `traceparent` (None when tracing is off or no span is active), after setting
        ATTRIBUTES on it (a batch's submit: its id, for the item traces that will link to it)."""
        if attributes:
            self.annotate(attributes)
        carrier: dict[str, str] = {}
        self.inject(carrier)
        return carrier.get("traceparent")

    def inject(self, headers: MutableMapping[str, str]) -> None:
        """Add the current span's `traceparent` (and `tracestate`) to HEADERS."""
        if self._tracer is None:
            return
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        TraceContextTextMapPropagator().inject(headers)

    def annotate(self, attributes: Attributes) -> None:
        """Set ATTRIBUTES on the current span."""
        if self._tracer is None:
            return
        from opentelemetry.trace import get_current_span

        get_current_span().set_attributes(dict(attributes))

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Export every ended span now; whether it was done in TIMEOUT_S."""
        return self._provider.force_flush(int(timeout_s * 1000)) if self._provider is not None else True

    def close(self) -> None:
        """Export what is left and stop (Runtime.close calls it)."""
        if self._provider is not None:
            self._provider.shutdown()


@contextmanager
def _typed_errors(started: AbstractContextManager[Any]) -> Iterator[SpanLike]:
    """STARTED's span, which an exception leaving the block marks with `error.type`: a RelayError's stable code,
    else the exception's class (the SDK records the exception and the error status)."""
    with started as span:
        try:
            yield span
        except BaseException as exc:
            span.set_attribute("error.type", getattr(exc, "code", None) or type(exc).__name__)
            raise


def _carrier(headers: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name in ("traceparent", "tracestate") if (value := headers.get(name))}


def get_tracing(runtime: Runtime) -> Tracing:
    """This process's tracing, built from the environment on first use."""
    return runtime.service(TRACING_SERVICE, Tracing.from_env)

