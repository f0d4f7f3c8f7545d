"""The API's Flask app: `create_app` builds it (what `relay api` serves, one per server process), with its
blueprints, the console, the request hooks and the error handlers."""

from __future__ import annotations

import logging
import uuid

import psycopg
from flask import Flask, g, request
from flask.typing import ResponseReturnValue
from flask_smorest import Api
from psycopg_pool import PoolTimeout
from werkzeug.exceptions import ClientDisconnected, HTTPException

from app.api.docs_assets import ASSETS_URL
from app.api.docs_assets import blp as docs_blueprint
from app.api.openapi import build_api
from app.errors import (
    DatabaseUnavailable,
    InternalError,
    RelayError,
    RequestTimeout,
    ValidationFailed,
    from_http_exception,
)
from app.observability.metrics import install_request_metrics
from app.observability.request_tracing import install_request_tracing
from app.observability.tracing import get_tracing
from app.payload_backends import payload_store
from app.runtime import Runtime
from app.settings import Settings

log = logging.getLogger("relay.api")


def create_app(settings: Settings | None = None, runtime: Runtime | None = None) -> Flask:
    """Build the Flask app; no work happens at import time."""
    settings = settings or (runtime.settings if runtime else Settings.from_env())
    app = Flask("relay")
    app.config.update(
        API_TITLE="Relay",
        API_VERSION="1.0",
        OPENAPI_VERSION="3.0.3",
        OPENAPI_URL_PREFIX="/",
        OPENAPI_JSON_PATH="openapi.json",
        OPENAPI_SWAGGER_UI_PATH="/docs",
        OPENAPI_SWAGGER_UI_URL=ASSETS_URL,  # served by Relay (app/api/docs_assets.py): no CDN
        MAX_CONTENT_LENGTH=max(settings.batch_max_bytes, settings.max_request_bytes) + 1024 * 1024,
        JSON_SORT_KEYS=False,
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]
    runtime = runtime or Runtime.build(settings)
    _plug_into_engine()
    app.extensions["relay"] = runtime
    payload_store(runtime)  # made now, not on a request: an S3 client takes about half a second to build
    api = build_api(app)
    app.extensions["relay_api"] = api
    _register_blueprints(api, runtime)
    _register_console(app)

    app.register_blueprint(docs_blueprint)
    _register_request_hooks(app)
    install_request_tracing(app, get_tracing(runtime))
    install_request_metrics(app)
    _register_error_handlers(app)
    return app


def _plug_into_engine() -> None:
    from app.wiring import plug_into_engine

    plug_into_engine()


def _register_blueprints(api: Api, runtime: Runtime) -> None:
    from app.api import register_all

    register_all(api, runtime)


def _register_console(app: Flask) -> None:
    from app.api import console

    console.register(app)


def _register_request_hooks(app: Flask) -> None:
    @app.before_request
    def assign_request_id() -> None:
        incoming = request.headers.get("x-request-id", "")
        g.request_id = incoming if _valid_request_id(incoming) else uuid.uuid4().hex

    @app.before_request
    def refuse_nul_in_query() -> None:
        # No text a route keeps or looks up can hold NUL (Postgres refuses it in text): one check for every route
        query = request.query_string
        if b"%00" in query or b"\x00" in query:
            raise ValidationFailed("a query argument holds a NUL character")

    @app.after_request
    def add_request_id(response):  # type: ignore[no-untyped-def]
        request_id = getattr(g, "request_id", "")
        # added, not set (a set scans every header): nothing but this hook names them; request-id is the name
        # Anthropic's SDK reads (`request_id`)
        response.headers.extend((("x-request-id", request_id), ("request-id", request_id)))
        return response


def _valid_request_id(value: str) -> bool:
    """A caller-supplied request id is kept when it is short, ASCII and alphanumeric (dashes allowed)."""
    return 8 <= len(value) <= 128 and value.isascii() and value.replace("-", "").isalnum()


def _register_error_handlers(app: Flask) -> None:
    @app.errorhandler(RelayError)
    def relay_error(exc: RelayError) -> ResponseReturnValue:
        return exc.to_dict(), exc.status, exc.headers

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> ResponseReturnValue:
        return relay_error(from_http_exception(exc))

    @app.errorhandler(psycopg.OperationalError)
    @app.errorhandler(PoolTimeout)
    def database_unavailable(exc: Exception) -> ResponseReturnValue:
        log.warning("database unavailable: %s", type(exc).__name__)
        return relay_error(DatabaseUnavailable(message="the database is unavailable; retry shortly",
                                               headers={"Retry-After": "5"}))

    @app.errorhandler(ClientDisconnected)
    def request_timeout(exc: ClientDisconnected) -> ResponseReturnValue:
        # The body stopped arriving: the server's per-connection I/O deadline passed (app/api/server.py).
        return relay_error(RequestTimeout(message="the request body did not arrive in time",
                                          headers={"Connection": "close"}))

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> ResponseReturnValue:
        log.exception("unhandled error", extra={"request_id": getattr(g, "request_id", None)})
        return relay_error(InternalError(message="internal error"))

