"""Liveness and readiness probes."""

from __future__ import annotations

from flask import current_app
from flask.typing import ResponseReturnValue
from flask_smorest import Blueprint

from app.observability.health import check_readiness

blp = Blueprint("health", __name__, description="Liveness and readiness")
_STATUS = {"type": "object", "properties": {"status": {"type": "string", "enum": ["ok", "unavailable"]},
                                            "checks": {"type": "object", "additionalProperties": {"type": "string"}}},
           "required": ["status"]}
_ANSWER = {"content": {"application/json": {"schema": _STATUS}}}


@blp.route("/healthz")
@blp.doc(summary="The process is up", responses={"200": {"description": "up", **_ANSWER}})
def healthz() -> ResponseReturnValue:
    return {"status": "ok"}


@blp.route("/readyz")
@blp.doc(summary="Postgres and RabbitMQ are reachable (503 names the one that is not)",
         responses={"200": {"description": "ready", **_ANSWER}, "503": {"description": "not ready", **_ANSWER}})
def readyz() -> ResponseReturnValue:
    runtime = current_app.extensions["relay"]
    checks = check_readiness(runtime)
    ok = all(c == "ok" for c in checks.values())
    return {"status": "ok" if ok else "unavailable", "checks": checks}, 200 if ok else 503
