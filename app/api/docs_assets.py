"""The Swagger UI files of `/docs`, served by Relay itself from the pinned swagger-ui-bundle package, so the
interactive docs work on an install with no internet access (no CDN)."""

from __future__ import annotations

from flask import Blueprint, Response, abort, send_from_directory

ASSETS_URL = "/docs/assets/"
_FILES = frozenset({"swagger-ui.css", "swagger-ui-bundle.js", "swagger-ui-standalone-preset.js",
                    "favicon-16x16.png", "favicon-32x32.png"})

blp = Blueprint("docs_assets", __name__)


@blp.route(ASSETS_URL + "<name>")
def swagger_ui_asset(name: str) -> Response:
    """One of the Swagger UI files the docs page loads (cacheable: the package version pins them)."""
    if name not in _FILES:
        abort(404)
    from swagger_ui_bundle import swagger_ui_path

    return send_from_directory(swagger_ui_path, name, max_age=86_400)
