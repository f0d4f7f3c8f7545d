"""The web console: static pages served by Relay itself (no build step, no CDN) under /console/.

The pages call the JSON API with `Authorization: Bearer`, holding the secret in the tab's sessionStorage: no
cookie carries it, so no other site can make a browser send it. A strict Content-Security-Policy allows only
Relay's own scripts, styles and API.
"""

from __future__ import annotations

import json
from pathlib import Path

from flask import Blueprint, Flask, Response, send_from_directory
from flask.typing import ResponseReturnValue

from adapters.registry import ADAPTERS, batch_shapes, openai_batch_endpoints

STATIC = Path(__file__).resolve().parent.parent / "console" / "static"
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self';"
    " form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

blp = Blueprint("console", __name__, url_prefix="/console")


def register(app: Flask) -> None:
    """Serve the console (kept out of the OpenAPI document: it is pages, not API)."""
    app.register_blueprint(blp)


@blp.after_request
def _secure(response: Response) -> Response:
    response.headers.update(HEADERS)
    return response


@blp.route("/")
def index() -> ResponseReturnValue:
    """The console's one page (`/console` redirects here)."""
    return send_from_directory(STATIC, "index.html", mimetype="text/html")


@blp.route("/shapes.js")
def shapes() -> ResponseReturnValue:
    """The batch shapes as a JavaScript module, from the shape registry: the console has no list of its own."""
    return Response(shapes_module(), mimetype="text/javascript")


def shapes_module() -> str:
    """`SHAPES` ([name, title] per batch shape) and `SHAPE_OF_ENDPOINT` (OpenAI batch endpoint → shape)."""
    pairs = [[shape, ADAPTERS[shape].title] for shape in batch_shapes()]
    return (f"export const SHAPES = {json.dumps(pairs)};\n"
            f"export const SHAPE_OF_ENDPOINT = {json.dumps(openai_batch_endpoints())};\n")


@blp.route("/<filename>")
def asset(filename: str) -> ResponseReturnValue:
    """One file of the console (flat folder; anything else is a 404)."""
    return send_from_directory(STATIC, filename)
