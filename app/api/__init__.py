"""Blueprints, one per resource; registered here in one place."""

from __future__ import annotations

from flask_smorest import Api

from app.runtime import Runtime


def register_all(api: Api, runtime: Runtime) -> None:
    from app.api import admin, batches, health, inference, metrics, usage
    from app.api.compat import anthropic_batches, openai_batches

    api.register_blueprint(health.blp)
    admin.register(api)
    api.register_blueprint(inference.blp)
    api.register_blueprint(batches.blp)
    api.register_blueprint(openai_batches.blp)
    api.register_blueprint(anthropic_batches.blp)
    usage.register(api)
    metrics.register(api)
