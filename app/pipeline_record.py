"""The pipeline's bookkeeping: the usage event, rate-limit tokens, breaker updates and payload logs,
written in one transaction when the call ends (or is rejected)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from psycopg import Connection

from adapters.base import Usage
from app import keypool, ratelimit
from app.catalog.model import HostKey
from app.errors import RelayError
from app.payload_log import PayloadLog, write_payload_log
from app.pipeline_types import InferenceCall, InferenceResult
from app.usage import UsageEvent, cost_nanos, record_usage

if TYPE_CHECKING:
    from app.pipeline import Plan
    from app.routing import Route
    from app.runtime import Runtime

log = logging.getLogger("relay.pipeline")


class Recorder:
    """Collects what happened during one call and records it once."""

    def __init__(self, runtime: Runtime, call: InferenceCall) -> None:
        self.runtime = runtime
        self.call = call
        self.route: Route | None = None
        self.reservation: ratelimit.Reservation | None = None
        self.attempts = 0
        self.used: keypool.Candidate | None = None
        self.failed: list[HostKey] = []
        self.recorded = False

    def key_used(self, candidate: keypool.Candidate) -> None:
        self.used = candidate

    def key_failed(self, key: HostKey) -> None:
        self.failed.append(key)

    def record_rejection(self, exc: RelayError) -> None:
        """A call rejected after authentication still gets its usage event, with the error code."""
        if not self.recorded:
            self.record(status=exc.status, error_code=exc.code, usage=Usage())

    def finish_whole(self, plan: Plan, status: int, body: bytes, content_type: str) -> InferenceResult:
        """Record a whole (non-streamed) upstream answer and build the result."""
        usage = _usage_of(plan, body) if status < 300 else Usage()
        error_code = None if status < 300 else "upstream_error"
        pending = self.record(status=status, error_code=error_code, usage=usage, upstream_status=status,
                              payload=(self.call.body, body), later=self.call.record_later)
        if plan.canonical and status < 300:
            from adapters.canonical import from_shape

            body = json.dumps(from_shape(plan.adapter.shape, json.loads(body))).encode()
        return InferenceResult(status=status, body=body, content_type=content_type.split(";")[0],
                               error_code=error_code, usage=usage,
                               headers=self.reservation.headers() if self.reservation else {}, record=pending)

    def record(self, *, status: int, error_code: str | None, usage: Usage, upstream_status: int | None = None,
               streamed: bool = False, payload: tuple[Any, bytes] | None = None,
               later: bool = False) -> Callable[[Connection], None] | None:
        """Write the usage event, token counts, breaker changes and payload log in one transaction; with LATER,
        return that write for the caller's own transaction instead."""
        self.recorded = True
        writes = self._writes(self._event(status, error_code, usage, upstream_status, streamed), usage, payload)
        try:
            if later:
                return writes
            with self.runtime.pool.connection() as conn, conn.pipeline(), conn.transaction():
                writes(conn)  # pipelined: BEGIN, the writes and COMMIT in one round trip
            return None
        finally:
            if self.call.interrupter is not None and not streamed:
                self.call.interrupter.release()

    def _writes(self, event: UsageEvent, usage: Usage,
                payload: tuple[Any, bytes] | None) -> Callable[[Connection], None]:
        """The statements that record this call, as one function of a connection in a transaction."""
        policy = self.route.policy if self.route else None
        reservation, failed, used = self.reservation, list(self.failed), self.used
        log_payload = payload is not None and policy is not None and policy.payload_logging \
            and self.call.source == "live"
        payload_log = self._payload(payload) if log_payload and payload is not None else None

        def write(conn: Connection) -> None:
            record_usage(conn, event)
            if reservation is not None:
                ratelimit.add_tokens(conn, reservation, usage.total)
            if policy is not None:
                for key in failed:
                    keypool.record_failure(conn, policy, key)
                if used is not None:
                    keypool.record_success(conn, used, track_use=policy.key_selection == "least_recently_used")
            if payload_log is not None:
                write_payload_log(conn, payload_log)

        return write

    def _event(self, status: int, error_code: str | None, usage: Usage, upstream_status: int | None,
               streamed: bool) -> UsageEvent:
        call, route = self.call, self.route
        binding = route.binding if route else None
        extra: dict[str, Any] = {}
        if binding is not None:
            extra = {"model_resolved": binding.upstream_model, "host_id": binding.host.id,
                     "host_name": binding.host.name, "binding_id": binding.id, "adapter": binding.adapter,
                     "cost_nanos": cost_nanos(binding.pricing, usage) if status < 300 else None}
        model = call.body.get("model")
        return UsageEvent.for_caller(
            call.caller, request_id=call.request_id, source=call.source, status=status, policy_id=call.policy_id,
            started=call.started_at, route=call.route or None, upstream_status=upstream_status,
            error_code=error_code, model_requested=model if isinstance(model, str) else None,
            host_key_name=self.used.key.name if self.used else (self.failed[-1].name if self.failed else None),
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, cached_tokens=usage.cached_tokens,
            attempts=self.attempts, streamed=streamed, batch_id=call.batch_id, batch_idx=call.batch_idx, **extra)

    def _payload(self, payload: tuple[Any, bytes]) -> PayloadLog:
        request_body = json.dumps(payload[0], ensure_ascii=False).encode()
        return PayloadLog.capped(self.call.request_id, request_body, payload[1],
                                 self.runtime.settings.payload_log_max_bytes)


def _usage_of(plan: Plan, body: bytes) -> Usage:
    try:
        return plan.adapter.extract_usage(json.loads(body))
    except ValueError:
        log.warning("upstream answered 2xx with a body that is not JSON", extra={"path": plan.path})
        return Usage()
