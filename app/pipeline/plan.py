"""The plan of one upstream call: where it goes, in which wire shape, with which body."""

from __future__ import annotations

import json
from dataclasses import dataclass

from adapters import get_adapter
from adapters.base import ShapeAdapter
from adapters.canonical import to_shape
from adapters.errors import AdapterError
from adapters.shapes import plan_dispatch
from app.errors import RelayError
from app.pipeline import routing
from app.pipeline.types import InferenceCall


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


def make_plan(call: InferenceCall, route: routing.Route) -> Plan:
    """How CALL goes upstream on ROUTE's binding; CrossShape when the binding cannot take its shape."""
    binding = route.binding
    try:
        dispatch = plan_dispatch(call.shape, binding.adapter, binding.host.name, batch=call.source == "batch")
        body = to_shape(call.body, dispatch.adapter) if dispatch.translate else call.body  # a shape may have none
    except AdapterError as exc:
        raise CrossShape(exc.message, code=exc.code, status=exc.status) from exc
    adapter = get_adapter(dispatch.adapter)
    if adapter.shape == call.shape or dispatch.translate:
        prepared = adapter.prepare_body(body, binding.upstream_model)
    else:  # sent as it is to another shape's endpoint: only the model is rewritten
        prepared = {**body, "model": binding.upstream_model}
    return Plan(route=route, adapter=adapter, path=dispatch.path,
                body=json.dumps(prepared, separators=(",", ":"), ensure_ascii=False).encode(),
                stream=adapter.is_stream(prepared), canonical=dispatch.translate)
