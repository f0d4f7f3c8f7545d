"""Streamed (SSE) answers: passed through chunk by chunk as they arrive, usage read on the way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from adapters.base import StreamUsageReader
from app.pipeline.plan import Plan
from app.pipeline.types import InferenceCall, InferenceResult
from app.pipeline.upstream import UpstreamIOError, UpstreamResponse

if TYPE_CHECKING:
    from app.pipeline.record import Recorder


def stream_result(call: InferenceCall, plan: Plan, recorder: Recorder, response: UpstreamResponse) -> InferenceResult:
    """A result whose stream yields the upstream's SSE bytes and records usage when it ends."""
    return InferenceResult(status=response.status_code, stream=_relay(call, plan, recorder, response),
                           content_type="text/event-stream",
                           headers=recorder.reservation.headers() if recorder.reservation else {})


def _relay(call: InferenceCall, plan: Plan, recorder: Recorder, response: UpstreamResponse) -> Iterator[bytes]:
    reader = plan.adapter.stream_usage_reader()
    translate = _canonical_translator(plan) if plan.canonical else None
    captured = bytearray()
    cap = recorder.runtime.settings.payload_log_max_bytes
    error_code: str | None = None
    try:
        for chunk in response.iter_content():
            if not chunk:
                continue
            reader.feed(chunk)
            if len(captured) <= cap:
                captured += chunk[: cap + 1 - len(captured)]
            out = translate(chunk) if translate else chunk
            if out:
                yield out
        if translate:
            tail = translate(b"")
            if tail:
                yield tail
    except UpstreamIOError:
        error_code = "upstream_stream_broken"
    except GeneratorExit:
        error_code = "client_disconnected"
        _read_to_the_end(response, reader)
        raise
    finally:
        response.close()
        recorder.record(status=response.status_code, error_code=error_code, usage=reader.usage(),
                        upstream_status=response.status_code, streamed=True, payload=(call.body, bytes(captured)),
                        counted=reader.completed())


def _read_to_the_end(response: UpstreamResponse, reader: StreamUsageReader) -> None:
    """The client left: keep reading the upstream (which bills the whole answer) until its usage is known, so
    the event and the token budget get the real counts. A broken upstream leaves them unknown."""
    try:
        for chunk in response.iter_content():
            reader.feed(chunk)
            if reader.completed():
                return
    except UpstreamIOError:
        return


def _canonical_translator(plan: Plan):  # type: ignore[no-untyped-def]
    from adapters.canonical import stream_translator

    return stream_translator(plan.adapter.shape)
