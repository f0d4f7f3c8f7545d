"""Run one inference call for a caller: the only place the pipeline's steps are sequenced.

authenticate (done by the caller) → policy → route → shape check → rate limit → key pool → upstream
→ usage event (+ rate-limit tokens, breakers) → payload log. Live routes and batch items both call
run_inference(); nothing here assumes an HTTP request.
"""

from __future__ import annotations

import time

from app.access.cache import get_catalog
from app.catalog.model import Policy
from app.errors import RateLimited, RelayError
from app.observability.metrics import count_rate_limited
from app.observability.tracing import get_tracing
from app.pipeline import routing
from app.pipeline.calls import call_with_failover
from app.pipeline.plan import Plan, make_plan
from app.pipeline.ratelimit import Reservation, get_limiter
from app.pipeline.record import Recorder
from app.pipeline.types import InferenceCall, InferenceResult
from app.runtime import Runtime


def run_inference(runtime: Runtime, call: InferenceCall) -> InferenceResult:
    """Run CALL through the pipeline; RelayError for rejections, the upstream's status otherwise."""
    call.started_at = call.started_at or time.time()
    recorder = Recorder(runtime, call)
    recorder.reservation = call.reservation
    try:
        with get_tracing(runtime).span("relay.route", {"gen_ai.request.model": str(call.body.get("model"))[:200],
                                                       "relay.shape": call.shape, "relay.source": call.source}):
            plan = _plan(runtime, call, recorder)
        return call_with_failover(runtime, call, plan, recorder)
    except RelayError as exc:
        recorder.record_rejection(exc)
        raise


def _plan(runtime: Runtime, call: InferenceCall, recorder: Recorder) -> Plan:
    """Policy, route, plan and admission under the rate limits: what a call is refused by before any upstream."""
    snapshot = get_catalog(runtime).snapshot()
    policy = routing.check_policy(snapshot.policies.get(call.policy_id))
    route = routing.resolve(snapshot.models, policy, call.body.get("model"))
    recorder.route = route
    plan = make_plan(call, route)
    get_tracing(runtime).annotate({"relay.policy": policy.name, "relay.host": route.binding.host.name,
                                   "gen_ai.provider.name": plan.adapter.provider,
                                   "relay.upstream_model": route.binding.upstream_model})
    if recorder.reservation is None:
        recorder.reservation = _reserve(runtime, policy, batch=call.source == "batch")
    return plan


def _reserve(runtime: Runtime, policy: Policy, *, batch: bool) -> Reservation | None:
    """Admission under every rate limit of POLICY, from this process's leases (batch items: within the policy's
    batch share of each limit)."""
    if not policy.rate_limits:
        return None
    try:
        return get_limiter(runtime).admit(policy.rate_limits, batch=batch,
                                          share=policy.batch_share if batch else 1.0)
    except RateLimited:
        count_rate_limited(policy.name)
        raise
