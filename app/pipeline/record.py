"""The pipeline's bookkeeping: the usage event, rate-limit tokens, breaker updates and payload logs, gathered into
one usage record when the call ends (or is rejected) and handed to the process's usage writer, which commits it a
few milliseconds later with the others pending, off the answer's path (a batch item's record is left on the call,
for the item's final commit). Breaker outcomes also go to the process's KeyHealthCache at once."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any
from uuid import UUID

import psycopg
from psycopg_pool import PoolTimeout

from adapters.base import Usage
from app.catalog.model import HostKey, Policy
from app.db import Statement, autocommit
from app.errors import RelayError
from app.observability.tracing import get_tracing
from app.pipeline import keypool, ratelimit
from app.pipeline.keyhealth import get_key_health
from app.pipeline.payload_log import PayloadLog, payload_log_statement
from app.pipeline.plan import Plan
from app.pipeline.ratelimit import get_limiter
from app.pipeline.types import InferenceCall, InferenceResult
from app.usage.events import UsageEvent, cost_nanos
from app.usage.writer import GroupWriter, UsageRecord

if TYPE_CHECKING:
    from app.pipeline.routing import Route
    from app.runtime import Runtime

log = logging.getLogger("relay.pipeline")
WRITER_SERVICE = "usage_writer"


def usage_writer(runtime: Runtime) -> GroupWriter:
    """This process's writer of live calls' usage records (flushed and stopped by Runtime.close)."""
    return runtime.service(WRITER_SERVICE, lambda: GroupWriter(runtime.pool, name="relay-live-usage-writer"))


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
        self.unwritten: list[Statement] = []  # breaker writes of a live call that could not be made at once
        self.recorded = False
        self.trace_context = get_tracing(runtime).current_context()  # a stream's usage is written after its call

    def key_used(self, candidate: keypool.Candidate) -> None:
        self.used = candidate
        if self.call.record_later or self.route is None:
            return
        if _closes_breaker(candidate):
            self._write_breaker(keypool.success_statement(candidate, track_use=True), candidate.key.id)
        elif self.route.policy.key_selection == "least_recently_used":
            get_key_health(self.runtime).note_use(candidate.key.id)

    def key_failed(self, key: HostKey) -> None:
        self.failed.append(key)
        if not self.call.record_later and self.route is not None:
            self._write_breaker(keypool.failure_statement(self.route.policy, key), key.id)

    def _write_breaker(self, statement: Statement | None, key_id: UUID) -> None:
        """A live call's failure or closing breaker, written at once (it follows an upstream answer or error, not on
        the fast path) so that the next call, on this replica or another, sees it; the usage record retries it."""
        if statement is None:
            return
        try:
            with autocommit(self.runtime.pool) as conn:
                conn.execute(*statement)
        except (psycopg.Error, PoolTimeout) as exc:
            log.warning("breaker write failed (%s); left to the usage writer", type(exc).__name__)
            self.unwritten.append(statement)
        get_key_health(self.runtime).invalidate(key_id)

    def record_rejection(self, exc: RelayError) -> None:
        """A call rejected after authentication still gets its usage event, with the error code."""
        if not self.recorded:
            self.record(status=exc.status, error_code=exc.code, usage=Usage(),
                        upstream_status=getattr(exc, "upstream_status", None))

    def finish_whole(self, plan: Plan, status: int, body: bytes, content_type: str) -> InferenceResult:
        """Record a whole (non-streamed) upstream answer and build the result."""
        usage = _usage_of(plan, body) if status < 300 else Usage()
        error_code = None if status < 300 else "upstream_error"
        self.record(status=status, error_code=error_code, usage=usage, upstream_status=status,
                    payload=(self.call.body, body))
        if plan.canonical and status < 300:
            from adapters.canonical import from_shape

            body = json.dumps(from_shape(plan.adapter.shape, json.loads(body))).encode()
        return InferenceResult(status=status, body=body, content_type=content_type.split(";")[0],
                               error_code=error_code, usage=usage,
                               headers=self.reservation.headers() if self.reservation else {})

    def record(self, *, status: int, error_code: str | None, usage: Usage, upstream_status: int | None = None,
               streamed: bool = False, payload: tuple[Any, bytes] | None = None, counted: bool = True) -> None:
        """Gather the usage event and its side writes into one record: queued on the usage writer (live calls), or
        left on the call for the batch item's final commit (record_later). COUNTED is false when USAGE is not the
        call's whole usage (a stream that ended before its usage came): the cost is then null, not a guess."""
        self.recorded = True
        attributes = {"gen_ai.usage.input_tokens": usage.input_tokens,
                      "gen_ai.usage.output_tokens": usage.output_tokens, "relay.status": status,
                      "relay.usage.deferred": self.call.record_later}
        with get_tracing(self.runtime).span("relay.usage", attributes, parent=self.trace_context):
            get_limiter(self.runtime).settle(self.reservation, usage.total)
            event = self._event(status, error_code, usage, upstream_status, streamed, counted)
            extra = self._statements(usage, payload)
            try:
                if self.call.record_later:
                    self.call.pending = UsageRecord(event, tuple(extra))
                else:
                    usage_writer(self.runtime).record(UsageRecord(event, tuple(extra)))
            finally:
                if self.call.interrupter is not None and not streamed:
                    self.call.interrupter.release()

    def _statements(self, usage: Usage, payload: tuple[Any, bytes] | None) -> list[Statement]:
        """The side writes of this call (each key appears once: it is either the used one or failed once)."""
        statements: list[Statement] = []
        policy = self.route.policy if self.route else None
        if policy is None:
            return statements
        statements += self._breaker_statements(policy)
        if payload is not None and policy.payload_logging and self.call.source == "live":
            statements.append(payload_log_statement(self._payload(payload)))
        return statements

    def _breaker_statements(self, policy: Policy) -> list[Statement]:
        """The breaker writes left for the record: all of them for a batch item (committed with its final state);
        for a live call the last use of least-recently-used selection and whatever could not be written at once."""
        track_use = policy.key_selection == "least_recently_used"
        if not self.call.record_later:
            statements = list(self.unwritten)
            if self.used is not None and track_use and not _closes_breaker(self.used):
                statements.append(keypool.touch_statement(self.used.key))
            return statements
        statements = [keypool.failure_statement(policy, key) for key in dict.fromkeys(self.failed)]
        if self.used is not None:
            success = keypool.success_statement(self.used, track_use=track_use)
            statements += [success] if success is not None else []
        return statements

    def _event(self, status: int, error_code: str | None, usage: Usage, upstream_status: int | None,
               streamed: bool, counted: bool) -> UsageEvent:
        call, route = self.call, self.route
        binding = route.binding if route else None
        extra: dict[str, Any] = {}
        if binding is not None:
            extra = {"model_resolved": binding.upstream_model, "host_id": binding.host.id,
                     "host_name": binding.host.name, "binding_id": binding.id, "adapter": binding.adapter,
                     "cost_nanos": cost_nanos(binding.pricing, usage) if status < 300 and counted else None}
        model = call.body.get("model")
        return UsageEvent.for_caller(
            call.caller, request_id=call.request_id, source=call.source, status=status, policy_id=call.policy_id,
            started=call.started_at, route=call.route or None, upstream_status=upstream_status,
            error_code=error_code, model_requested=model if isinstance(model, str) else None,
            host_key_name=self.used.key.name if self.used else (self.failed[-1].name if self.failed else None),
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, cached_tokens=usage.cached_tokens,
            attempts=self.attempts, streamed=streamed, batch_id=call.batch_id, batch_idx=call.batch_idx,
            custom_id=call.custom_id, **extra)

    def _payload(self, payload: tuple[Any, bytes]) -> PayloadLog:
        request_body = json.dumps(payload[0], ensure_ascii=False).encode()
        return PayloadLog.capped(self.call.request_id, request_body, payload[1],
                                 self.runtime.settings.payload_log_max_bytes)


def _closes_breaker(candidate: keypool.Candidate) -> bool:
    """A success on this key resets a failure count or an open breaker."""
    return bool(candidate.health.failures) or candidate.health.opened_until is not None


def _usage_of(plan: Plan, body: bytes) -> Usage:
    try:
        return plan.adapter.extract_usage(json.loads(body))
    except ValueError:
        log.warning("upstream answered 2xx with a body that is not JSON", extra={"path": plan.path})
        return Usage()
