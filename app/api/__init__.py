"""Blueprints, one per resource; registered here in one place."""

from __future__ import annotations

from flask_smorest import Api

from app.runtime import Runtime


def register_all(api: Api, runtime: Runtime) -> None:
    from app.api import admin, health

    api.register_blueprint(health.blp)
    admin.register(api)
    from app.api import metrics, usage

    usage.register(api)
    api.register_blueprint(metrics.blp)
    from app.api import batches

    api.register_blueprint(batches.blp)
