"""The upstream leg of the pipeline: try the policy's keys in order, with breakers and failover."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from app.catalog.model import HostKey
from app.db import autocommit
from app.errors import RelayError, UpstreamFailed
from app.observability.metrics import observe_upstream
from app.observability.tracing import get_tracing
from app.pipeline import keypool, upstream
from app.pipeline.backoff import get_backoff, retry_after_s
from app.pipeline.interrupt import Interrupted
from app.pipeline.keyhealth import get_key_health
from app.pipeline.plan import Plan
from app.pipeline.stream import stream_result
from app.pipeline.types import InferenceCall, InferenceResult

if TYPE_CHECKING:
    from app.pipeline.record import Recorder
    from app.runtime import Runtime

# Upstream answers that say "this key, not this request": try the next key.
RETRYABLE_STATUSES = frozenset({401, 403, 408, 429})
DEFAULT_RETRY_AFTER_S = 1.0  # when a key's 429 names no Retry-After


class AllKeysFailed(UpstreamFailed):
    code = "all_keys_failed"
    upstream_status: int | None = None  # the last key's upstream answer (None: it never answered)


class AllKeysRateLimited(AllKeysFailed):
    """Every key answered 429: the caller waits as the upstream asked (its shortest `Retry-After`), not a fault."""

    status = 429
    code = "all_keys_rate_limited"


class UpstreamReadFailed(AllKeysFailed):
    """The upstream connection broke while the answer was read (nothing can be retried on another key)."""

    code = "upstream_read_failed"


class NoKeyAvailable(RelayError):
    status = 503
    code = "no_key_available"


def is_retryable(status: int) -> bool:
    return status in RETRYABLE_STATUSES or status >= 500


def call_with_failover(runtime: Runtime, call: InferenceCall, plan: Plan, recorder: Recorder) -> InferenceResult:
    """Send the planned request with each candidate key until one answers with a non-retryable status."""
    policy = plan.route.policy
    candidates = keypool.order_candidates(get_key_health(runtime).health, policy, plan.route.binding.host.id)
    if not candidates:
        raise NoKeyAvailable(message=f"policy {policy.name!r} has no usable key for host "
                             f"{plan.route.binding.host.name!r} (none in its pool, or every breaker is open)")
    last, last_status = "no key was tried", None
    tracing = get_tracing(runtime)
    limited: list[float] | None = []  # each key's Retry-After while every key answers 429 (None: one did not)
    for candidate in candidates:
        if candidate.probe and not _claim_probe(runtime, plan, candidate):
            continue
        recorder.attempts += 1
        with tracing.span("relay.attempt", {"relay.attempt": recorder.attempts, "relay.key.id": str(candidate.key.id),
                                            "relay.key.probe": candidate.probe}) as span:
            response = _send(runtime, call, plan, candidate.key)
            if response is not None and not is_retryable(response.status_code):
                recorder.key_used(candidate)
                return _answer(call, plan, recorder, response)
            tracing.failed(span, str(response.status_code) if response is not None else "upstream_unreachable")
        recorder.key_failed(candidate.key)
        last = f"upstream status {response.status_code}" if response is not None else "connection failed or timed out"
        last_status = response.status_code if response is not None else None
        if limited is not None and last_status == 429 and response is not None:
            limited.append(retry_after_s(response.headers) or DEFAULT_RETRY_AFTER_S)
        else:
            limited = None
        if response is not None:
            response.close()
    raise _all_failed(plan.route.binding.host.name, last, last_status, limited)


def _all_failed(host: str, last: str, last_status: int | None, limited: list[float] | None) -> AllKeysFailed:
    """AllKeysFailed; AllKeysRateLimited with a `Retry-After` (the soonest key's) when every key tried said 429."""
    if limited:
        failed: AllKeysFailed = AllKeysRateLimited(
            message=f"every key of host {host!r} is rate-limited upstream; retry after the Retry-After header",
            headers={"Retry-After": str(max(1, math.ceil(min(limited))))})
    else:
        failed = AllKeysFailed(message=f"every key of host {host!r} failed; last: {last}")
    failed.upstream_status = last_status
    return failed


def _claim_probe(runtime: Runtime, plan: Plan, candidate: keypool.Candidate) -> bool:
    """Claim the probe in Postgres (exactly one caller of all replicas wins it), never from the cache."""
    with autocommit(runtime.pool) as conn:
        claimed = keypool.claim_probe(conn, plan.route.policy, candidate.key)
    if claimed:
        get_key_health(runtime).invalidate(candidate.key.id)
    return claimed


def _send(runtime: Runtime, call: InferenceCall, plan: Plan, key: HostKey) -> upstream.UpstreamResponse | None:
    """One upstream attempt; None on connection errors and timeouts, Interrupted when stopped on purpose. A batch
    call first waits its turn on a key that answered 429 lately (backoff.py), and tells it how the key answered."""
    settings = runtime.settings
    backoff = get_backoff(runtime) if call.source == "batch" else None
    if backoff is not None:
        backoff.wait_turn(key.id, call.deadline, call.interrupter.wait if call.interrupter else time.sleep)
    read_timeout = settings.upstream_read_timeout_s
    if call.deadline is not None:
        read_timeout = min(read_timeout, max(0.01, call.deadline - time.monotonic()))
    if call.interrupter is not None:
        call.interrupter.check()
    started = time.monotonic()
    host = plan.route.binding.host.name
    call.sent = True
    tracing = get_tracing(runtime)
    named = tracing.enabled  # the span's name and attributes are worked out only when tracing is on
    with tracing.span(_client_span_name(plan) if named else "", _client_attributes(plan) if named else None,
                      kind="client") as span:
        headers = _headers(plan, key)
        tracing.inject(headers)  # the upstream's parent: this attempt's client span
        try:
            with upstream.interruptible(call.interrupter):
                response = upstream.post(plan.route.binding.host.base_url.rstrip("/") + plan.path, headers=headers,
                                         body=plan.body, stream=True,
                                         timeout=(settings.upstream_connect_timeout_s, read_timeout))
        except upstream.UpstreamIOError:
            observe_upstream(host, "error", time.monotonic() - started)
            tracing.failed(span, "upstream_unreachable")
            _raise_if_stopped(call)
            return None
        span.set_attribute("http.response.status_code", response.status_code)
    observe_upstream(host, response.status_code, time.monotonic() - started)
    if backoff is not None:
        backoff.observe(key.id, response.status_code, response.headers)
    return response


def _headers(plan: Plan, key: HostKey) -> dict[str, str]:
    return {"content-type": "application/json", "accept": "text/event-stream" if plan.stream else "application/json",
            "user-agent": "relay/1.0", **plan.adapter.auth_headers(key.secret())}


def _client_span_name(plan: Plan) -> str:
    return f"{'embeddings' if plan.adapter.shape == 'embeddings' else 'chat'} {plan.route.binding.upstream_model}"


def _client_attributes(plan: Plan) -> dict[str, str | int]:
    """The upstream call's attributes (GenAI and HTTP client conventions): never its URL's path or credentials."""
    parts = urlsplit(plan.route.binding.host.base_url)
    return {"gen_ai.operation.name": "embeddings" if plan.adapter.shape == "embeddings" else "chat",
            "gen_ai.provider.name": plan.adapter.provider,
            "gen_ai.request.model": plan.route.binding.upstream_model, "http.request.method": "POST",
            "server.address": parts.hostname or "",
            "server.port": parts.port or (443 if parts.scheme == "https" else 80)}


def _raise_if_stopped(call: InferenceCall) -> None:
    if call.interrupter is not None and call.interrupter.interrupted:
        raise Interrupted(call.interrupter.reason or "interrupted")
    if call.deadline is not None and time.monotonic() >= call.deadline:
        raise Interrupted("time_limit")


def _answer(call: InferenceCall, plan: Plan, recorder: Recorder,
            response: upstream.UpstreamResponse) -> InferenceResult:
    """Turn the upstream answer into the result: whole body, or a pass-through stream."""
    content_type = response.headers.get("content-type", "application/json")
    if plan.stream and response.status_code < 300 and content_type.startswith("text/event-stream"):
        return stream_result(call, plan, recorder, response)
    try:
        with upstream.interruptible(call.interrupter):
            body = response.content
    except upstream.UpstreamIOError:
        _raise_if_stopped(call)
        raise UpstreamReadFailed(message="the upstream connection broke while reading the answer") from None
    finally:
        response.close()
    return recorder.finish_whole(plan, response.status_code, body, content_type)
