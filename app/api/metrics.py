"""`GET /metrics`: Prometheus text format (every API worker process merged, plus state from Postgres/RabbitMQ)."""

from __future__ import annotations

from flask import Response, current_app
from flask_smorest import Blueprint

from app.observability.metrics import render_metrics

blp = Blueprint("metrics", __name__, description="Prometheus metrics")


@blp.route("/metrics")
@blp.doc(summary="Prometheus metrics (text exposition format); unauthenticated, bind the API to a private network",
         responses={"200": {"description": "metrics", "content": {"text/plain": {"schema": {"type": "string"}}}}})
def prometheus_metrics() -> Response:
    body, content_type = render_metrics(current_app.extensions["relay"])
    return Response(body, content_type=content_type, headers={"Cache-Control": "no-store"})
