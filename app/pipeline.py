"""Run one inference call for a caller: the only place the pipeline's steps are sequenced.

authenticate (done by the caller) → policy → route → shape check → rate limit → key pool → upstream
→ usage event (+ rate-limit tokens, breakers) → payload log. Live routes and batch items both call
run_inference(); nothing here assumes an HTTP request.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from adapters import get_adapter
from adapters.base import ShapeAdapter
from adapters.canonical import to_shape
from adapters.errors import AdapterError
from adapters.shapes import plan_dispatch
from app import routing
from app.catalog.cache import get_catalog
from app.catalog.model import Policy
from app.errors import RateLimited, RelayError
from app.metrics import count_rate_limited
from app.pipeline_calls import call_with_failover
from app.pipeline_record import Recorder
from app.pipeline_types import InferenceCall, InferenceResult
from app.ratelimit import Reservation, reserve
from app.runtime import Runtime


class CrossShape(RelayError):
    """A request shape that the routed binding's adapter cannot take."""

    status = 400
    code = "cross_shape_unsupported"


@dataclass(frozen=True)
class Plan:
    """Where and how the upstream call goes."""

    route: routing.Route
    adapter: ShapeAdapter  # the wire shape sent upstream (auth, usage extraction)
    path: str
    body: bytes
    stream: bool
    canonical: bool  # translate the answer back to /v1/generate's shape


def run_inference(runtime: Runtime, call: InferenceCall) -> InferenceResult:
    """Run CALL through the pipeline; RelayError for rejections, the upstream's status otherwise."""
    call.started_at = call.started_at or time.time()
    recorder = Recorder(runtime, call)
    try:
        snapshot = get_catalog(runtime).snapshot()
        policy = routing.check_policy(snapshot.policies.get(call.policy_id))
        route = routing.resolve(snapshot.models, policy, call.body.get("model"))
        recorder.route = route
        plan = _plan(call, route)
        reservation = _reserve(runtime, policy)
        recorder.reservation = reservation
        return call_with_failover(runtime, call, plan, recorder)
    except RelayError as exc:
        recorder.record_rejection(exc)
        raise


def _plan(call: InferenceCall, route: routing.Route) -> Plan:
    binding = route.binding
    try:
        dispatch = plan_dispatch(call.shape, binding.adapter, binding.host.name, batch=call.source == "batch")
    except AdapterError as exc:
        raise CrossShape(exc.code, exc.message, status=exc.status) from exc
    adapter = get_adapter(dispatch.adapter)
    body = call.body
    if dispatch.translate:
        body = to_shape(body, dispatch.adapter)
    if adapter.shape == call.shape or dispatch.translate:
        prepared = adapter.prepare_body(body, binding.upstream_model)
    else:  # sent as it is to another shape's endpoint: only the model is rewritten
        prepared = {**body, "model": binding.upstream_model}
    return Plan(route=route, adapter=adapter, path=dispatch.path,
                body=json.dumps(prepared, separators=(",", ":"), ensure_ascii=False).encode(),
                stream=adapter.is_stream(prepared), canonical=dispatch.translate)


def _reserve(runtime: Runtime, policy: Policy) -> Reservation | None:
    if not policy.rate_limits:
        return None
    try:
        with runtime.pool.connection() as conn:
            return reserve(conn, policy.rate_limits)
    except RateLimited:
        count_rate_limited(policy.name)
        raise
