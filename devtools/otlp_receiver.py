"""An OTLP/HTTP trace receiver for the tests and the bench: a real HTTP server on a loopback port the system picks
(port 0), in a thread of the process that starts it. It decodes every `POST /v1/traces` (an
ExportTraceServiceRequest in protobuf, gzip or not) into plain span records, so a test reads what Relay's
exporters really sent: names, ids, parentage, links, attributes, the service that sent it.

    receiver = OtlpReceiver().start()   # export to receiver.url (OTEL_EXPORTER_OTLP_ENDPOINT)
    spans = receiver.wait_for(lambda spans: any(s.name == "relay.attempt" for s in spans))

The bench runs it in a process of its own, keeping only counts per span name (`python -m devtools.otlp_receiver`
prints its port; `GET /_control/counts`, `POST /_control/clear`), so decoding takes no CPU from its clients:
ReceiverProcess drives it.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from devtools.processes import ROOT

KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as an exporter sent it (ids in lowercase hex; parent_id empty for a root)."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: str
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]  # (trace_id, span_id) of each linked span
    service: str
    error: bool  # the span's status is ERROR
    events: tuple[str, ...] = field(default=())  # the names of its events (an exception: "exception")
    event_attributes: tuple[dict[str, Any], ...] = field(default=())


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one ExportTraceServiceRequest."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(ReceivedSpan(
                    trace_id=span.trace_id.hex(), span_id=span.span_id.hex(), parent_id=span.parent_span_id.hex(),
                    name=span.name, kind=KINDS.get(span.kind, str(span.kind)),
                    attributes={kv.key: _value(kv.value) for kv in span.attributes},
                    links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
                    service=str(resource.get("service.name", "")), error=span.status.code == 2,
                    events=tuple(e.name for e in span.events),
                    event_attributes=tuple({kv.key: _value(kv.value) for kv in e.attributes} for e in span.events)))
    return spans


class OtlpReceiver:
    """The receiver: start() binds it; spans() is everything received so far, oldest first."""

    def __init__(self, *, keep: bool = True) -> None:
        self._lock = threading.Lock()
        self._keep = keep  # keep the spans, or only count them by name
        self._spans: list[ReceivedSpan] = []
        self.counts: Counter[str] = Counter()
        self.requests = 0  # export requests received
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        """The base URL to give as OTEL_EXPORTER_OTLP_ENDPOINT (the traces go to its /v1/traces)."""
        assert self._server is not None, "the receiver is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> OtlpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_GET(self) -> None:
                if self.path != "/_control/counts":
                    self._answer(404, b"")
                    return
                with receiver._lock:
                    counts = json.dumps(receiver.counts).encode()
                self._answer(200, counts)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == "/_control/clear":
                    receiver.clear()
                    self._answer(200, b"{}")
                    return
                if self.path != "/v1/traces":
                    self._answer(404, b"")
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver._add(decode(body))
                self._answer(200, ExportTraceServiceResponse().SerializeToString())

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True).start()
        return self

    def _add(self, spans: list[ReceivedSpan]) -> None:
        with self._lock:
            if self._keep:
                self._spans += spans
            self.counts.update(s.name for s in spans)
            self.requests += 1

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def clear(self) -> None:
        with self._lock:
            self._spans.clear()
            self.counts.clear()

    def wait_for(self, done: Callable[[list[ReceivedSpan]], bool], timeout: float = 60) -> list[ReceivedSpan]:
        """The spans received, once DONE says they are all there; AssertionError after TIMEOUT seconds."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans()
            if done(spans):
                return spans
            if time.monotonic() > deadline:
                names = sorted({s.name for s in spans})
                raise AssertionError(f"the spans wanted did not arrive in {timeout}s; got {len(spans)}: {names}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class ReceiverProcess:
    """A counting receiver in a process of its own (the bench's): start() returns once it told its port."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> ReceiverProcess:
        self.proc = subprocess.Popen([sys.executable, "-m", "devtools.otlp_receiver"], cwd=ROOT,
                                     stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self.stop()
            raise RuntimeError("the OTLP receiver did not start")
        return self

    def counts(self) -> dict[str, int]:
        """Spans received so far, by name."""
        return requests.get(self.url + "/_control/counts", timeout=30).json()  # type: ignore[no-any-return]

    def clear(self) -> None:
        requests.post(self.url + "/_control/clear", timeout=30).raise_for_status()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


def main() -> int:
    """Serve on a port the system picks, counting spans; print the URL, then run until killed."""
    receiver = OtlpReceiver(keep=False).start()
    print(receiver.url, flush=True)
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
