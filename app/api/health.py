"""Liveness and readiness probes."""

from __future__ import annotations

from flask import current_app
from flask.typing import ResponseReturnValue
from flask_smorest import Blueprint

from app.observability.health import check_readiness

blp = Blueprint("health", __name__, description="Liveness and readiness")


@blp.route("/healthz")
@blp.doc(summary="The process is up")
def healthz() -> ResponseReturnValue:
    return {"status": "ok"}


@blp.route("/readyz")
@blp.doc(summary="Postgres and RabbitMQ are reachable (503 names the one that is not)")
def readyz() -> ResponseReturnValue:
    runtime = current_app.extensions["relay"]
    checks = check_readiness(runtime)
    ok = all(c == "ok" for c in checks.values())
    return {"status": "ok" if ok else "unavailable", "checks": checks}, 200 if ok else 503
