"""`GET /metrics`: Prometheus text format (every API worker process merged, plus state from Postgres/RabbitMQ).

The metrics name every tenant's policies, host keys, breaker states and item counts, so reading them takes a
bearer token: RELAY_METRICS_TOKEN (for the scraper), or the admin token.
"""

from __future__ import annotations

from flask import Response, current_app, request
from flask_smorest import Api, Blueprint

from app.observability.metrics import render_metrics
from app.observability.metrics_access import check_metrics_reader
from app.runtime import Runtime
from schemas.admin import RelayErrorSchema

blp = Blueprint("metrics", __name__, description="Prometheus metrics")


def register(api: Api) -> None:
    """Register the blueprint and the metrics token's security scheme in the OpenAPI document."""
    api.spec.components.security_scheme("metricsToken", {"type": "http", "scheme": "bearer",
                                                         "description": "RELAY_METRICS_TOKEN"})
    api.register_blueprint(blp)


@blp.route("/metrics")
@blp.doc(summary="Prometheus metrics (text exposition format); send `Authorization: Bearer $RELAY_METRICS_TOKEN`"
                 " (or the admin token)", security=[{"metricsToken": []}, {"adminToken": []}],
         responses={"200": {"description": "metrics", "content": {"text/plain": {"schema": {"type": "string"}}}}})
@blp.alt_response(401, schema=RelayErrorSchema, description="no token, or not the metrics or admin token")
def prometheus_metrics() -> Response:
    runtime: Runtime = current_app.extensions["relay"]
    require_metrics_reader(runtime)
    body, content_type = render_metrics(runtime)
    return Response(body, content_type=content_type, headers={"Cache-Control": "no-store"})


def require_metrics_reader(runtime: Runtime) -> None:
    """401 unless the request carries the metrics token or the admin token (compared in constant time)."""
    check_metrics_reader(runtime.settings, request.headers)
